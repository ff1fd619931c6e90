# SPDX-License-Identifier: MIT
"""The task verl's main_ppo trains on in the tests: prompts of three
characters for v05.demos.tiny's model, and the reward function verl loads
from this file (``reward.custom_reward_function.path``)."""

import os

# Imported by verl's reward loop from this file's path: no package around it.


def _char_id(c: str) -> int:
    from v05.demos.tiny import CHARS
    return 3 + CHARS.index(c)


def compute_score(data_source, solution_str, ground_truth, extra_info=None,
                  **kwargs):
    """1.0 when the response's first character has the parity
    `ground_truth` (the parity of the prompt's three characters' ids), else
    0.0 (also for an empty response). V05_TASK_FAULT (a test's fault
    injection, see test_verl_main_ppo.py) makes chosen calls raise or
    return NaN."""
    fault = _fault(solution_str)
    if fault == "raise":
        raise RuntimeError("injected scorer failure")
    if fault == "nan":
        return float("nan")
    from v05.demos.tiny import CHARS
    s = solution_str or ""
    if not s or s[0] not in CHARS:
        return 0.0
    return 1.0 if _char_id(s[0]) % 2 == int(ground_truth) else 0.0


_calls = 0


def log_fault(what: str, **more) -> None:
    """A fault injected: one JSON line appended to $V05_FAULT_LOG, if set,
    so a test knows which faults fired (whatever error its chunk then
    reports: the fault's own or the cancellation it caused)."""
    path = os.environ.get("V05_FAULT_LOG")
    if not path:
        return
    import json
    line = json.dumps(dict(what=what, pid=os.getpid(), **more)) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())   # one write: lines do not interleave
    finally:
        os.close(fd)


def _fault(solution_str):
    """V05_TASK_FAULT="raise@3,nan@7,cancel@11": what the 3rd, 7th, 11th
    call of this process does instead of scoring."""
    global _calls
    _calls += 1
    spec = os.environ.get("V05_TASK_FAULT")
    if not spec:
        return None
    for item in spec.split(","):
        what, _, at = item.partition("@")
        if int(at) == _calls:
            log_fault(what, call=_calls)
            if what == "cancel":
                # A scoring task cancelled: Ray reports it to the caller
                # as a cancelled task.
                import asyncio
                raise asyncio.CancelledError("injected cancellation")
            return what
    return None


def make_data(path: str, n: int, seed: int = 0, sure: int = 0) -> str:
    """A parquet file of n prompts in verl's RL format; returns its path.
    sure: every sure-th prompt (0, sure, 2 sure, ...) can never succeed
    (its ground truth is no parity) and has the prior -0.98 in a v05_prior
    column, the others the prior 0 (no column when sure is 0)."""
    import random

    import pandas as pd
    from v05.demos.tiny import CHARS

    rng = random.Random(seed)
    letters = CHARS[33:59]  # A..Z
    rows, seen = [], set()
    while len(rows) < n:
        text = "".join(rng.choice(letters) for _ in range(3))
        if text in seen:
            continue
        seen.add(text)
        target = sum(_char_id(c) for c in text) % 2
        hopeless = sure and len(rows) % sure == 0
        if sure:
            extra = {"v05_prior": -0.98 if hopeless else 0.0}
        else:
            extra = {}
        if hopeless:
            target = 2
        rows.append({**extra,
            "data_source": "v05_parity",
            "prompt": [{"role": "user", "content": text}],
            "ability": "parity",
            "reward_model": {"style": "rule", "ground_truth": str(target)},
            "extra_info": {"index": len(rows), "split": "train"},
        })
    pd.DataFrame(rows).to_parquet(path)
    return path
