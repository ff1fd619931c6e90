# SPDX-License-Identifier: MIT
"""verl's advantage estimator "v05": each row's advantage is its group's for
the row's sample, found by uid whatever the row order."""

import collections
from typing import Callable

import numpy as np

from .config import cfg_get, score_to_reward, segment_of
from .groups import groups as _groups
from .rows import record_from_rows, rows_fields

__all__ = ["compute_v05_advantage", "ESTIMATOR_NAME", "UNKNOWN_POLICIES"]

ESTIMATOR_NAME = "v05"
UNKNOWN_POLICIES = ("grpo", "zero", "error")
# Rewards are float32 in the segment; a row's reward goes through
# score_to_reward in float64 first.
REWARD_TOL = 1e-5


def _check_rows(uid, rec, row_rewards, samples):
    """Map each row to a sample of rec, checking the rows are exactly the
    group's samples. Returns the sample index per row."""
    n = len(row_rewards)
    if n != rec.k:
        raise ValueError(f"v05: uid {uid!r} has {n} rows, its group has "
                         f"k = {rec.k} (rows lost, repeated or padded?)")
    if samples is not None:
        if sorted(samples) != list(range(rec.k)):
            raise ValueError(f"v05: uid {uid!r}: rows name samples "
                             f"{sorted(samples)}, not 0..{rec.k - 1}")
        for r, s in zip(row_rewards, samples):
            if abs(r - float(rec.rewards[s])) > REWARD_TOL:
                raise ValueError(f"v05: uid {uid!r} sample {s}: the row's "
                                 f"reward {r} is not the group's "
                                 f"{float(rec.rewards[s])}")
        return list(samples)
    # No sample indices (verl passes only uids): the advantage is a
    # function of the reward within a group, so match rewards as multisets.
    order_rows = sorted(range(n), key=lambda i: row_rewards[i])
    order_group = sorted(range(rec.k), key=lambda j: float(rec.rewards[j]))
    out = [0] * n
    for i, j in zip(order_rows, order_group):
        if abs(row_rewards[i] - float(rec.rewards[j])) > REWARD_TOL:
            raise ValueError(f"v05: uid {uid!r}: the rows' rewards "
                             f"{sorted(row_rewards)} are not the group's "
                             f"{sorted(rec.rewards.tolist())}")
        out[i] = j
    return out


def compute_v05_advantage(token_level_rewards, response_mask, index=None,
                          config=None, non_tensor_batch=None,
                          to_reward: Callable[[float], float] = score_to_reward,
                          **kwargs):
    """verl estimator (registered as "v05"): each row's advantage is its
    group's advantage for the row's sample, independent of row order.

    Config keys (algorithm.*, added with +): v05_segment (or $V05_SEGMENT),
    v05_unknown ("grpo" default, "zero", "error"), v05_wait_s (seconds to
    wait for a group not yet final on the segment; default 0).
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

    scores = token_level_rewards.sum(dim=-1).double().cpu().numpy()
    rows_of = collections.OrderedDict()
    for i, uid in enumerate(index):
        rows_of.setdefault(str(uid), []).append(i)

    adv = torch.zeros(len(index), dtype=torch.float32)
    unknown_rows = []
    used_segment = []
    for uid, rows in rows_of.items():
        fields = rows_fields(index, non_tensor_batch, rows)
        row_rewards = [to_reward(scores[i]) for i in rows]
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
                # Rows' numbers against the segment's group: same k,
                # rewards and advantages.
                if (rec.k != seg_group.k or
                        not np.allclose(rec.rewards, seg_group.rewards,
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
        idx = _check_rows(uid, rec, row_rewards, samples)
        # Gathered in numpy: a copy, so the tensor never wraps the
        # segment's read-only view.
        adv[rows] = torch.from_numpy(
            np.asarray(rec.advantages)[np.asarray(idx, dtype=np.int64)])
    for uid in used_segment:
        _groups.done(segment, uid)

    if unknown_rows:
        if unknown == "error":
            names = sorted({str(index[i]) for i in unknown_rows})[:5]
            raise KeyError(f"v05: no group for uids {names} "
                           f"({len(unknown_rows)} rows)")
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
