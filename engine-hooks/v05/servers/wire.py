# SPDX-License-Identifier: MIT
"""The wire types of the server routes (docs/SERVERS.md, "Routes"): what a
request body must hold, checked field by field into plain Python values,
and the records a group's stream is made of.

Every check names the field it refused (``prompt_ids[3]``,
``rewards[1].reward``) in a ``WireError``, which the routes answer with
HTTP 422 (400 for a body that is not JSON at all); nothing here touches
the plugin or the engine, so a refused request changes nothing. Plain
Python rather than the servers' pydantic: the messages are ours and the
same on vLLM's and sglang's pydantic versions.
"""

import dataclasses
import json
import math
from typing import Any, Dict, List, Optional, Tuple, Union

from ..core.decision import uid_bytes
from ..core.names import UID_MAX

__all__ = ["WireError", "GroupRequest", "Reward", "parse_json",
           "group_request", "rewards", "abort_request", "fit_post",
           "sample_record", "final_record", "error_record", "line",
           "SAMPLING_KEYS", "MAX_SAMPLE"]

# Sampling settings a group may carry, the same for both engines (each
# engine adapter translates them); anything else is refused by name.
SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "top_k", "seed",
                 "ignore_eos", "stop_token_ids")
MAX_SAMPLE = 63          # a group has at most 64 samples (the plugin's mask)
_MAX_PROMPT_IDS = 1 << 20


class WireError(ValueError):
    """A request body the route refuses: `field` is where (dotted path),
    `status` the HTTP status to answer with."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field, self.status = field, status

    def body(self) -> Dict[str, Any]:
        return {"error": str(self), "field": self.field}


@dataclasses.dataclass
class GroupRequest:
    uid: str
    prompt: Union[str, List[int]]
    prior: Optional[float]
    sampling: Dict[str, Any]


@dataclasses.dataclass
class Reward:
    uid: str
    sample: int
    reward: float
    gen: int
    owner: Optional[int]


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError("body", f"not JSON ({e})", status=400) from None


def _obj(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise WireError(field, f"must be a JSON object, not "
                        f"{_kind(value)}")
    return value


def _kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string",
            bool: "a boolean", type(None): "null"}.get(
                type(value), type(value).__name__)


def _unknown(body: dict, known, field: str = "") -> None:
    extra = sorted(set(body) - set(known))
    if extra:
        where = f"{field}.{extra[0]}" if field else extra[0]
        raise WireError(where, f"unknown field (known: {', '.join(known)})")


def _uid(value, field: str = "uid") -> str:
    if not isinstance(value, str):
        raise WireError(field, f"must be a string, not {_kind(value)}")
    n = len(uid_bytes(value))
    if not 1 <= n <= UID_MAX:
        raise WireError(field, f"is {n} bytes; a uid has 1 to {UID_MAX}")
    return value


def _int(value, field: str, lo: int, hi: int) -> int:
    if type(value) is not int:  # bool is refused too
        raise WireError(field, f"must be an integer, not {_kind(value)}")
    if not lo <= value <= hi:
        raise WireError(field, f"{value} is not in [{lo}, {hi}]")
    return value


def _unit(value, field: str) -> float:
    """A finite number in [-1, 1] (a reward, a prior)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(field, f"must be a number, not {_kind(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise WireError(field, f"{value!r} is not a finite number")
    if not -1.0 <= v <= 1.0:
        raise WireError(field, f"{v} is outside [-1, 1]")
    return v


def _sampling(value, field: str = "sampling") -> Dict[str, Any]:
    body = _obj(value, field)
    _unknown(body, SAMPLING_KEYS, field)
    out: Dict[str, Any] = {}
    if "max_tokens" in body:
        out["max_tokens"] = _int(body["max_tokens"], f"{field}.max_tokens",
                                 1, 1 << 20)
    for k, lo, hi in (("temperature", 0.0, 100.0), ("top_p", 0.0, 1.0)):
        if k in body:
            v = body[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    not math.isfinite(v) or not lo <= v <= hi:
                raise WireError(f"{field}.{k}",
                                f"{v!r} is not a number in [{lo}, {hi}]")
            out[k] = float(v)
    if "top_k" in body:
        out["top_k"] = _int(body["top_k"], f"{field}.top_k", -1, 1 << 20)
    if "seed" in body and body["seed"] is not None:
        out["seed"] = _int(body["seed"], f"{field}.seed", 0, 2**31 - 1)
    if "ignore_eos" in body:
        if not isinstance(body["ignore_eos"], bool):
            raise WireError(f"{field}.ignore_eos", "must be true or false")
        out["ignore_eos"] = body["ignore_eos"]
    if "stop_token_ids" in body:
        ids = body["stop_token_ids"]
        if not isinstance(ids, list):
            raise WireError(f"{field}.stop_token_ids", "must be an array")
        out["stop_token_ids"] = [
            _int(t, f"{field}.stop_token_ids[{i}]", 0, 2**31 - 1)
            for i, t in enumerate(ids)]
    return out


def group_request(body: Any) -> GroupRequest:
    """POST /v05/group: {"uid", "prompt" | "prompt_ids", "prior"?,
    "sampling"?}."""
    body = _obj(body, "body")
    _unknown(body, ("uid", "prompt", "prompt_ids", "prior", "sampling"))
    if "uid" not in body:
        raise WireError("uid", "missing")
    uid = _uid(body["uid"])
    has_text, has_ids = "prompt" in body, "prompt_ids" in body
    if has_text == has_ids:
        raise WireError("prompt", "give exactly one of prompt (text) and "
                        "prompt_ids (token ids)")
    if has_text:
        prompt = body["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise WireError("prompt", "must be a non-empty string")
    else:
        ids = body["prompt_ids"]
        if not isinstance(ids, list) or not 1 <= len(ids) <= _MAX_PROMPT_IDS:
            raise WireError("prompt_ids", "must be a non-empty array of "
                            "token ids")
        prompt = [_int(t, f"prompt_ids[{i}]", 0, 2**31 - 1)
                  for i, t in enumerate(ids)]
    prior = body.get("prior", 0.0)
    prior = None if prior is None else _unit(prior, "prior")
    sampling = _sampling(body.get("sampling", {}))
    return GroupRequest(uid, prompt, prior, sampling)


def _reward(body: Any, field: str) -> Reward:
    body = _obj(body, field)
    _unknown(body, ("uid", "sample", "reward", "gen", "owner"), field)
    for k in ("uid", "sample", "reward", "gen"):
        if k not in body:
            raise WireError(f"{field}.{k}", "missing")
    owner = body.get("owner")
    return Reward(_uid(body["uid"], f"{field}.uid"),
                  _int(body["sample"], f"{field}.sample", 0, MAX_SAMPLE),
                  _unit(body["reward"], f"{field}.reward"),
                  _int(body["gen"], f"{field}.gen", 0, 2**32 - 1),
                  None if owner is None else
                  _int(owner, f"{field}.owner", 0, 1023))


def rewards(body: Any) -> List[Reward]:
    """POST /v05/reward: one reward object, or {"rewards": [...]}; every
    reward is checked before any is pushed."""
    body = _obj(body, "body")
    if "rewards" not in body:
        return [_reward(body, "body")]
    _unknown(body, ("rewards",))
    items = body["rewards"]
    if not isinstance(items, list) or not items:
        raise WireError("rewards", "must be a non-empty array")
    return [_reward(r, f"rewards[{i}]") for i, r in enumerate(items)]


def abort_request(body: Any) -> Tuple[str, Optional[int]]:
    """POST /v05/abort: {"uid", "owner"?}; owner (a sample record's) names
    the front end that runs the group, else every front end is asked."""
    body = _obj(body, "body")
    _unknown(body, ("uid", "owner"))
    if "uid" not in body:
        raise WireError("uid", "missing")
    owner = body.get("owner")
    return (_uid(body["uid"]),
            None if owner is None else _int(owner, "owner", 0, 1023))


def fit_post(body: Any) -> Dict[str, Any]:
    """POST /v05/fit: {"others": [numbers], "policy_version": int}."""
    body = _obj(body, "body")
    _unknown(body, ("others", "policy_version"))
    others = body.get("others")
    if not isinstance(others, list) or not others:
        raise WireError("others", "must be a non-empty array of numbers "
                        "(EbState.to_list())")
    vals = []
    for i, v in enumerate(others):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not math.isfinite(v):
            raise WireError(f"others[{i}]", f"{v!r} is not a finite number")
        vals.append(float(v))
    if "policy_version" not in body:
        raise WireError("policy_version", "missing")
    return {"others": vals,
            "policy_version": _int(body["policy_version"], "policy_version",
                                   0, 2**63 - 1)}


# ---- the records of a group's stream (NDJSON: one JSON object a line) ----

def sample_record(uid: str, sample: int, gen: int, owner: int,
                  origin: str, output: Dict[str, Any]) -> Dict[str, Any]:
    """A sample as it finishes. The reward for it names (uid, sample, gen)
    and, with several front ends, owner; origin names the front-end
    process that sent it (a client gathers rewards by it)."""
    return {"type": "sample", "uid": uid, "sample": sample, "gen": gen,
            "owner": owner, "origin": origin, **output}


def final_record(uid: str, group, dropped: bool, halted: bool
                 ) -> Dict[str, Any]:
    return {"type": "final", "uid": uid, "k": int(group.k),
            "rewards": [float(x) for x in group.rewards[:group.k]],
            "advantages": [float(x) for x in group.advantages[:group.k]],
            "baseline": float(group.baseline), "sigma": float(group.sigma),
            "kept": [int(i) for i in group.kept], "dropped": dropped,
            "halted": halted}


def error_record(uid: str, kind: str, message: str) -> Dict[str, Any]:
    """The stream's last record when the group did not end final:
    kind "aborted" or "error"."""
    return {"type": kind, "uid": uid, "error": message}


def line(record: Dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()
