# SPDX-License-Identifier: MIT
"""A group's numbers on verl's rows: the per-row fields the rollout side
records, the V05Uid that carries them through verl, and a group rebuilt
from its rows."""

import numpy as np

from .groups import GroupRecord

__all__ = ["ROW_FIELDS", "V05Uid", "tag_rows", "rows_fields",
           "record_from_rows", "rows_in_sample_order"]

# Per-row numbers the rollout side records in non_tensor_batch. v05_keep:
# the group's keep mask (bit i: sample i has a row; all k bits but under
# reinforce-ada, whose other samples are not trained on and get no row).
ROW_FIELDS = ("v05_sample", "v05_k", "v05_baseline", "v05_sigma",
              "v05_reward", "v05_advantage", "v05_keep")


def all_kept(k: int) -> int:
    return (1 << int(k)) - 1


def keep_of(k, keep) -> int:
    """A row's keep mask: 0 or missing (rows written without the field)
    means every sample; a final group with rows keeps at least one."""
    keep = int(keep or 0)
    return keep if keep else all_kept(k)


class V05Uid(str):
    """A uid (equal to, hashing as, printing as the plain string) that
    carries its row's v05 numbers, so they reach a registered estimator
    through verl's ``compute_advantage`` (which passes only the uid array)
    and survive DataProto reorder/select/concat and pickling."""

    def __new__(cls, uid, sample, k, baseline, sigma, reward, advantage,
                keep=None):
        s = super().__new__(cls, uid)
        s.v05 = (int(sample), int(k), float(baseline), float(sigma),
                 float(reward), float(advantage), keep_of(k, keep))
        return s

    def __reduce__(self):
        return (V05Uid, (str(self),) + self.v05)


def tag_rows(data) -> None:
    """Rollout side: replace data.non_tensor_batch["uid"] by V05Uid strings
    carrying the rows' ROW_FIELDS (which must all be there). Rows with
    v05_k == 0 (not a v05 sample) keep their plain uid."""
    nt = data.non_tensor_batch
    missing = [f for f in ROW_FIELDS if f not in nt]
    if missing:
        raise KeyError(f"v05: tag_rows needs non_tensor_batch fields {missing}")
    cols = [nt[f] for f in ROW_FIELDS]
    k = nt["v05_k"]
    nt["uid"] = np.array([V05Uid(str(u), *(c[i] for c in cols)) if int(k[i]) > 0
                          else u for i, u in enumerate(nt["uid"])], dtype=object)


def rows_fields(index, non_tensor_batch, rows):
    """Per-row numbers of `rows` (indices), or None if any row lacks them
    (v05_k == 0 marks a row that is not a v05 sample)."""
    out = []
    nt = non_tensor_batch
    have_nt = nt is not None and all(f in nt for f in ROW_FIELDS)
    for i in rows:
        if have_nt:
            v = tuple(nt[f][i] for f in ROW_FIELDS)
        else:
            v = getattr(index[i], "v05", None)
        if v is None or int(v[1]) <= 0:
            return None
        out.append(v)
    return out


def record_from_rows(uid, fields) -> GroupRecord:
    """A group from its rows' own numbers; they must agree on k, baseline,
    sigma and the keep mask and name each kept sample once (the samples
    not kept have no row: their rewards are unknown here, NaN, and their
    advantages 0)."""
    k = int(fields[0][1])
    base, sigma = float(fields[0][2]), float(fields[0][3])
    keep = keep_of(k, fields[0][6] if len(fields[0]) > 6 else 0)
    rewards = np.full(k, np.nan, dtype=np.float32)
    adv = np.zeros(k, dtype=np.float32)
    for f in fields:
        sample, kk, b, s, r, a = f[:6]
        sample = int(sample)
        kp = keep_of(k, f[6] if len(f) > 6 else 0)
        if int(kk) != k or float(b) != base or float(s) != sigma or \
                kp != keep:
            raise ValueError(f"v05: rows of uid {uid!r} disagree on their "
                             "group (k, baseline, sigma, keep)")
        if not 0 <= sample < k or not keep >> sample & 1 or \
                not np.isnan(rewards[sample]):
            raise ValueError(f"v05: uid {uid!r}: sample {sample} is out of "
                             f"0..{k - 1}, not kept, or repeated")
        rewards[sample] = r
        adv[sample] = a
    return GroupRecord(uid, k, base, sigma, rewards, adv, "rows", keep)


def rows_in_sample_order(uids, samples) -> np.ndarray:
    """A permutation putting each uid's rows in sample order."""
    return np.lexsort((np.asarray(samples), np.asarray(uids)))
