# SPDX-License-Identifier: MIT
"""verl adapter: an advantage estimator and reward managers, for verl 0.9.1.

Read against verl 0.9.1 from PyPI (requirements/trainers.txt):

* Estimator. ``verl.trainer.ppo.core_algos.register_adv_est(name)`` fills
  ``ADV_ESTIMATOR_REGISTRY``; for a name other than gae/grpo,
  ``ray_trainer.compute_advantage(data, adv_estimator, ..., config)`` calls
  ``get_adv_estimator_fn(name)(token_level_rewards=..., response_mask=...,
  config=algorithm config, index=non_tensor_batch["uid"]
  [, reward_baselines=batch["reward_baselines"]])`` and takes
  ``(advantages, returns)``. That is all a registered estimator sees: not
  the rest of ``non_tensor_batch``. Both trainers (the legacy
  ``RayPPOTrainer`` and the default ``trainer.use_v1=True`` one, whose
  ``_compute_advantage`` fetches only uid, response_mask, rm_scores and
  log-probs from TransferQueue) reorder rows first (``_balance_batch``),
  and the v1 trainer appends padding rows of a fresh ``pad<hex>`` uid.
* Reward loop (the default reward path): ``verl.experimental.reward_loop.
  reward_manager.register(name)`` fills ``REWARD_MANAGER``; a
  ``RewardLoopWorker`` (a Ray actor) builds the class with
  ``verl.trainer.ppo.reward.load_reward_manager(config, tokenizer,
  reward_router_address=..., reward_model_tokenizer=...)`` as
  ``cls(config=, tokenizer=, compute_score=, **kwargs)`` and awaits
  ``run_single(data)`` on one-row DataProtos, expecting
  ``{"reward_score": float, "reward_extra_info": dict}``. Selected by
  ``reward.reward_manager.name=v05`` (source "register").
* Legacy registry: ``verl.workers.reward_manager.register(name)``; classes
  built as ``cls(tokenizer, num_examine, compute_score, reward_fn_key,
  **kwargs)`` and called as ``manager(data, return_dict=False)``.
* ``VERL_USE_EXTERNAL_MODULES=v05.verl``: ``import verl`` imports this
  module in every process (driver and Ray actors); importing it registers
  the estimator and both managers.

How a row finds its advantage, whatever the row order. The plugin's
advantage is a function of the sample's reward within its group
((r - baseline) / sigma; GRPO modes: (r - mean) / (std + eps), 0 for an
all-equal group), so each row's advantage comes from its own reward and its
group, never from its position. A group is found by uid, from (first hit):

1. the rows themselves: per-row numbers the rollout side recorded in
   ``non_tensor_batch`` (``ROW_FIELDS``: sample index, k, baseline, sigma,
   reward, advantage). They reach the estimator either as the
   ``non_tensor_batch=`` argument (callers of our own) or inside the uid
   itself: ``tag_rows(data)`` turns each uid into a ``V05Uid``, a ``str``
   equal to the plain uid that carries the numbers, so they travel through
   verl's ``compute_advantage`` (which passes ``index``), DataProto
   reorder/select/concat/chunk and Ray's pickling. This is the path for a
   trainer on another host than the segment: plain per-row numbers.
2. groups recorded in this process (``record_group``), and
3. the segment, when it is on this host: a ``Reader`` takes final groups
   off the completion ring (zero copy) and hands each slot back once its
   rows are computed (a plain copy is kept for later calls).

Every source is checked against the rows: the uid's row count is k, the
samples are 0..k-1 once each (when known), and each row's reward
(``score_to_reward`` of its token-level reward sum) is its sample's reward
in the group; a mismatch raises. Rows of uids no source knows (validation
batches, verl's padding rows, prompts v05 did not roll out) get verl's own
GRPO advantages (``core_algos.compute_grpo_outcome_advantage``, honouring
``norm_adv_by_std_in_grpo``); ``algorithm.v05_unknown=zero`` gives them 0
and ``=error`` raises instead. Padding rows have zero reward and get 0.
"""

import collections
import importlib.util
import logging
import os
import time
from typing import Callable, Dict, Optional

import numpy as np

from .writer import Reader, RewardWriter

__all__ = ["compute_v05_advantage", "register_with_verl", "segment_of",
           "score_to_reward", "V05Uid", "tag_rows", "record_group",
           "ROW_FIELDS", "legacy_reward_manager_cls",
           "reward_loop_manager_cls"]

log = logging.getLogger(__name__)

ESTIMATOR_NAME = "v05"
REWARD_MANAGER_NAME = "v05"

# Per-row numbers the rollout side records in non_tensor_batch.
ROW_FIELDS = ("v05_sample", "v05_k", "v05_baseline", "v05_sigma",
              "v05_reward", "v05_advantage")
UNKNOWN_POLICIES = ("grpo", "zero", "error")
# Rewards are float32 in the segment; a row's reward goes through
# score_to_reward in float64 first.
REWARD_TOL = 1e-5


def _cfg_get(config, key, default=None):
    if config is None:
        return default
    try:
        v = config.get(key, default)
    except AttributeError:
        v = getattr(config, key, default)
    return default if v is None else v


def segment_of(config=None, required: bool = True) -> Optional[str]:
    """The segment: config["v05_segment"] (verl's algorithm config, set with
    ``+algorithm.v05_segment=NAME``), else $V05_SEGMENT. Every rollout node
    has its own segment under the same name (shared memory is per host)."""
    name = _cfg_get(config, "v05_segment") or os.environ.get("V05_SEGMENT")
    if not name and required:
        raise ValueError("v05: no segment; set +algorithm.v05_segment=NAME "
                         "or $V05_SEGMENT")
    return name or None


def score_to_reward(score: float) -> float:
    """verl scores are usually 0/1 (or already in [-1, 1]); v05 wants
    [-1, 1]: [0, 1] maps to 2s - 1, anything else is clamped."""
    s = float(score)
    if 0.0 <= s <= 1.0:
        return 2.0 * s - 1.0
    return max(-1.0, min(1.0, s))


# ---- groups ---------------------------------------------------------------

class GroupRecord:
    """One group's numbers as plain arrays (sample index -> value)."""

    __slots__ = ("uid", "k", "baseline", "sigma", "rewards", "advantages",
                 "source")

    def __init__(self, uid, k, baseline, sigma, rewards, advantages, source):
        self.uid = uid
        self.k = int(k)
        self.baseline = float(baseline)
        self.sigma = float(sigma)
        self.rewards = np.asarray(rewards, dtype=np.float32)
        self.advantages = np.asarray(advantages, dtype=np.float32)
        self.source = source
        if self.rewards.shape != (self.k,) or self.advantages.shape != (self.k,):
            raise ValueError(f"v05: group {uid!r}: k = {k} but {self.rewards.size} "
                             f"rewards, {self.advantages.size} advantages")

    @classmethod
    def of_group(cls, g, source="segment") -> "GroupRecord":
        """A copy of a Group (views of the segment)."""
        return cls(g.uid, g.k, g.baseline, g.sigma, g.rewards.copy(),
                   g.advantages.copy(), source)


class V05Uid(str):
    """A uid (equal to, hashing as, printing as the plain string) that
    carries its row's v05 numbers, so they reach a registered estimator
    through verl's ``compute_advantage`` (which passes only the uid array)
    and survive DataProto reorder/select/concat and pickling."""

    def __new__(cls, uid, sample, k, baseline, sigma, reward, advantage):
        s = super().__new__(cls, uid)
        s.v05 = (int(sample), int(k), float(baseline), float(sigma),
                 float(reward), float(advantage))
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


def _rows_fields(index, non_tensor_batch, rows):
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


def _record_from_rows(uid, fields) -> GroupRecord:
    """A group from its rows' own numbers; they must agree on k, baseline
    and sigma and name each sample 0..k-1 once."""
    k = int(fields[0][1])
    base, sigma = float(fields[0][2]), float(fields[0][3])
    rewards = np.full(k, np.nan, dtype=np.float32)
    adv = np.full(k, np.nan, dtype=np.float32)
    for sample, kk, b, s, r, a in fields:
        sample = int(sample)
        if int(kk) != k or float(b) != base or float(s) != sigma:
            raise ValueError(f"v05: rows of uid {uid!r} disagree on their "
                             "group (k, baseline, sigma)")
        if not 0 <= sample < k or not np.isnan(rewards[sample]):
            raise ValueError(f"v05: uid {uid!r}: sample {sample} is out of "
                             f"0..{k - 1} or repeated")
        rewards[sample] = r
        adv[sample] = a
    return GroupRecord(uid, k, base, sigma, rewards, adv, "rows")


class _Groups:
    """This process's view of final groups: recorded copies, and the
    segment's completion ring through a Reader (one per segment)."""

    MAX_RECORDS = 1 << 16

    def __init__(self):
        self.records: "collections.OrderedDict[str, GroupRecord]" = \
            collections.OrderedDict()
        self.readers: Dict[str, Reader] = {}
        self.pending: Dict[str, Dict[str, object]] = {}  # segment -> uid -> Group
        self.pid = os.getpid()

    def _check_fork(self):
        # A forked child must not use the parent's reader claim.
        if os.getpid() != self.pid:
            self.__init__()

    def record(self, rec: GroupRecord) -> None:
        self.records[rec.uid] = rec
        self.records.move_to_end(rec.uid)
        while len(self.records) > self.MAX_RECORDS:
            self.records.popitem(last=False)

    def _reader(self, segment):
        r = self.readers.get(segment)
        if r is None:
            try:
                r = Reader.open(segment)
            except OSError as e:
                # Not on this host (or not created yet): rows must carry
                # their numbers.
                log.debug("v05: no reader for segment %s: %s", segment, e)
                return None
            self.readers[segment] = r
            self.pending[segment] = {}
        return r

    def from_segment(self, segment, uid, wait: float):
        """The final group of uid from the segment (a Group view), or None.
        Drains the completion ring without blocking; waits up to `wait`
        seconds for groups still being finished."""
        self._check_fork()
        r = self._reader(segment)
        if r is None:
            return None
        pend = self.pending[segment]
        deadline = time.monotonic() + wait
        while uid not in pend:
            g = r.next()
            if g is not None:
                pend[g.uid] = g
                continue
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)
        return pend[uid]

    def done(self, segment, uid) -> None:
        """Keep a copy of uid's group and hand its slot back."""
        g = self.pending.get(segment, {}).pop(uid, None)
        if g is not None:
            self.record(GroupRecord.of_group(g))
            self.readers[segment].release(g)

    def close(self) -> None:
        for seg, r in self.readers.items():
            for g in self.pending.get(seg, {}).values():
                r.release(g)
            r.close()
        self.readers.clear()
        self.pending.clear()


_groups = _Groups()


def record_group(uid, k, baseline, sigma, rewards, advantages) -> None:
    """Make a group known to this process's estimator (e.g. a rollout
    component in the trainer's driver that copied it out of the plugin)."""
    _groups.record(GroupRecord(str(uid), k, baseline, sigma, rewards,
                               advantages, "recorded"))


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
    unknown = str(_cfg_get(config, "v05_unknown", "grpo"))
    if unknown not in UNKNOWN_POLICIES:
        raise ValueError(f"v05: v05_unknown={unknown!r} is not one of "
                         f"{UNKNOWN_POLICIES}")
    wait = float(_cfg_get(config, "v05_wait_s", 0.0))
    segment = segment_of(config, required=False)

    scores = token_level_rewards.sum(dim=-1).double().cpu().numpy()
    rows_of = collections.OrderedDict()
    for i, uid in enumerate(index):
        rows_of.setdefault(str(uid), []).append(i)

    adv = torch.zeros(len(index), dtype=torch.float32)
    unknown_rows = []
    used_segment = []
    for uid, rows in rows_of.items():
        fields = _rows_fields(index, non_tensor_batch, rows)
        row_rewards = [to_reward(scores[i]) for i in rows]
        samples = None
        rec = None
        if fields is not None:
            rec = _record_from_rows(uid, fields)
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
                _cfg_get(config, "norm_adv_by_std_in_grpo", True)))
        out[sel] = g_adv.to(out.dtype)
    return out, out


# ---- reward managers ----------------------------------------------------------

class _Writers:
    """One reward lane per process and segment, opened on first push."""

    def __init__(self):
        self.by_segment: Dict[str, Optional[RewardWriter]] = {}
        self.pid = os.getpid()

    def get(self, segment) -> Optional[RewardWriter]:
        if os.getpid() != self.pid:
            self.__init__()
        if segment not in self.by_segment:
            try:
                self.by_segment[segment] = RewardWriter.attach(segment)
            except OSError as e:
                # Not on this host: the rollout side pushes the score it
                # gets back (reward_extra_info["v05_pushed"] is False).
                log.info("v05: segment %s not on this host (%s); rewards "
                         "go back to the rollout", segment, e)
                self.by_segment[segment] = None
        return self.by_segment[segment]


_writers = _Writers()


def _push(segment, nt, i, reward) -> bool:
    """Push row i's reward if the row is a v05 sample and the segment is on
    this host. Rows without v05_sample (validation) are only scored. A v05
    row carries v05_gen too (the gen of the decision that issued it: the
    prompt's instance); one without it is refused, not guessed."""
    if segment is None or "v05_sample" not in nt or "uid" not in nt:
        return False
    if "v05_gen" not in nt:
        raise ValueError("v05: a row with v05_sample but no v05_gen (the "
                         "issuing decision's gen); the rollout side must "
                         "put both into non_tensor_batch")
    w = _writers.get(segment)
    if w is None:
        return False
    w.push(str(nt["uid"][i]), int(nt["v05_sample"][i]), reward,
           gen=int(nt["v05_gen"][i]))
    return True


_classes = {}


def reward_loop_manager_cls():
    """The reward-loop manager class (a NaiveRewardManager that also pushes
    each score to the plugin the moment it exists)."""
    if "loop" in _classes:
        return _classes["loop"]
    from verl.experimental.reward_loop.reward_manager.naive import \
        NaiveRewardManager

    class V05RewardLoopManager(NaiveRewardManager):
        """reward.reward_manager.name=v05. Scores one row as verl's naive
        manager does; for a v05 row (non_tensor_batch has uid and
        v05_sample) pushes score_to_reward(score) into this host's segment.
        reward_extra_info gets v05_reward and v05_pushed (False: the
        segment is elsewhere, the rollout side pushes)."""

        def __init__(self, config, tokenizer, compute_score,
                     reward_router_address=None, reward_model_tokenizer=None,
                     **kwargs):
            super().__init__(config, tokenizer, compute_score,
                             reward_router_address=reward_router_address,
                             reward_model_tokenizer=reward_model_tokenizer)
            algo = _cfg_get(config, "algorithm")
            self.segment = segment_of(algo, required=False)

        async def run_single(self, data):
            result = await super().run_single(data)
            reward = score_to_reward(result["reward_score"])
            last = len(data) - 1  # naive scores the last row
            pushed = _push(self.segment, data.non_tensor_batch, last, reward)
            result["reward_extra_info"]["v05_reward"] = reward
            result["reward_extra_info"]["v05_pushed"] = pushed
            return result

    _classes["loop"] = V05RewardLoopManager
    return V05RewardLoopManager


def legacy_reward_manager_cls():
    """The legacy manager class (verl.workers.reward_manager)."""
    if "legacy" in _classes:
        return _classes["legacy"]
    import torch
    from verl.workers.reward_manager.abstract import AbstractRewardManager

    class V05RewardManager(AbstractRewardManager):
        """reward_model.reward_manager=v05 in the legacy path: scores each
        row with compute_score (verl's default_compute_score if None),
        pushes v05 rows' rewards into this host's segment, returns the
        token-level reward tensor (score at the last valid token)."""

        def __init__(self, tokenizer, num_examine=0, compute_score=None,
                     reward_fn_key="data_source", segment=None,
                     to_reward=score_to_reward, **kwargs):
            if compute_score is None:
                from verl.utils.reward_score import default_compute_score
                compute_score = default_compute_score
            self.tokenizer = tokenizer
            self.num_examine = num_examine
            self.compute_score = compute_score
            self.reward_fn_key = reward_fn_key
            self.to_reward = to_reward
            self.segment = segment or segment_of(None, required=False)

        def __call__(self, data, return_dict=False):
            pre = self._extract_reward_from_rm_scores(data, return_dict)
            if pre is not None:  # the reward loop scored (and pushed) already
                return pre
            prompts = data.batch["prompts"]
            responses = data.batch["responses"]
            mask = data.batch["attention_mask"]
            nt = data.non_tensor_batch
            plen = prompts.shape[-1]
            reward = torch.zeros_like(responses, dtype=torch.float32)
            extra = collections.defaultdict(list)
            for i in range(responses.shape[0]):
                n_resp = int(mask[i, plen:].sum())
                text = self.tokenizer.decode(responses[i, :n_resp],
                                             skip_special_tokens=True)
                info = nt["extra_info"][i] if "extra_info" in nt else None
                result = self.compute_score(
                    data_source=nt[self.reward_fn_key][i], solution_str=text,
                    ground_truth=nt["reward_model"][i]["ground_truth"],
                    extra_info=info)
                score = result["score"] if isinstance(result, dict) else result
                if isinstance(result, dict):
                    for key, v in result.items():
                        extra[key].append(v)
                if n_resp > 0:
                    reward[i, n_resp - 1] = float(score)
                r = self.to_reward(score)
                extra["v05_reward"].append(r)
                # Pushed as soon as it exists: the plugin may finish this
                # group (and decide) before the rest is scored.
                extra["v05_pushed"].append(_push(self.segment, nt, i, r))
            if return_dict:
                return {"reward_tensor": reward,
                        "reward_extra_info": dict(extra)}
            return reward

    _classes["legacy"] = V05RewardManager
    return V05RewardManager


def register_with_verl() -> None:
    """Register the estimator and both reward managers under "v05" (done
    on import when verl is installed: VERL_USE_EXTERNAL_MODULES=v05.verl
    makes every verl process, Ray actors included, do it)."""
    from verl.experimental.reward_loop import reward_manager as loop_rm
    from verl.trainer.ppo.core_algos import register_adv_est
    from verl.workers import reward_manager as legacy_rm

    register_adv_est(ESTIMATOR_NAME)(compute_v05_advantage)
    loop_rm.register(REWARD_MANAGER_NAME)(reward_loop_manager_cls())
    legacy_rm.register(REWARD_MANAGER_NAME)(legacy_reward_manager_cls())


def rows_in_sample_order(uids, samples) -> np.ndarray:
    """A permutation putting each uid's rows in sample order."""
    return np.lexsort((np.asarray(samples), np.asarray(uids)))


# VERL_USE_EXTERNAL_MODULES=v05.verl imports this module from verl's own
# __init__; register then (and on any import where verl is installed).
def _verl_installed() -> bool:
    try:
        return importlib.util.find_spec("verl") is not None
    except ValueError:  # a module without a spec (a test's stand-in)
        return False


if os.environ.get("V05_VERL_AUTOREGISTER", "1") != "0" and _verl_installed():
    register_with_verl()
