# SPDX-License-Identifier: MIT
"""The synthetic verifiable task: string transformations over digits.

A prompt is an operation and a string of 2..7 digits (0..9); the answer is
the transformed string followed by EOS:

    copy  3 1 4 1   ->  3 1 4 1
    rev   3 1 4 1   ->  1 4 1 3
    sort  3 1 4 1   ->  1 1 3 4

Difficulty varies with the operation and the length (a tiny model learns
copy of 2 digits long before sort of 7), so a briefly supervised model
succeeds on some prompts almost always and on others almost never. The
verifier is exact: +1 if the sampled tokens are the answer and EOS, else -1.
"""

import random
from typing import List, Optional, Sequence, Tuple

DIGITS = 10
SEP = 10
EOS = 11
PAD = 12
OPS = ("copy", "rev", "sort")
OP0 = 13                      # op tokens 13, 14, 15
VOCAB = OP0 + len(OPS)
LENGTHS = tuple(range(2, 8))  # digits per prompt
MAX_ANSWER = max(LENGTHS) + 1  # answer digits and EOS

Prompt = Tuple[int, Tuple[int, ...]]  # (op index, digits)


def answer(p: Prompt) -> List[int]:
    op, ds = p
    if OPS[op] == "copy":
        out = list(ds)
    elif OPS[op] == "rev":
        out = list(reversed(ds))
    else:
        out = sorted(ds)
    return out + [EOS]


def tokens(p: Prompt) -> List[int]:
    """The prompt as the model reads it: op, digits, SEP."""
    op, ds = p
    return [OP0 + op] + list(ds) + [SEP]


def text(p: Prompt) -> str:
    return OPS[p[0]] + " " + "".join(map(str, p[1]))


def verify(p: Prompt, out: Sequence[int]) -> float:
    """Exact verifier: reward in {-1, 1}."""
    return 1.0 if list(out) == answer(p) else -1.0


def random_prompt(rng: random.Random,
                  lengths: Sequence[int] = LENGTHS) -> Prompt:
    """An operation and a digit string, the length drawn from `lengths`
    (the task's 2..7 unless a regime narrows it: bench/train/regimes.py)."""
    n = rng.choice(lengths)
    return (rng.randrange(len(OPS)), tuple(rng.randrange(DIGITS) for _ in range(n)))


def heldout_set(n: int, seed: int = 12345,
                lengths: Sequence[int] = LENGTHS) -> List[Prompt]:
    """n distinct prompts, balanced over operation and length."""
    rng = random.Random(seed)
    out, seen = [], set()
    cells = [(o, L) for o in range(len(OPS)) for L in lengths]
    i = 0
    while len(out) < n:
        o, L = cells[i % len(cells)]
        i += 1
        p = (o, tuple(rng.randrange(DIGITS) for _ in range(L)))
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


class PromptStream:
    """Training prompts: the task's distribution minus the held-out set."""

    def __init__(self, heldout: Sequence[Prompt], seed: int,
                 lengths: Sequence[int] = LENGTHS):
        self.exclude = set(heldout)
        self.rng = random.Random(seed)
        self.lengths = tuple(lengths)

    def take(self, n: int) -> List[Prompt]:
        out = []
        while len(out) < n:
            p = random_prompt(self.rng, self.lengths)
            if p not in self.exclude:
                out.append(p)
        return out

    def take_ids(self, n: int) -> List[Tuple[Optional[int], Prompt, int]]:
        """(dataset index, prompt, epoch): a stream has neither."""
        return [(None, p, 0) for p in self.take(n)]


class EpochStream:
    """A fixed training set of n distinct prompts (the task's distribution
    minus the held-out set), visited epoch after epoch, each in its own
    seeded order: what the rules with a cross-epoch state (Knapsack RL's
    own estimate, GRESO's filter) learn from."""

    def __init__(self, heldout: Sequence[Prompt], n: int, seed: int,
                 lengths: Sequence[int] = LENGTHS):
        rng = random.Random(seed)
        exclude, seen = set(heldout), set()
        self.prompts: List[Prompt] = []
        while len(self.prompts) < n:
            p = random_prompt(rng, lengths)
            if p not in exclude and p not in seen:
                seen.add(p)
                self.prompts.append(p)
        self.rng = random.Random(seed + 1)
        self.epoch, self.order = -1, []

    def take_ids(self, n: int) -> List[Tuple[Optional[int], Prompt, int]]:
        out = []
        while len(out) < n:
            if not self.order:
                self.epoch += 1
                self.order = list(range(len(self.prompts)))
                self.rng.shuffle(self.order)
                self.order.reverse()  # popped from the end: in order
            i = self.order.pop()
            out.append((i, self.prompts[i], self.epoch))
        return out

    def take(self, n: int) -> List[Prompt]:
        return [p for _, p, _ in self.take_ids(n)]


def features(p: Prompt) -> List[float]:
    """What the value prior sees of a prompt: operation, length, their
    interaction, and two content statistics (sortedness, repeats). Never the
    prompt's identity."""
    op, ds = p
    L = len(ds)
    f = [0.0] * (len(OPS) + len(LENGTHS) + len(OPS) * len(LENGTHS))
    f[op] = 1.0
    f[len(OPS) + LENGTHS.index(L)] = 1.0
    f[len(OPS) + len(LENGTHS) + op * len(LENGTHS) + LENGTHS.index(L)] = 1.0
    asc = sum(1 for a, b in zip(ds, ds[1:]) if a <= b) / (L - 1)
    rep = 1.0 - len(set(ds)) / L
    return f + [L / max(LENGTHS), asc, rep]
