# SPDX-License-Identifier: MIT
"""A simulated engine: a TEST AND DEMO HARNESS, not an engine.

Prompts have hidden true success probabilities; a simulated value model
gives each a prior with configurable noise and hallucination rate;
"generating" a sample takes a time drawn from a configurable distribution;
reward workers run as separate processes and push each sample's reward
(+1 with the prompt's probability, else -1, a pure function of uid, sample
and seed) through their own RewardWriter lane, exactly as real verifiers
would.
"""

import dataclasses
import heapq
import math
import multiprocessing as mp
import queue as queue_mod
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from ..core.decision import Decision, key_of
from ..core.plugin import Plugin

__all__ = ["SimPrompt", "make_prompts", "sim_reward", "Latency", "SimEngine",
           "SimResult", "Progress"]


@dataclasses.dataclass(frozen=True)
class SimPrompt:
    uid: str
    p: float      # true success probability (hidden from v05)
    prior: float  # the simulated value model's prior, on [-1, 1]

    @property
    def mu(self) -> float:
        """True mean reward on the [-1, 1] scale."""
        return 2.0 * self.p - 1.0


def make_prompts(n: int, seed: int = 0, noise: float = 0.1,
                 hallucination: float = 0.0,
                 p: Optional[np.ndarray] = None) -> List[SimPrompt]:
    """p ~ U[0, 1] unless given; prior = clip(mu + N(0, noise^2), -1, 1),
    or, with probability `hallucination`, uniform on [-1, 1]."""
    if n < 1:
        raise ValueError("need at least one prompt")
    if noise < 0 or not 0 <= hallucination <= 1:
        raise ValueError("noise >= 0 and hallucination in [0, 1]")
    rng = np.random.default_rng(seed)
    ps = rng.uniform(0.0, 1.0, n) if p is None else np.asarray(p, dtype=float)
    mu = 2.0 * ps - 1.0
    prior = np.clip(mu + rng.normal(0.0, noise, n), -1.0, 1.0)
    wild = rng.uniform(0.0, 1.0, n) < hallucination
    prior[wild] = rng.uniform(-1.0, 1.0, int(wild.sum()))
    return [SimPrompt(f"sim-{seed}-{i}", float(ps[i]), float(prior[i]))
            for i in range(n)]


_MASK = (1 << 64) - 1


def _mix(z: int) -> int:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return z ^ (z >> 31)


def sim_reward(uid: str, sample: int, p: float, seed: int) -> float:
    """+1 with probability p, else -1; the same for the same arguments."""
    h = _mix((key_of(uid) ^ _mix((seed << 16) + sample + 1)) & _MASK)
    return 1.0 if (h >> 11) / float(1 << 53) < p else -1.0


class Latency:
    """Generation time of one sample. Specs (milliseconds):
    "const:MS", "uniform:LO:HI", "exp:MEAN", "lognormal:MEDIAN:SIGMA"."""

    def __init__(self, spec: str):
        parts = spec.split(":")
        try:
            kind, args = parts[0], [float(x) for x in parts[1:]]
        except ValueError:
            raise ValueError(f"latency {spec!r}: numbers expected") from None
        want = {"const": 1, "uniform": 2, "exp": 1, "lognormal": 2}
        if kind not in want or len(args) != want[kind] or any(a < 0 for a in args):
            raise ValueError(f"latency {spec!r}: use const:MS, uniform:LO:HI, "
                             "exp:MEAN or lognormal:MEDIAN:SIGMA")
        self.spec, self.kind, self.args = spec, kind, args

    def sample(self, rng: np.random.Generator) -> float:
        a = self.args
        if self.kind == "const":
            ms = a[0]
        elif self.kind == "uniform":
            ms = rng.uniform(a[0], a[1])
        elif self.kind == "exp":
            ms = rng.exponential(a[0]) if a[0] > 0 else 0.0
        else:
            ms = a[0] * math.exp(rng.normal(0.0, a[1]))
        return ms / 1000.0


def _worker(segment: str, inbox, seed: int) -> None:
    """A reward-worker process: waits until each sample's generation is due,
    scores it, pushes the reward through its own lane."""
    from ..core.writer import RewardWriter
    writer = RewardWriter.attach(segment)
    due = []  # (time, uid, sample, p, gen)
    done = False
    while not done or due:
        timeout = None
        if due:
            timeout = max(0.0, due[0][0] - time.monotonic())
        if not done:
            try:
                items = inbox.get(timeout=timeout) if timeout != 0.0 else inbox.get_nowait()
            except queue_mod.Empty:
                items = []
            if items is None:
                done = True  # push what is in flight at once, then leave
            else:
                for it in items:
                    heapq.heappush(due, it)
        now = time.monotonic()
        while due and (due[0][0] <= now or done):
            _, uid, sample, p, gen = heapq.heappop(due)
            writer.push(uid, sample, sim_reward(uid, sample, p, seed), gen=gen)
    writer.close()


@dataclasses.dataclass
class SimResult:
    mode: str
    prompts: int
    samples: int                 # generated (issued) samples
    k: np.ndarray                # final group size per prompt
    baseline: np.ndarray         # per prompt
    mu: np.ndarray               # true mean per prompt
    dropped: int
    halts: int
    wall_s: float
    latency_ns: np.ndarray       # reward-to-decision, decisions that had one
    stats: dict

    @property
    def mse(self) -> float:
        return float(np.mean((self.baseline - self.mu) ** 2))


class Progress:
    """A progress bar on stderr (plain lines when stderr is not a tty)."""

    def __init__(self, total: int, label: str, enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.tty = sys.stderr.isatty()
        self.last = -1

    def update(self, done: int, extra: str = "") -> None:
        if not self.enabled:
            return
        pct = int(100 * done / self.total) if self.total else 100
        if self.tty:
            bar = "#" * (pct // 4) + "." * (25 - pct // 4)
            sys.stderr.write(f"\r{self.label:<10} [{bar}] {done}/{self.total} {extra}")
            if done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif pct // 25 != self.last // 25 or done >= self.total:
            sys.stderr.write(f"{self.label}: {done}/{self.total} prompts final {extra}\n")
        self.last = pct


class SimEngine:
    """Drives a Plugin with simulated generation and reward-worker
    processes. on_barrier(plugin, decision) answers "barrier" decisions
    (external halt; see v05.trainers.distributed)."""

    def __init__(self, plugin: Plugin, prompts: List[SimPrompt], *,
                 workers: int = 4, latency: str = "lognormal:2:0.5",
                 seed: int = 0,
                 on_barrier: Optional[Callable[[Plugin, Decision], None]] = None,
                 on_done: Optional[Callable[[Plugin, int, int], None]] = None):
        if workers < 1:
            raise ValueError("need at least one reward worker")
        self.plugin, self.prompts, self.seed = plugin, prompts, seed
        self.latency = Latency(latency)
        self.rng = np.random.default_rng(seed + 1)
        self.by_uid: Dict[str, int] = {pr.uid: i for i, pr in enumerate(prompts)}
        self.on_barrier = on_barrier
        self.on_done = on_done
        # fork: fast, and the children never touch the parent's plugin.
        ctx = mp.get_context("fork")
        self.queues = [ctx.Queue() for _ in range(workers)]
        self.procs = [ctx.Process(target=_worker, args=(plugin.name, q, seed),
                                  daemon=True) for q in self.queues]
        for pr in self.procs:
            pr.start()
        self.next_worker = 0

    def dispatch(self, d: Decision) -> None:
        """Generate d.samples: each is due after a drawn latency, scored by
        the next worker in turn."""
        pr = self.prompts[self.by_uid[d.uid]]
        now = time.monotonic()
        per = {}
        for s in d.samples:
            w = self.next_worker % len(self.queues)
            self.next_worker += 1
            per.setdefault(w, []).append((now + self.latency.sample(self.rng),
                                          pr.uid, s, pr.p, d.gen))
        for w, items in per.items():
            self.queues[w].put(items)

    def run(self, progress: Optional[Progress] = None,
            keep_groups: bool = False) -> SimResult:
        n = len(self.prompts)
        k = np.zeros(n, dtype=np.int64)
        baseline = np.zeros(n)
        lat, dropped, finals = [], 0, 0
        self.groups = {}
        t0 = time.monotonic()
        batch = 0
        for d in self.plugin.submit([(p.uid, p.prior) for p in self.prompts]):
            batch = d.batch
            self.dispatch(d)
        while finals < n:
            for d in self.plugin.poll():
                if d.latency_ns:
                    lat.append(d.latency_ns)
                if d.kind == "sample":
                    self.dispatch(d)
                elif d.kind == "barrier":
                    if not self.on_barrier:
                        raise RuntimeError("barrier decision without on_barrier")
                    self.on_barrier(self.plugin, d)
                else:
                    i = self.by_uid[d.uid]
                    g = self.plugin.group(d)
                    k[i], baseline[i] = g.k, g.baseline
                    if keep_groups:
                        self.groups[d.uid] = (g.k, g.baseline, g.rewards.copy(),
                                              g.advantages.copy(), d.halted)
                    del g
                    self.plugin.release(d)
                    dropped += d.kind == "drop"
                    finals += 1
                    if progress:
                        progress.update(finals)
            if finals < n:
                self.plugin.wait_blocking(0.05)
        if self.on_done:
            # e.g. HaltCoordinator.finish: this engine's share is final.
            self.on_done(self.plugin, batch, n)
        wall = time.monotonic() - t0
        st = self.plugin.stats()
        return SimResult(mode="", prompts=n, samples=int(st["samples_issued"]),
                         k=k, baseline=baseline,
                         mu=np.array([p.mu for p in self.prompts]),
                         dropped=dropped, halts=int(st["halts"]), wall_s=wall,
                         latency_ns=np.array(lat, dtype=np.int64), stats=st)

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for pr in self.procs:
            pr.join(timeout=30)
            if pr.is_alive():
                pr.kill()
        for q in self.queues:
            q.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
