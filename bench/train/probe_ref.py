# SPDX-License-Identifier: MIT
"""The gradient probe's reference gradients and the decomposition of a
batch gradient's error, at one frozen checkpoint.

The verifier is exact match, so with r = +-1 and p(x) = pi(a*|x) (one
teacher-forced pass) the true policy gradient of a prompt's expected
reward 2p - 1 is exact:

    E_o[(r - b) grad log pi(o|x)] = 2 grad p(x) = 2 p grad log pi(a*|x)

for any baseline b (sum of log-probabilities). R0 is its mean over the
reference prompts. The trainer's loss uses the mean over a completion's
tokens, l(o) = log pi(o|x) / |o|; then the baseline does not drop out
(E_o grad l(o) = grad E_o[1/|o|] is not 0), and the gradient the bench's
estimator aims at, with the exact baseline b* = 2p - 1, is

    g_x = E_o[(r - b*) grad l(o)] = 2 p (grad l(a*) - h_x),
    h_x = E_o grad l(o),

exact but for h_x, estimated from M samples of the prompt. R1, the
probe's reference, is the mean of g_x over N prompts of the regime's task
(the policy's own distribution of prompts, as a batch draws them); R2 the
mean of g_x / sigma*(p), sigma* = 2 sqrt(p (1 - p)) (floored at 0.01),
what the normalised modes aim at with an exact baseline. The remaining
error of R1 (its prompts are a sample) is estimated and reported.

The decomposition, per prompt (each an unbiased estimate from the M
samples), in the identity metric and in Adam's (vectors scaled by D,
Adam's preconditioner 1 / (sqrt(v_hat) + eps) at its next step from the
checkpoint's state, grads.next_preconditioner, for a typical batch):
  Vb  ||g_x - g*||^2, the between-prompt variance (E over prompts)
  Vw  E_o ||(r - b*) grad l(o) - g_x||^2, the within-prompt variance of
      one sample's term (k samples: Vw / k)
  S   E_o ||grad l(o)||^2, what a baseline error e multiplies:
      the term e * mean_i grad l(o_i) has E||.||^2 = e^2 ((S - H)/k + H)
  H   ||h_x||^2
by bins of p, so that a batch's error can be predicted from its prompts'
p, the samples each keeps and its baseline errors (probe_stats.predict).
"""

import time
from typing import Callable, Optional

import numpy as np
import torch

import grads
import model as M
import task

# Bins of a prompt's success rate for the decomposition (most prompts of
# the task lie near 0 after the warm-up).
P_BINS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.95, 0.99,
          1.0 + 1e-9)
SIGMA_FLOOR = 0.01


def p_bin(p) -> np.ndarray:
    return np.clip(np.searchsorted(P_BINS, np.asarray(p), side="right") - 1,
                   0, len(P_BINS) - 2)


def reference(policy: M.TinyLM, adam: dict, heldout, lengths,
              name: str, n_prompts: int, n_samples: int, chunk: int = 96,
              progress: Optional[Callable[[str], None]] = None) -> dict:
    """R0, R1, R2 (float64 vectors), Adam's metric D (the next step's
    preconditioner for a typical batch of the bench: k = 4, 64 prompts,
    its per-coordinate second moment from the decomposition) and the
    decomposition's statistics in both metrics."""
    if n_samples < 2:
        raise ValueError("the reference needs at least 2 samples a prompt "
                         "(the within-prompt variance)")
    t0 = time.time()
    stream = task.PromptStream(heldout, seed=f"{name}-ref", lengths=lengths)
    prompts = stream.take(n_prompts)
    rng = np.random.default_rng(list(name.encode()) + [7])
    P = adam["v"].numel()
    R = {k: torch.zeros(P, dtype=torch.float64) for k in ("R0", "R1", "R2")}
    nb = len(P_BINS) - 1
    # Per bin of p, per coordinate: sums over the bin's prompts of g_hat,
    # g_hat^2, the noise of g_hat^2, Vw, S and H (any diagonal metric is
    # applied at the end), and the bin's prompt count and p.
    acc = {k: torch.zeros(nb, P, dtype=torch.float64)
           for k in ("g", "g2", "varg", "Vw", "S", "H")}
    cnt, psum = np.zeros(nb), np.zeros(nb)
    Msm = n_samples
    for c0 in range(0, n_prompts, chunk):
        ps = prompts[c0:c0 + chunk]
        c = len(ps)
        p = torch.tensor(M.success_prob(policy, ps).numpy(), dtype=torch.float64)
        ans = [task.answer(q) for q in ps]
        U = rng.random((c * Msm, task.MAX_ANSWER))
        rep = [q for q in ps for _ in range(Msm)]
        outs = grads.sample_from_uniforms(policy, rep, U)
        G = grads.per_seq_grads(policy, ps + rep, ans + outs).double()
        A, S = G[:c], G[c:].reshape(c, Msm, P)
        correct = torch.tensor([[outs[i * Msm + m] == ans[i] for m in range(Msm)]
                                for i in range(c)], dtype=torch.float64)
        L = torch.tensor([len(a) for a in ans], dtype=torch.float64)
        hbar = S.mean(1)
        ghat = 2 * p[:, None] * (A - hbar)
        v = 2 * (correct - p[:, None])[:, :, None] * S
        sig = torch.clamp(2 * torch.sqrt(p * (1 - p)), min=SIGMA_FLOOR)
        R["R0"] += ((2 * p * L)[:, None] * A).sum(0)
        R["R1"] += ghat.sum(0)
        R["R2"] += (ghat / sig[:, None]).sum(0)
        s2 = ((S - hbar[:, None]) ** 2).sum(1) / (Msm - 1)   # (c, P)
        per = dict(g=ghat, g2=ghat ** 2, varg=4 * p[:, None] ** 2 * s2 / Msm,
                   Vw=((v - v.mean(1, keepdim=True)) ** 2).sum(1) / (Msm - 1),
                   S=(S ** 2).mean(1), H=hbar ** 2 - s2 / Msm)
        b = torch.tensor(p_bin(p.numpy()))
        for k, x in per.items():
            acc[k].index_add_(0, b, x)
        np.add.at(cnt, b.numpy(), 1)
        np.add.at(psum, b.numpy(), p.numpy())
        if progress and (c0 // chunk) % 8 == 7:
            progress(f"reference {c0 + c}/{n_prompts} prompts "
                     f"({time.time() - t0:.0f} s)")
    N = n_prompts
    for k in R:
        R[k] /= N
    tot = {k: x.sum(0) for k, x in acc.items()}
    # Per coordinate: Vb_i and Vw_i, and so a typical batch's second
    # moment (k = 4 samples of 64 prompts): Adam's metric folds it in.
    vb_i = (tot["g2"] - N * R["R1"] ** 2) / (N - 1) - tot["varg"] / N
    g2_batch = R["R1"] ** 2 + (vb_i.clamp(min=0) + tot["Vw"] / N / 4) / 64
    D = grads.next_preconditioner(adam, g2_batch)
    st = dict(n_prompts=N, n_samples=Msm, p_mean=float(psum.sum() / N),
              p_below_01=float(cnt[:3].sum() / N), seconds=time.time() - t0,
              adam_step=adam["t"])
    for label, w in (("I", torch.ones(P, dtype=torch.float64)), ("D", D ** 2)):
        def dot(a, c):
            return float((a * c * w).sum())
        R1 = R["R1"]
        n2 = dot(R1, R1)
        var_x = (float(tot["g2"] @ w) - N * n2) / (N - 1)   # Var_x of g_hat
        var_ref = var_x / N                                  # the error of R1
        m = dict(var_ref=var_ref, norm2=n2 - var_ref,
                 Vb=var_x - float(tot["varg"] @ w) / N,
                 Vw=float(tot["Vw"] @ w) / N, S=float(tot["S"] @ w) / N,
                 H=float(tot["H"] @ w) / N,
                 cos_R0_R1=dot(R["R0"], R1) / np.sqrt(dot(R["R0"], R["R0"]) * n2),
                 cos_R2_R1=dot(R["R2"], R1) / np.sqrt(dot(R["R2"], R["R2"]) * n2))
        bins = []
        for i in range(nb):
            n = cnt[i]
            if n < 2:
                bins.append(None)
                continue
            mb = acc["g"][i] / n
            # E[||g_x - g*||^2 | bin] = E||g_x||^2 - 2 E[g_x|bin].g* + ||g*||^2
            eg2 = float((acc["g2"][i] - acc["varg"][i]) @ w) / n
            bins.append(dict(n=int(n), p=float(psum[i] / n),
                             Vb=eg2 - 2 * dot(mb, R1) + (n2 - var_ref),
                             Vw=float(acc["Vw"][i] @ w) / n,
                             S=float(acc["S"][i] @ w) / n,
                             H=float(acc["H"][i] @ w) / n))
        m["bins"] = bins
        st[label] = m
    return dict(R0=R["R0"], R1=R["R1"], R2=R["R2"], D=D, stats=st)
