# SPDX-License-Identifier: MIT
"""What a full batch is made of: which group counts as informative in each
mode, and which prompt may be skipped before any sample because its prior
(or its own history) predicts an all-same group. Shared by the streamed
fill (v05.engines.fill), the trainers' fill and the benches, so that every
one of them counts the same thing. docs/RULES.md, "Full batches of
informative groups", has the table; the definitions:

Informative, count "contrast" (the default, in every mode): the group's
rewards are not all equal, over all k samples its baseline saw (a group of
one never is), and it was not dropped. That is what DAPO's dynamic
sampling, GRESO and verl's and slime's group filters keep (a reward std
above 0), and what Knapsack RL's value counts (1 - p^k - (1 - p)^k). It
is the same as "a non-zero advantage on a kept sample" in every mode whose
baseline is the group's own mean:

  mode                       an all-same group                 "contrast"  "signal"
  grpo, knapsack(-prior)     final, every advantage 0          no          no
  dapo, greso                dropped (a "drop" decision)       no          no
  reinforce-ada(-pos)        final, kept advantages 0 (the      no          no
                             baseline is the mean of all k)
  v05, v05-fixed, v05-eb,    final, A = (r - mu) / sigma with   no          yes when some
  v05-pg                     the fused baseline mu: non-zero              kept |A| > 1e-6
                             when the prior disagrees

A mixed group (rewards not all equal) has a non-zero advantage on every
kept sample in every mode, so it counts under both. Count "signal" counts
a group by its kept advantages alone (|A| > SIGNAL_EPS on some kept
sample), in every mode: under the fused modes it also counts an all-same
group whose prior disagreed with it, signal only as good as the prior
(docs/RULES.md); in the modes above whose baseline is the group's own
mean it is "contrast"; a mode whose baseline shrinks toward anything else
(a running mean) is counted by its advantages like the fused ones.

The skip: a prompt is skipped before any sample when the predicted chance
that its first wave of k samples (k_init) is all-same is at least 1 -
margin (default margin 0.05), unless a revisit draw keeps it (GRESO's
floor: a skipped prompt comes back with probability `revisit`). The
prediction is the beta-binomial one: the prompt's success probability p
has the belief Beta(alpha, beta) with alpha = strength q + pseudo + s,
beta = strength (1 - q) + pseudo + (n - s), q = (1 + V) / 2 from the prior
V, s successes in n trials of its history, and with probability
`hallucination` p is uniform instead (v05-eb's model, docs/STATISTICS.md,
is strength n0, pseudo 1, hallucination h: SkipRule.from_eb_fit). So

  P(all same in k) = (1 - h) [E p^k + E (1 - p)^k] + h 2 / (k + 1),
  E p^k = prod_{i<k} (alpha + i) / (alpha + beta + i).

Under the defaults (strength 16, pseudo 0, no hallucination) a prompt with
k = 16 is skipped when q <= 0.0045 or q >= 0.9955 (a prior within 0.009
of -1 or 1); with k = 4 when q <= 0.014 (within 0.028). A prior of exactly -1 or 1 is a
point mass (alpha or beta 0): skipped whatever the strength. Rewards are
taken as successes at r > 0 for the history, (1 + r) / 2 each for
HistoryPrior, which keeps fractional counts.

Every value handed in is checked here: TypeError or ValueError naming it.
"""

import hashlib
import math
import numbers
from typing import Optional, Sequence, Tuple

from . import _checks
from .names import MODES

__all__ = ["COUNTS", "SIGNAL_EPS", "FUSED_MODES", "DROPPING_MODES",
           "ONE_SAMPLE_MODES", "default_count", "informative", "group_informative",
           "informative_probability", "all_same_probability", "SkipRule"]

COUNTS = ("contrast", "signal")
# A kept advantage at most this in magnitude carries no signal (advantages
# live as float32 in the arena; an exact 0 is what the group modes write).
SIGNAL_EPS = 1e-6
# Modes whose baseline fuses a prior: an all-same group gets advantages.
FUSED_MODES = frozenset({"v05", "v05-fixed", "v05-eb", "v05-pg"})
# Modes whose plugin drops an all-same group (a "drop" decision).
DROPPING_MODES = frozenset({"dapo", "greso"})
# Modes whose rule chooses each first wave, one sample among them.
ONE_SAMPLE_MODES = frozenset({"v05-pg"})

_K_MAX = 64  # a group holds at most 64 samples (the sample masks)


def default_count(mode: str, k_init: int) -> str:
    """What counts as informative when the caller does not say: "signal"
    where a group may end at one sample (a first wave of 1: k_init 1, or
    a mode whose rule chooses it, v05-pg where the prior is sharp), since
    under "contrast" a group of one never counts and the fill would throw
    it away; "contrast" otherwise."""
    one = _mode(mode) in ONE_SAMPLE_MODES or _k(k_init) == 1
    return "signal" if one else "contrast"


def _mode(mode) -> str:
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, not {type(mode).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    return mode


def _count(count) -> str:
    if count not in COUNTS:
        raise ValueError(f"count must be one of {COUNTS}, not {count!r}")
    return count


def _k(k) -> int:
    return _checks.integer("k", k, 1, _K_MAX, _checks.U32_MAX)


def _unit01(name: str, v) -> float:
    """A finite number in [0, 1]."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    v = float(v)
    if not 0.0 <= v <= 1.0:  # false for NaN
        raise ValueError(f"{name} = {v!r} is not in [0, 1]")
    return v


def _nonneg(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    v = float(v)
    if not 0.0 <= v < math.inf:  # false for NaN
        raise ValueError(f"{name} = {v!r} is not a finite number >= 0")
    return v


def informative(mode: str, rewards: Sequence[float], *,
                advantages: Optional[Sequence[float]] = None,
                kept: Optional[Sequence[int]] = None,
                count: str = "contrast", dropped: bool = False) -> bool:
    """Whether a final group counts toward a full batch (module text).

    rewards: all k of the group's rewards (on [-1, 1]); advantages and
    kept (the indices trained on; default all) are needed for count
    "signal". dropped: the plugin dropped the group (a "drop" decision):
    never informative."""
    _mode(mode)
    _count(count)
    k = len(rewards)
    if dropped and k == 0:  # skipped at submit (v05-pg): no sample
        return False
    if not 1 <= k <= _K_MAX:
        raise ValueError(f"a group has 1 to {_K_MAX} rewards, not {k}")
    r = [_checks.unit_interval(f"reward {i}", x) for i, x in
         enumerate(rewards)]
    if dropped:
        return False
    if count == "contrast":
        return any(x != r[0] for x in r)
    if advantages is None:
        raise TypeError("count 'signal' needs the group's advantages")
    if len(advantages) != k:
        raise ValueError(f"{len(advantages)} advantages for {k} rewards")
    idx = range(k) if kept is None else kept
    out = False
    for i in idx:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or \
                not 0 <= i < k:
            raise ValueError(f"kept index {i!r} is not a sample of 0..{k - 1}")
        a = float(advantages[i])
        if not math.isfinite(a):
            raise ValueError(f"advantage {i} is {a!r}, not finite")
        out = out or abs(a) > SIGNAL_EPS
    return out


def group_informative(mode: str, group, *, count: str = "contrast",
                      dropped: bool = False) -> bool:
    """informative() of a Group (or a result's copied-out group): its
    rewards, advantages and kept samples."""
    k = group.k
    return informative(mode, [float(x) for x in group.rewards[:k]],
                       advantages=[float(x) for x in group.advantages[:k]],
                       kept=list(group.kept), count=count, dropped=dropped)


def informative_probability(p: float, k: int) -> float:
    """The chance that k samples of a prompt of success probability p are
    not all equal: 1 - p^k - (1 - p)^k."""
    p = _unit01("p", p)
    k = _k(k)
    return max(0.0, 1.0 - p ** k - (1.0 - p) ** k)


def _beta_moment(a: float, b: float, k: int) -> float:
    """E p^k under Beta(a, b) (a + b > 0); a = 0 is the point mass at 0."""
    if a == 0.0:
        return 0.0
    if b == 0.0:
        return 1.0
    # prod (a + i) / (a + b + i), in logs (a, b may be large)
    return math.exp(math.lgamma(a + k) - math.lgamma(a) +
                    math.lgamma(a + b) - math.lgamma(a + b + k))


def all_same_probability(k: int, *, p: Optional[float] = None,
                         alpha: Optional[float] = None,
                         beta: Optional[float] = None,
                         hallucination: float = 0.0,
                         population: Tuple[float, float] = (1.0, 1.0)
                         ) -> float:
    """The predicted chance that k +-1 rewards of a prompt are all equal:
    with a known success probability p, or a Beta(alpha, beta) belief
    (alpha, beta >= 0, not both 0; 0 is a point mass), mixed with the
    population's Beta(a, b) (`population`; the uniform's is 2 / (k + 1))
    with probability `hallucination`."""
    k = _k(k)
    h = _unit01("hallucination", hallucination)
    try:
        pa, pb = (float(x) for x in population)
    except (TypeError, ValueError):
        raise TypeError(f"population {population!r} is not a pair "
                        "(a, b)") from None
    if not (pa > 0.0 and pb > 0.0 and math.isfinite(pa + pb)):
        raise ValueError(f"population {population!r}: a and b must be > 0")
    pop = 2.0 / (k + 1) if pa == pb == 1.0 else \
        _beta_moment(pa, pb, k) + _beta_moment(pb, pa, k)
    if p is not None:
        if alpha is not None or beta is not None:
            raise TypeError("give p or (alpha, beta), not both")
        p = _unit01("p", p)
        q = p ** k + (1.0 - p) ** k
    else:
        if alpha is None or beta is None:
            raise TypeError("give p, or both alpha and beta")
        a, b = _nonneg("alpha", alpha), _nonneg("beta", beta)
        if a + b == 0.0:
            raise ValueError("alpha and beta are both 0: no belief")
        q = _beta_moment(a, b, k) + _beta_moment(b, a, k)
    return min(1.0, (1.0 - h) * q + h * pop)


class SkipRule:
    """Skip a prompt before any sample when its prior (or history)
    predicts an all-same first wave (module text). Stateless: the caller
    counts what it skips. revisit: the chance a prompt the rule would skip
    is rolled out anyway (drawn from a hash of seed, uid and visit, so a
    rerun skips the same prompts); seed: the draws'."""

    def __init__(self, *, margin: float = 0.05, strength: float = 16.0,
                 pseudo: float = 0.0, hallucination: float = 0.0,
                 population: Tuple[float, float] = (1.0, 1.0),
                 revisit: float = 0.01, seed: int = 0):
        self.margin = _unit01("margin", margin)
        if self.margin >= 1.0:
            raise ValueError("margin = 1 would skip every prompt")
        self.strength = _nonneg("strength", strength)
        self.pseudo = _nonneg("pseudo", pseudo)
        self.hallucination = _unit01("hallucination", hallucination)
        all_same_probability(1, p=0.5, population=population)  # checked
        self.population = tuple(float(x) for x in population)
        self.revisit = _unit01("revisit", revisit)
        self.seed = _checks.u64("seed", seed)

    @classmethod
    def from_eb_fit(cls, fit: Sequence[float], **kw) -> "SkipRule":
        """v05-eb's own model of its prior, from a fit (n0, h, a2, b2): the
        plugin's running fit (Plugin.eb_state().fit()) or v05.eb_fit's;
        (n0, h) alone takes the uniform as the hallucination's."""
        try:
            vals = tuple(float(x) for x in fit)
        except (TypeError, ValueError):
            raise TypeError(f"fit {fit!r} is not (n0, h, a2, b2)") from None
        if len(vals) not in (2, 4):
            raise TypeError(f"fit {fit!r} is not (n0, h, a2, b2) or (n0, h)")
        pop = vals[2:] or (1.0, 1.0)
        return cls(strength=vals[0], pseudo=1.0, hallucination=vals[1],
                   population=pop, **kw)

    def __repr__(self):
        return (f"SkipRule(margin={self.margin}, strength={self.strength}, "
                f"pseudo={self.pseudo}, hallucination={self.hallucination}, "
                f"revisit={self.revisit})")

    def belief(self, prior: Optional[float],
               history: Optional[Tuple[float, float]] = None
               ) -> Tuple[float, float]:
        """(alpha, beta) of a prompt's success probability."""
        if prior is None:
            a = b = 1.0  # no estimate: uniform
        else:
            v = _checks.unit_interval("prior", prior)
            q = (1.0 + v) / 2.0
            a = self.strength * q + self.pseudo
            b = self.strength * (1.0 - q) + self.pseudo
        if history is not None:
            try:
                s, n = history
            except (TypeError, ValueError):
                raise TypeError(f"history {history!r} is not a pair "
                                "(successes, trials)") from None
            s, n = _nonneg("history successes", s), _nonneg("history trials", n)
            if s > n:
                raise ValueError(f"history: {s} successes in {n} trials")
            a, b = a + s, b + (n - s)
        if a + b == 0.0:  # strength 0 and pseudo 0: the prior says nothing
            a = b = 1.0
        return a, b

    def all_same(self, prior: Optional[float], k: int,
                 history: Optional[Tuple[float, float]] = None) -> float:
        """The predicted chance that the prompt's first k are all-same."""
        a, b = self.belief(prior, history)
        return all_same_probability(k, alpha=a, beta=b,
                                    hallucination=self.hallucination,
                                    population=self.population)

    def would_skip(self, prior: Optional[float], k: int,
                   history: Optional[Tuple[float, float]] = None) -> bool:
        """The rule's verdict before the revisit draw."""
        return self.all_same(prior, k, history) >= 1.0 - self.margin

    def revisited(self, uid, visit: int = 0) -> bool:
        """The revisit draw for (uid, visit): True keeps the prompt."""
        if self.revisit == 0.0:
            return False
        visit = _checks.u64("visit", visit)
        h = hashlib.blake2b(f"{self.seed}\0{uid}\0{visit}".encode(
            "utf-8", "surrogateescape"), digest_size=8)
        return int.from_bytes(h.digest(), "little") / 2.0 ** 64 < self.revisit

    def skip(self, uid, prior: Optional[float], k: int, *,
             history: Optional[Tuple[float, float]] = None,
             visit: int = 0) -> bool:
        """Whether to skip prompt `uid` (its prior V or None, its history
        (successes, trials) or None) whose first wave is k samples; visit
        numbers the decisions on the same uid (a step, an epoch) so that
        its revisit draws differ."""
        return self.would_skip(prior, k, history) and \
            not self.revisited(uid, visit)
