# SPDX-License-Identifier: MIT
"""The generalist value prior: a V0-style predict(context_prompts,
context_labels, target_prompts) -> success probabilities.

Like V0 it reads the policy's current ability from a context of recent
(prompt, success rate) pairs (the plugin's support buffer: 256 sampled from
the last 512 final groups, through v05.core.prior.ValueModelPrior) and predicts
unseen prompts. Its "in-context learner" is a ridge-regularised logistic
regression over prompt features (task.features: operation, length, their
interaction, sortedness, repeats), fitted afresh on each context by a few
Newton steps. It never sees a prompt's identity or true success rate, so a
prompt's prediction comes from how *similar* prompts did lately.
"""

from typing import List, Sequence

import numpy as np

import task

P_CLIP = (0.01, 0.99)


def parse(text: str) -> task.Prompt:
    op, ds = text.split(" ")
    return (task.OPS.index(op), tuple(int(c) for c in ds))


def featurize(texts: Sequence[str]) -> np.ndarray:
    X = np.array([task.features(parse(t)) for t in texts], dtype=np.float64)
    return np.hstack([X, np.ones((len(texts), 1))])


def fit(X: np.ndarray, y: np.ndarray, l2: float = 1.0, iters: int = 8) -> np.ndarray:
    """Logistic regression with soft labels y in [0, 1] (cross-entropy),
    L2 penalty on all but the intercept, Newton's method."""
    w = np.zeros(X.shape[1])
    reg = np.full(X.shape[1], l2)
    reg[-1] = 1e-6
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (p - y) + reg * w
        H = (X * (p * (1 - p))[:, None]).T @ X + np.diag(reg)
        w -= np.linalg.solve(H, g)
    return w


def predict(context_prompts: List[str], context_labels: List[float],
            target_prompts: List[str]) -> List[float]:
    w = fit(featurize(context_prompts), np.asarray(context_labels, dtype=np.float64))
    p = 1.0 / (1.0 + np.exp(-(featurize(target_prompts) @ w)))
    return np.clip(p, *P_CLIP).tolist()
