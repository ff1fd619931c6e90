# SPDX-License-Identifier: MIT
"""The gradient probe's numbers from its measurements: each replicate
batch's error and cosines against the references, the rule's bias (its
mean gradient's distance to the reference), and the error the
decomposition predicts from a batch's prompts, samples and baseline
errors.

Adam's metric: a batch gradient g becomes Adam's step direction from it,
D_g * g, D_g the preconditioner of Adam's next step with g folded in
(grads.next_preconditioner; without the fold, a coordinate no earlier
gradient reached, the embedding of a token the policy has not yet
sampled, weighs 1/eps = 1e8 and one rare sample decides the error); the
reference's is D * R1, D that preconditioner for a typical batch
(probe_ref.py). The decomposition's Adam-metric numbers use D alone.

A batch of K prompts trained on, prompt x with n_x samples kept and a
baseline off by e_x from 2p - 1, with no normaliser (the `raw` and
`oracle` variants; probe_ref.py defines Vb, Vw, S, H):

    E||g - g*||^2 = (1/K^2) sum_x [ Vb(p_x) + Vw(p_x) / n_x
                                    + e_x^2 ((S(p_x) - H(p_x)) / n_x + H(p_x)) ]

if the baseline's errors are independent of the samples (they are not
under a group mean or a fused baseline, which include the prompt's own
samples: the check against the measured error says how much that
matters). For B prompts of k samples each and a baseline MSE m, with the
task's averages: (Vb + Vw/k + m ((S - H)/k + H)) / B.
"""

from typing import Dict, List

import numpy as np
import torch

import grads
from probe_ref import p_bin

METRICS = ("err", "cos", "errD", "cosD", "cos0", "cos0D", "cos2", "n2", "n2D")


def adam_steps(G: torch.Tensor, adam: dict) -> torch.Tensor:
    """Each row's step direction under Adam (no momentum): the row times
    the preconditioner of Adam's next step with that row folded into v
    (grads.next_preconditioner), as the optimiser would take it."""
    return G * grads.next_preconditioner(adam, G ** 2)


def metrics(G: torch.Tensor, U: torch.Tensor, ref: dict) -> Dict[str, np.ndarray]:
    """Per row of G (batch gradients, float64) and U (their Adam steps):
    the squared error to R1 and the cosines to R1, R0 and R2 of G, and of
    U against D * R1 and D * R0 (Adam's metric, ref["D"])."""
    out = {}
    D = ref["D"]
    for suffix, X, R1, R0 in (("", G, ref["R1"], ref["R0"]),
                              ("D", U, ref["R1"] * D, ref["R0"] * D)):
        n2 = (X * X).sum(1)
        out["err" + suffix] = ((X - R1) ** 2).sum(1)
        out["n2" + suffix] = n2
        for name, Rv in (("cos", R1), ("cos0", R0)):
            out[name + suffix] = (X @ Rv) / torch.sqrt(n2 * (Rv @ Rv)).clamp(min=1e-300)
    R2 = ref["R2"]
    n2 = out["n2"]
    out["cos2"] = (G @ R2) / torch.sqrt(n2 * (R2 @ R2)).clamp(min=1e-300)
    return {k: v.numpy() for k, v in out.items()}


def _bin_values(bins: List[dict], key: str) -> np.ndarray:
    """Per bin, the value, a bin without enough prompts taking its nearest
    neighbour's."""
    idx = [i for i, b in enumerate(bins) if b is not None]
    return np.array([bins[min(idx, key=lambda j: abs(j - i))][key]
                     for i in range(len(bins))])


def predict(stats: dict, rec: dict, oracle: bool) -> Dict[str, float]:
    """The predicted E||g - g*||^2 of one batch (identity and Adam's
    metric) from its record: prompts' p, samples kept n, baseline errors
    e (0 for the oracle variant)."""
    K = rec["kept"]
    if K == 0:
        return {"I": float("nan"), "D": float("nan")}
    b = p_bin(rec["p"])
    n = np.asarray(rec["n"], dtype=float)
    e2 = 0.0 if oracle else np.asarray(rec["e"], dtype=float) ** 2
    out = {}
    for label in ("I", "D"):
        bins = stats[label]["bins"]
        Vb, Vw, S, H = (_bin_values(bins, k)[b] for k in ("Vb", "Vw", "S", "H"))
        out[label] = float(np.sum(Vb + Vw / n + e2 * ((S - H) / n + H)) / K ** 2)
    return out


def simple_predict(stats: dict, B: float, k: float, mse: float,
                   label: str = "I") -> float:
    """(Vb + Vw/k + m ((S - H)/k + H)) / B with the task's averages."""
    s = stats[label]
    return (s["Vb"] + s["Vw"] / k + mse * ((s["S"] - s["H"]) / k + s["H"])) / B


def bias2(mean: torch.Tensor, target: torch.Tensor, var_mean: float,
          var_ref: float) -> float:
    """||E g - g*||^2 from the replicates' mean (gradient, or Adam step
    against D * R1): its squared distance to the target less the mean's
    own variance and the reference's."""
    d = mean - target
    return float((d * d).sum()) - var_mean - var_ref
