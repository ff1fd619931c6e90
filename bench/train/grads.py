# SPDX-License-Identifier: MIT
"""Per-sequence gradients of the trainer's loss term for the gradient probe.

The trainer's loss is linear in its per-sequence terms: a batch gradient
is sum_j c_j grad l_j with l_j = mean_t log pi(o_j,t | x_j) (model.
seq_logprob) and c_j the sequence's weight (its advantage over the kept
samples and prompts). With every l_j's gradient in hand, each rule's batch
gradient and every variant of it (its own advantages, its baseline without
the normaliser, the exact baseline) is one matrix product, and sequences
that several rules share are differentiated once.

The GRU is run by hand here (same parameters, same equations as
torch.nn.GRU) so that one batched backward gives the gradient at each
gate pre-activation, per sequence; each parameter's per-sequence gradient
is then a sum over time of outer products. `check_against_autograd` (the
probe's tests) holds it to torch's own backward.

Also: sampling from uniforms fixed in advance (inverse CDF), so a sample
is a function of its key alone, whatever batch it is drawn in (common
random numbers across the rules), and the flat view of Adam's state.
"""

from typing import List, Sequence

import numpy as np
import torch
import torch.nn.functional as F

import model as M
from task import tokens

# model.TinyLM's parameters in model.parameters() order: the flat layout
# of every gradient and of Adam's state here.
PARAM_NAMES = ("emb.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0",
               "rnn.bias_ih_l0", "rnn.bias_hh_l0", "head.weight", "head.bias")


def flat_params(model: M.TinyLM) -> torch.Tensor:
    named = dict(model.named_parameters())
    assert tuple(named) == PARAM_NAMES, tuple(named)
    return torch.cat([p.detach().reshape(-1) for p in named.values()])


def _batch(prompts, outs):
    """Padded inputs and targets, and each position's weight in l_j
    (1 / completion length on completion positions, else 0)."""
    full = [tokens(p) + list(o) for p, o in zip(prompts, outs)]
    L = max(len(s) for s in full)
    x = torch.tensor([s + [M.PAD] * (L - len(s)) for s in full],
                     dtype=torch.long)
    w = torch.zeros(len(full), L - 1)
    for i, (p, o) in enumerate(zip(prompts, outs)):
        s = len(tokens(p)) - 1
        w[i, s:s + len(o)] = 1.0 / max(1, len(o))
    return x[:, :-1], x[:, 1:], w


def per_seq_grads(model: M.TinyLM, prompts: Sequence, outs: Sequence,
                  chunk: int = 512) -> torch.Tensor:
    """(n, P) float32: row j is grad l_j (the trainer's per-sequence term,
    mean over completion tokens of log pi) for prompt j and completion j."""
    # Chunks of sequences of similar length: less padding to run through.
    order = sorted(range(len(prompts)),
                   key=lambda i: len(tokens(prompts[i])) + len(outs[i]))
    out = torch.zeros(len(prompts), M.n_params(model))
    for i in range(0, len(order), chunk):
        idx = order[i:i + chunk]
        out[idx] = _per_seq(model, [prompts[j] for j in idx],
                            [outs[j] for j in idx])
    return out


def _per_seq(model, prompts, outs) -> torch.Tensor:
    xin, tgt, w = _batch(prompts, outs)
    B, T = xin.shape
    rnn = model.rnn
    Wih, Whh = rnn.weight_ih_l0.detach(), rnn.weight_hh_l0.detach()
    bih, bhh = rnn.bias_ih_l0.detach(), rnn.bias_hh_l0.detach()
    Wo, bo = model.head.weight.detach(), model.head.bias.detach()
    Hd = Whh.shape[1]
    E = model.emb.weight.detach()[xin]                      # (B, T, e)
    gi = (E @ Wih.t() + bih).requires_grad_()                # (B, T, 3H)
    h = torch.zeros(B, Hd)
    hs, ghs, prev = [], [], []
    for t in range(T):
        gh = (h @ Whh.t() + bhh).requires_grad_()
        ir, iz, inn = gi[:, t].chunk(3, 1)
        hr, hz, hn = gh.chunk(3, 1)
        r = torch.sigmoid(ir + hr)
        z = torch.sigmoid(iz + hz)
        n = torch.tanh(inn + r * hn)
        prev.append(h)
        h = (1 - z) * n + z * h
        hs.append(h)
        ghs.append(gh)
    H = torch.stack(hs, 1)                                   # (B, T, H)
    logits = H @ Wo.t() + bo
    lp = F.log_softmax(logits, -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    loss = (lp * w).sum()
    dgi, dlog, *dgh = torch.autograd.grad(loss, [gi, logits] + ghs)
    dGH = torch.stack(dgh, 1)                                # (B, T, 3H)
    Hprev = torch.stack(prev, 1)
    g_wo = torch.einsum("btv,bth->bvh", dlog, H.detach())
    g_bo = dlog.sum(1)
    g_wih = torch.einsum("btg,bte->bge", dgi, E)
    g_bih = dgi.sum(1)
    g_whh = torch.einsum("btg,bth->bgh", dGH, Hprev.detach())
    g_bhh = dGH.sum(1)
    dE = dgi @ Wih                                           # (B, T, e)
    onehot = F.one_hot(xin, model.emb.num_embeddings).to(dE.dtype)
    g_emb = torch.einsum("btv,bte->bve", onehot, dE)
    return torch.cat([g.reshape(B, -1) for g in
                      (g_emb, g_wih, g_whh, g_bih, g_bhh, g_wo, g_bo)], 1)


def check_against_autograd(model: M.TinyLM, prompts, outs) -> float:
    """The largest relative difference between per_seq_grads and torch's
    own backward of each l_j (the probe's tests hold it small)."""
    G = per_seq_grads(model, prompts, outs)
    worst = 0.0
    for j, (p, o) in enumerate(zip(prompts, outs)):
        model.zero_grad()
        lp, _ = M.seq_logprob(model, [p], [o])
        lp.sum().backward()
        ref = torch.cat([q.grad.reshape(-1) for q in model.parameters()])
        worst = max(worst, float((G[j] - ref).norm() / ref.norm().clamp(min=1e-12)))
    model.zero_grad()
    return worst


def sample_from_uniforms(model: M.TinyLM, prompts: Sequence,
                         U: np.ndarray) -> List[List[int]]:
    """One completion per prompt at temperature 1, token t of completion i
    drawn by inverse CDF from U[i, t] (uniforms in [0, 1)): the same
    distribution as model.sample, but a completion depends only on its
    prompt and its row of U, not on the batch it is drawn in."""
    u = torch.as_tensor(np.asarray(U, dtype=np.float64))

    def pick(logits, t, alive):
        cdf = F.softmax(logits.double(), dim=-1).cumsum(-1)
        tok = torch.searchsorted(cdf, u[:, t:t + 1].contiguous()).squeeze(1)
        return tok.clamp(max=cdf.shape[1] - 1)
    return M.decode(model, prompts, pick)


def adam_state(opt: torch.optim.Adam, model: M.TinyLM) -> dict:
    """Adam's second-moment state, flat in PARAM_NAMES order: v (not bias
    corrected), the step count t, beta2 and eps."""
    group = opt.param_groups[0]
    vs, t = [], None
    for p in model.parameters():
        st = opt.state[p]
        t = float(st["step"])
        vs.append(st["exp_avg_sq"].reshape(-1).double())
    return dict(v=torch.cat(vs), t=t, beta2=group["betas"][1],
                eps=group["eps"])


def next_preconditioner(state: dict, g2: torch.Tensor) -> torch.Tensor:
    """diag(1 / (sqrt(v_hat) + eps)) of Adam's next step when the gradient
    it takes has per-coordinate second moment g2: v_hat = (beta2 v +
    (1 - beta2) g2) / (1 - beta2^(t+1)). With g2 = 0 this would be the
    checkpoint's own v_hat, under which a coordinate no gradient has
    reached yet (the embedding of a token the policy has not sampled)
    weighs 1/eps = 1e8; Adam folds the new gradient in before dividing."""
    b2, t = state["beta2"], state["t"]
    v_hat = (b2 * state["v"] + (1 - b2) * g2.double()) / (1 - b2 ** (t + 1))
    return 1.0 / (v_hat.sqrt() + state["eps"])
