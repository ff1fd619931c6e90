# SPDX-License-Identifier: MIT
"""verl's advantage estimator "v05": each row's advantage is its group's for
the row's sample, found by uid whatever the row order."""

import collections
import logging
from typing import Callable, Optional

import numpy as np

from ...core import _checks
from ..report import report
from .config import cfg_get, score_range, score_to_reward, segment_of
from .groups import groups as _groups
from .rows import record_from_rows, rows_fields

__all__ = ["compute_v05_advantage", "ESTIMATOR_NAME", "UNKNOWN_POLICIES",
           "fallback_counts"]

log = logging.getLogger(__name__)

ESTIMATOR_NAME = "v05"
UNKNOWN_POLICIES = ("grpo", "zero", "error")
# Rewards are float32 in the segment; a row's reward goes through
# score_to_reward in float64 first.
REWARD_TOL = 1e-5

# Rows (unmasked) that got verl's GRPO advantages or zero instead of v05's,
# and the estimator calls that had any, since this process started. Each
# such call also logs a warning that says how many and why.
_FALLBACK = collections.Counter()


def fallback_counts() -> dict:
    """{"rows": n, "calls": m}: rows that did not get v05's advantages
    (algorithm.v05_unknown grpo or zero), over how many estimator calls."""
    return {"rows": _FALLBACK["rows"], "calls": _FALLBACK["calls"]}


def _check_uid_types(index) -> None:
    """v05 names a group by its uid's string; verl's GRPO by the uid
    object. Two uids that differ for verl but print the same (7 and "7")
    would be one group to v05: refused, not merged."""
    first = {}
    for u in index:
        s = str(u)
        f = first.setdefault(s, u)
        if f is not u and f != u:
            raise ValueError(
                f"v05: uids {f!r} ({type(f).__name__}) and {u!r} "
                f"({type(u).__name__}) in one batch are different groups to "
                "verl but the same to v05, which names a group by its uid's "
                "string; give the batch's uids one type (verl's own are str)")


def _kept(rec):
    keep = getattr(rec, "keep", (1 << rec.k) - 1)
    return [i for i in range(rec.k) if keep >> i & 1]


def _check_rows(uid, rec, row_rewards, samples):
    """Map each row to a sample of rec, checking the rows are exactly the
    group's samples trained on (all k, or the keep mask's under
    reinforce-ada). Returns the sample index per row."""
    n = len(row_rewards)
    kept = _kept(rec)
    if n != len(kept):
        raise ValueError(f"v05: uid {uid!r} has {n} rows, its group has "
                         f"k = {rec.k}" +
                         (f" of which {len(kept)} are trained on"
                          if len(kept) != rec.k else "") +
                         " (rows lost, repeated or padded?)")
    if samples is not None:
        if sorted(samples) != kept:
            raise ValueError(f"v05: uid {uid!r}: rows name samples "
                             f"{sorted(samples)}, not " +
                             (f"0..{rec.k - 1}" if len(kept) == rec.k
                              else f"the kept {kept}"))
        for r, s in zip(row_rewards, samples):
            if abs(r - float(rec.rewards[s])) > REWARD_TOL:
                raise ValueError(f"v05: uid {uid!r} sample {s}: the row's "
                                 f"reward {r} is not the group's "
                                 f"{float(rec.rewards[s])}")
        return list(samples)
    # No sample indices (verl passes only uids): the advantage is a
    # function of the reward within a group, so match rewards as multisets.
    order_rows = sorted(range(n), key=lambda i: row_rewards[i])
    order_group = sorted(kept, key=lambda j: float(rec.rewards[j]))
    out = [0] * n
    for i, j in zip(order_rows, order_group):
        if abs(row_rewards[i] - float(rec.rewards[j])) > REWARD_TOL:
            raise ValueError(f"v05: uid {uid!r}: the rows' rewards "
                             f"{sorted(row_rewards)} are not the group's "
                             f"{sorted(rec.rewards[kept].tolist())}")
        out[i] = j
    return out


def compute_v05_advantage(token_level_rewards, response_mask, index=None,
                          config=None, non_tensor_batch=None,
                          to_reward: Optional[Callable[[float], float]] = None,
                          **kwargs):
    """verl estimator (registered as "v05"): each row's advantage is its
    group's advantage for the row's sample, independent of row order.

    Config keys (algorithm.*, added with +): v05_segment (or $V05_SEGMENT),
    v05_unknown ("grpo" default, "zero", "error": what rows of uids v05
    has no group for get; grpo and zero log a warning with the count and
    why, and count in fallback_counts()), v05_wait_s (seconds to wait for a
    group not yet final on the segment; default 0), v05_score_range ([lo,
    hi] of the scores, default [0, 1]; a row's score outside it, NaN or
    infinite raises, naming the row). to_reward: score -> reward on
    [-1, 1], instead of the range's mapping.
    """
    import torch

    if index is None:
        raise ValueError("v05 estimator needs the uid index "
                         "(non_tensor_batch['uid'])")
    unknown = str(cfg_get(config, "v05_unknown", "grpo"))
    if unknown not in UNKNOWN_POLICIES:
        raise ValueError(f"v05: v05_unknown={unknown!r} is not one of "
                         f"{UNKNOWN_POLICIES}")
    wait = float(cfg_get(config, "v05_wait_s", 0.0))
    segment = segment_of(config, required=False)
    rng = score_range(config)
    _check_uid_types(index)

    def reward_of(i, uid):
        what = f"verl score of a row of uid {uid!r}"
        if to_reward is None:
            return score_to_reward(scores[i], rng, what=what)
        return _checks.unit_interval(what + " as a v05 reward",
                                     to_reward(scores[i]))

    scores = token_level_rewards.sum(dim=-1).double().cpu().numpy()
    rows_of = collections.OrderedDict()
    for i, uid in enumerate(index):
        rows_of.setdefault(str(uid), []).append(i)

    adv = torch.zeros(len(index), dtype=torch.float32)
    unknown_rows = []
    used_segment = []
    report_path = cfg_get(config, "v05_report") or None
    given = {}  # uid -> [[sample, advantage], ...] (the run report)
    for uid, rows in rows_of.items():
        fields = rows_fields(index, non_tensor_batch, rows)
        samples = None
        rec = None
        if fields is not None:
            rec = record_from_rows(uid, fields)
            samples = [int(f[0]) for f in fields]
        seg_group = None
        if rec is None:
            rec = _groups.records.get(uid)  # recorded, or used before
            if rec is None and segment is not None:
                seg_group = _groups.from_segment(segment, uid, wait)
        elif segment is not None:
            # The rows' numbers, checked against the segment's group when
            # it is on this host (no wait: the rows are there, so it is).
            seg_group = _groups.from_segment(segment, uid, 0.0)
        if seg_group is not None:
            if rec is not None:
                # Rows' numbers against the segment's group: same k and
                # keep, and the kept samples' rewards and advantages (the
                # rows carry no others).
                kept = _kept(rec)
                if (rec.k != seg_group.k or rec.keep != seg_group.keep or
                        not np.allclose(rec.rewards[kept],
                                        seg_group.rewards[kept],
                                        atol=REWARD_TOL) or
                        not np.allclose(rec.advantages, seg_group.advantages,
                                        atol=REWARD_TOL)):
                    raise ValueError(f"v05: uid {uid!r}: the rows' numbers "
                                     "are not the segment's group")
            rec = seg_group  # zero copy: views of the segment
            used_segment.append(uid)
        if rec is None:
            unknown_rows.extend(rows)
            continue
        # Only rows v05 answers for are its business: a validation row's
        # score may have any range.
        row_rewards = [reward_of(i, uid) for i in rows]
        idx = _check_rows(uid, rec, row_rewards, samples)
        # Gathered in numpy: a copy, so the tensor never wraps the
        # segment's read-only view.
        adv[rows] = torch.from_numpy(
            np.asarray(rec.advantages)[np.asarray(idx, dtype=np.int64)])
        if report_path:
            given[uid] = [[int(j), float(adv[i])] for i, j in zip(rows, idx)]
    for uid in used_segment:
        _groups.done(segment, uid)

    if unknown_rows:
        live = [i for i in unknown_rows if bool(response_mask[i].any())]
        names = sorted({str(index[i]) for i in unknown_rows})
        why = ("their rows carry no v05 numbers (rolled out without v05's "
               "rollout component, or their uids lost the V05Uid tag), this "
               "process recorded no group of theirs, and " +
               (f"segment {segment} had none (a group released by the "
                "rollout side before the trainer read it is gone: "
                "docs/TRAINERS.md, 'Who attaches and releases when')"
                if segment else "no segment is configured "
                "(algorithm.v05_segment)"))
        if unknown == "error":
            raise KeyError(f"v05: no group for uids {names[:5]} "
                           f"({len(unknown_rows)} rows): {why}")
        if live:  # masked rows (padding) learn nothing either way
            _FALLBACK["rows"] += len(live)
            _FALLBACK["calls"] += 1
            log.warning(
                "v05 estimator: %d rows of %d uids (%s%s) have no v05 group "
                "and get %s instead of v05's advantages: %s. "
                "algorithm.v05_unknown=error makes this an error; counted in "
                "v05.trainers.verl.estimator.fallback_counts().",
                len(live), len(names), ", ".join(names[:3]),
                ", ..." if len(names) > 3 else "",
                "verl's GRPO advantages" if unknown == "grpo" else "zero",
                why)
    if report_path:
        live_unknown = [i for i in unknown_rows if bool(response_mask[i].any())]
        report(report_path, {
            "kind": "advantage", "rows": len(index),
            "v05_rows": sum(len(v) for v in given.values()),
            "fallback_rows": len(live_unknown),
            "masked_rows": len(unknown_rows) - len(live_unknown),
            "groups": given})
    out = adv.to(token_level_rewards.device).unsqueeze(-1) * response_mask
    if unknown_rows and unknown == "grpo":
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
        sel = torch.tensor(unknown_rows, dtype=torch.long,
                           device=token_level_rewards.device)
        g_adv, _ = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards[sel],
            response_mask=response_mask[sel],
            index=np.asarray([str(index[i]) for i in unknown_rows],
                             dtype=object),
            norm_adv_by_std_in_grpo=bool(
                cfg_get(config, "norm_adv_by_std_in_grpo", True)))
        out[sel] = g_adv.to(out.dtype)
    return out, out
