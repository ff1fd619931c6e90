# SPDX-License-Identifier: MIT
"""The bench's regimes (issue 43): what the task and the value prior are.

    today        the task as it was (2..7 digits), the value prior
                 (valueprior.py: a logistic fit on the plugin's recent
                 groups)
    sparse       only 5..7 digits: after the warm-up most prompts'
                 success rate is near 0 (the rewards are sparse); the
                 held-out set is drawn from the same lengths
    noisy-prior  today's task; the value prior's prediction with noise
                 added in logit space (NOISE_SD, a fixed draw per prompt
                 and seed: a value model that is consistently wrong about
                 a prompt, as a real one is)
    no-prior     today's task; no value model: every prior is p = 0.5
                 (the mode's no-prior form: the fused modes shrink to 0,
                 knapsack-prior plans uniformly, v05-eb fits its prior
                 from the groups alone)

Only the task and the priors change; the warm-up (model.warmup, cached
per seed) is the same in every regime.
"""

import dataclasses
import zlib
from typing import Callable, List, Optional, Tuple

import numpy as np

import task
import valueprior

NOISE_SD = 1.5  # logit units; the measured prior MSE is in PROBE.md


@dataclasses.dataclass(frozen=True)
class Regime:
    name: str
    lengths: Tuple[int, ...] = task.LENGTHS
    prior: str = "value"      # "value", "noisy" or "none"
    noise: float = 0.0

    @property
    def task_key(self) -> str:
        """The task part alone: regimes with the same task share the
        probe's checkpoints and reference gradients."""
        return "mixed" if self.lengths == task.LENGTHS else \
            "len" + "".join(map(str, self.lengths))

    def heldout(self, n: int) -> List[task.Prompt]:
        # today's lengths give exactly the held-out set of earlier pages
        return task.heldout_set(n, lengths=self.lengths)

    def predict(self, seed: int) -> Optional[Callable]:
        """The value model's predict for ValueModelPrior, or None (no
        value model: every prior 0)."""
        if self.prior == "none":
            return None
        if self.prior == "value":
            return valueprior.predict
        sd = self.noise

        def noisy(ctx_p: List[str], ctx_l: List[float],
                  targets: List[str]) -> List[float]:
            p = np.asarray(valueprior.predict(ctx_p, ctx_l, targets))
            z = np.array([prompt_noise(seed, t) for t in targets])
            q = 1.0 / (1.0 + np.exp(-(np.log(p / (1 - p)) + sd * z)))
            return np.clip(q, *valueprior.P_CLIP).tolist()
        return noisy


def prompt_noise(seed: int, text: str) -> float:
    """A standard normal draw fixed by (seed, prompt text)."""
    return float(np.random.default_rng(
        [seed, zlib.crc32(text.encode())]).standard_normal())


REGIMES = {r.name: r for r in (
    Regime("today"),
    Regime("sparse", lengths=(5, 6, 7)),
    Regime("noisy-prior", prior="noisy", noise=NOISE_SD),
    Regime("no-prior", prior="none"),
)}


def get(name: str) -> Regime:
    if name not in REGIMES:
        raise ValueError(f"regime {name!r} is not one of "
                         + ", ".join(REGIMES))
    return REGIMES[name]

