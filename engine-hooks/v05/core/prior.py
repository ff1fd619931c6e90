# SPDX-License-Identifier: MIT
"""Priors: where V comes from.

ValueModelPrior asks a generalist value model (the V0 project's interface,
``predict(context_prompts, context_labels, target_prompts) -> success
probabilities``) in batches, with a context of 256 groups sampled from the
plugin's support buffer (the last 512 finalized prompts; paper, appendix).
The support buffer holds keys, mean rewards and k; the prompt texts are
kept here, by the hook that submits them.

HistoryPrior is for users without a value model: each prompt's smoothed
success rate from earlier epochs, with a default for prompts not seen yet.
"""

import math
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

from .decision import Uid, key_of
from .lru import LruMap
from .plugin import Plugin
from .stats import prior_from_p

__all__ = ["ValueModelPrior", "HistoryPrior", "p_to_prior"]

PredictFn = Callable[[List[str], List[float], List[str]], Sequence[float]]


def p_to_prior(p: float) -> float:
    """Success probability -> prior on [-1, 1]; NaN or out of [0, 1] is an
    error (a value model bug must not become a silent prior)."""
    # The library's mapping (v05_prior_from_p), not a copy.
    p = float(p)
    if math.isnan(p) or not 0.0 <= p <= 1.0:
        raise ValueError(f"value model returned {p!r}, not a probability")
    return prior_from_p(p)


class ValueModelPrior:
    """Priors from a V0-style value model, with a support-buffer context."""

    def __init__(self, plugin: Plugin, predict: PredictFn, *,
                 batch_size: int = 64, context_size: int = 256,
                 default_p: float = 0.5, seed: int = 0,
                 max_texts: int = 8192):
        if batch_size < 1 or context_size < 0 or max_texts < 1:
            raise ValueError("batch_size >= 1, context_size >= 0 and "
                             "max_texts >= 1")
        self.plugin, self.predict = plugin, predict
        self.batch_size, self.context_size = batch_size, context_size
        self.default_p = default_p
        self.seed = seed
        # key -> prompt text of the last `max_texts` prompts remembered: the
        # context comes from the support buffer's last V05_SUPPORT_GROUPS
        # (512) final groups, so this must cover them plus the prompts in
        # flight (a batch's texts are remembered before it runs); what a
        # long run keeps does not grow with the prompts it has seen.
        self.texts = LruMap(max_texts)

    def remember(self, uid: Uid, text: str) -> None:
        """Keep a prompt's text so it can serve as context once final."""
        self.texts[key_of(uid)] = text

    def context(self) -> Tuple[List[str], List[float]]:
        """Sampled (prompts, success rates) from the support buffer: the
        groups whose text is known."""
        self.seed += 1
        prompts, labels = [], []
        for _, key, mean, _k in self.plugin.support_sample(self.context_size,
                                                          self.seed):
            text = self.texts.get(key)
            if text is not None:
                prompts.append(text)
                labels.append((float(mean) + 1.0) / 2.0)
        return prompts, labels

    def priors(self, targets: Iterable[Tuple[Uid, str]]) -> List[Tuple[Uid, float]]:
        """(uid, prior) for (uid, text) targets, querying in batches. With
        no context yet (first steps), every prior is the default."""
        targets = list(targets)
        for uid, text in targets:
            self.remember(uid, text)
        ctx_prompts, ctx_labels = self.context()
        out = []
        for i in range(0, len(targets), self.batch_size):
            chunk = targets[i:i + self.batch_size]
            if ctx_prompts:
                ps = list(self.predict(ctx_prompts, ctx_labels,
                                       [t for _, t in chunk]))
                if len(ps) != len(chunk):
                    raise ValueError(f"value model returned {len(ps)} "
                                     f"probabilities for {len(chunk)} prompts")
            else:
                ps = [self.default_p] * len(chunk)
            out.extend((uid, p_to_prior(p)) for (uid, _), p in zip(chunk, ps))
        return out


class HistoryPrior:
    """A prompt's success rate from earlier epochs, smoothed toward a
    default: p = (successes + a) / (trials + a + b), with a + b = strength
    and a / (a + b) = default_p. Old epochs fade by `decay` per update."""

    def __init__(self, default_p: float = 0.5, strength: float = 2.0,
                 decay: float = 1.0):
        if not 0.0 <= default_p <= 1.0 or strength <= 0 or not 0 < decay <= 1:
            raise ValueError("default_p in [0, 1], strength > 0, decay in (0, 1]")
        self.a = default_p * strength
        self.b = (1.0 - default_p) * strength
        self.decay = decay
        self.stats: Dict[Uid, List[float]] = {}  # uid -> [successes, trials]

    def update(self, uid: Uid, rewards: Sequence[float]) -> None:
        """Record a final group's rewards (on [-1, 1])."""
        s = self.stats.setdefault(uid, [0.0, 0.0])
        s[0] = s[0] * self.decay + sum((float(r) + 1.0) / 2.0 for r in rewards)
        s[1] = s[1] * self.decay + len(rewards)

    def counts(self, uid: Uid):
        """(successes, trials) recorded for uid (decayed), or None: the
        history a streamed fill's skip rule reads (v05.core.fill)."""
        s = self.stats.get(uid)
        return None if s is None else (s[0], s[1])

    def p(self, uid: Uid) -> float:
        s, n = self.stats.get(uid, (0.0, 0.0))
        return (s + self.a) / (n + self.a + self.b)

    def prior(self, uid: Uid) -> float:
        return 2.0 * self.p(uid) - 1.0

    def priors(self, uids: Iterable[Uid]) -> List[Tuple[Uid, float]]:
        return [(u, self.prior(u)) for u in uids]
