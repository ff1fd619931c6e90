# SPDX-License-Identifier: MIT
"""A scorer named by import path in the server's configuration
(``"scorer": "package.module:function"``, docs/SERVERS.md, "Scorer"):

    def function(record: dict) -> float | None

``record`` is the sample's record as the group's stream carries it
(``uid``, ``sample``, ``gen``, ``owner``, ``token_ids``, ``text``,
``finish_reason``, ``prompt_tokens``, ``cached_tokens``) plus ``prompt``,
the group's prompt as the client sent it (text or token ids); it is the
scorer's own copy. The answer is the sample's reward, a finite number in
[-1, 1] (a bool is refused, as the reward route refuses one), or None:
"not mine", the sample then waits for a reward pushed over HTTP or into
the lanes. A reward pushed for the sample before the scorer answers wins,
and the score is dropped (counted ``scores_unused``); once the score is
pushed, a later HTTP push for the sample is a 409.

It runs in a pool of ``scorer_threads`` threads of its own, never on the
event loop: a scorer that blocks holds up scoring, not the server. A
scorer that raises, or answers anything else than a number in range or
None, ends its group with an "error" record naming the scorer and the
reason (counted ``scorer_errors``); the server goes on. A scorer still
running when ``reward_timeout_s`` runs out counts as a reward that never
came (its thread cannot be stopped: its answer is then dropped).

The path is resolved when the server starts: a path that is not
``module:function``, a module that does not import, a name it does not
have or that is not a plain function (an ``async def`` is refused: it
would need a loop of its own in the thread) stops the server with a
ValueError saying which.
"""

import concurrent.futures
import importlib
import inspect
import numbers
import re
from typing import Any, Callable, Dict, Optional

from . import wire

__all__ = ["Scorer", "ScorerError", "check_path", "load"]

_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*"
                   r"(\.[A-Za-z_][\w]*)*")


class ScorerError(RuntimeError):
    """The scorer raised or answered something that is no reward."""


def check_path(path: Any, where: str) -> str:
    """The form only (the configuration's check, no import)."""
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        raise ValueError(f"v05 server: {where} scorer must be an import "
                         f"path 'package.module:function', not {path!r}")
    return path


def load(path: str) -> Callable[[Dict[str, Any]], Optional[float]]:
    """The function `path` names; ValueError saying what is wrong."""
    mod_name, _, attr = path.partition(":")
    try:
        obj = importlib.import_module(mod_name)
    except Exception as e:  # any error of the module's own import too
        raise ValueError(f"v05 server: scorer {path!r}: module {mod_name!r}"
                         f" does not import ({type(e).__name__}: {e})"
                         ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"v05 server: scorer {path!r}: {mod_name} has "
                             f"no {attr!r}") from None
    if inspect.iscoroutinefunction(obj) or not callable(obj):
        what = "an async def" if callable(obj) else "not callable"
        raise ValueError(f"v05 server: scorer {path!r} is {what}: it must "
                         "be a plain function record -> reward (it runs in "
                         "a thread pool)")
    return obj


def _value(x: Any) -> Optional[float]:
    """None, or the reward checked as the reward route checks a pushed
    one (its message: "scorer: nan is not a finite number")."""
    if x is None:
        return None
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        x = float(x)  # numpy's float32 and the like
    return wire._unit(x, "scorer")


class Scorer:
    def __init__(self, path: str, threads: int):
        self.path = path
        self.fn = load(path)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="v05-scorer")

    def submit(self, loop, record: Dict[str, Any]):
        """An asyncio future of the checked reward (or None); it raises
        ScorerError with the reason."""
        return loop.run_in_executor(self._pool, self._score, record)

    def _score(self, record):
        """In a scorer thread."""
        try:
            x = self.fn(record)
        except Exception as e:
            raise ScorerError(f"scorer {self.path} raised on sample "
                              f"{record['sample']}: {type(e).__name__}: "
                              f"{e}") from None
        try:
            return _value(x)
        except wire.WireError as e:
            raise ScorerError(f"scorer {self.path} gave no reward for "
                              f"sample {record['sample']}: {e}") from None

    def close(self):
        # Not joined: a scorer that hangs must not hang the server's exit.
        self._pool.shutdown(wait=False, cancel_futures=True)
