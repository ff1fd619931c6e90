# SPDX-License-Identifier: MIT
"""slime's ``--rollout-function-path v05.trainers.slime.generate_rollout``
against a real `v05-vllm serve` with v05's plugin (docs/SLIME.md): called
as slime calls it (``call_rollout_fn``), each group runs through the group
route with slime's reward function, and comes back as slime's samples with
v05's k, rewards and advantages; ``post_process_rewards`` hands slime
those advantages; a full batch aborts the groups still running, a failing
reward fails the rollout and aborts its group, and a setting the function
cannot honour is refused by name before anything is sent.

slime's own modules are used when ``V05_SLIME_SRC`` names a slime checkout
(its ``slime/`` package on sys.path); otherwise the stand-ins in
tests/servers/standins (docs/SLIME.md says which ran where)."""
import argparse
import copy
import os
import sys

import pytest

pytest.importorskip("vllm", reason="the engine environment "
                    "(scripts/setup-engine) is not this Python")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.environ.get("V05_SLIME_SRC")
sys.path.insert(0, REAL or os.path.join(HERE, "standins"))

import v05  # noqa: E402
from v05.demos import tiny  # noqa: E402
from v05.trainers import slime as v05_slime  # noqa: E402
from v05.trainers.http_groups import ConfigError  # noqa: E402

from slime.rollout.base_types import (RolloutFnTrainOutput,  # noqa: E402
                                      call_rollout_fn)
from slime.utils.types import Sample  # noqa: E402

import slime_test_rewards as rewards  # noqa: E402
from server_proc import poll  # noqa: E402
from test_vllm_server import PLUGIN, stats, vllm_server  # noqa: E402

PREFIX = f"tsl{os.getpid()}"
FN = "v05.trainers.slime.generate_rollout"


def test_which_slime():
    """Says which slime ran: the real one only when asked for."""
    import slime
    where = os.path.dirname(os.path.abspath(slime.__file__))
    if REAL:
        assert where.startswith(os.path.abspath(REAL))
    else:
        assert where == os.path.join(HERE, "standins", "slime")
    print(f"slime from {where}")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = vllm_server(model_dir, tmp_path_factory.mktemp("srv"), PREFIX)
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


class Prompts:
    """A data source as slime's RolloutDataSource hands groups out
    (slime/rollout/data_source.py): get_samples(n) gives n groups of
    n_samples_per_prompt deep copies of the next prompt's Sample, each
    with its group_index and its own index."""

    def __init__(self, args, prompts):
        self.args, self.prompts = args, prompts
        self.next = self.group_index = self.index = 0
        self.returned = []

    def get_samples(self, n):
        out = []
        for _ in range(n):
            p = self.prompts[self.next % len(self.prompts)]
            self.next += 1
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                s = copy.deepcopy(p)
                s.group_index, s.index = self.group_index, self.index
                self.index += 1
                group.append(s)
            self.group_index += 1
            out.append(group)
        return out

    def add_samples(self, groups):
        self.returned.extend(groups)


def slime_args(server, model_dir, **kw):
    """slime's args namespace: the attributes the function reads, with
    slime's defaults (slime/utils/arguments.py)."""
    a = dict(rollout_batch_size=2, over_sampling_batch_size=None,
             n_samples_per_prompt=4, rollout_max_response_len=4,
             rollout_temperature=1.0, rollout_top_p=1.0, rollout_top_k=-1,
             rollout_stop=None, rollout_stop_token_ids=None,
             hf_checkpoint=model_dir, custom_rm_path=None, reward_key=None,
             group_rm=False, use_rollout_logprobs=False,
             custom_generate_function_path=None, partial_rollout=False,
             advantage_estimator="grpo", global_batch_size=None,
             v05_servers=[server.url] if server else None)
    a.update(kw)
    return argparse.Namespace(**a)


TEXT = "What is 2+2?"


def prompts():
    """A text prompt (tokenized by --hf-checkpoint's tokenizer) with a
    confident prior the alternating rewards contradict, and a prompt
    given as token ids with a prior the rewards agree with."""
    return [Sample(prompt=TEXT, metadata={"v05_prior": 0.9}),
            Sample(prompt="ignored: tokens given", tokens=tiny.make_prompts(
                1)[0], metadata={"v05_prior": -0.5})]


def rollout(args, source, rollout_id=0):
    return call_rollout_fn(load(FN), args, rollout_id, source,
                           evaluation=False)


def load(path):
    from slime.utils.misc import load_function
    return load_function(path)


def settled(url, before):
    """The server idle with nothing open, and what it counted since
    `before` (its /v05/stats "server" counts)."""
    poll(lambda: stats(url)["running"] == 0 and stats(url)["requests"] == 0,
         60, "the server to run no group")
    s = stats(url)
    assert s["plugin"]["prompts_open"] == 0
    return {k: s["server"][k] - before[k]
            for k in ("groups", "final", "aborted", "failed",
                      "reward_timeouts")}


def test_groups_have_v05s_k_rewards_and_advantages(server, model_dir):
    rewards.reset()
    args = slime_args(server, model_dir,
                      custom_rm_path="slime_test_rewards.alternate",
                      global_batch_size=4)
    src = Prompts(args, prompts())
    before = stats(server.url)["server"]
    out = rollout(args, src, rollout_id=7)
    assert isinstance(out, RolloutFnTrainOutput)
    groups = out.samples
    assert [g[0].group_index for g in groups] == [0, 1]
    want_ids = [[3 + tiny.CHARS.index(c) for c in TEXT],
                tiny.make_prompts(1)[0]]
    for g, prior, ids in zip(groups, (0.9, -0.5), want_ids):
        k = len(g)
        meta = [s.metadata["v05"] for s in g]
        assert [m["sample"] for m in meta] == list(range(k))
        assert {m["k"] for m in meta} == {k}
        assert len({m["uid"] for m in meta}) == 1
        assert meta[0]["uid"].startswith(f"slime-7-{g[0].group_index}-")
        # slime's reward as its function answered it, v05's on [-1, 1]
        assert [s.reward for s in g] == [float(i % 2) for i in range(k)]
        v = [m["reward"] for m in meta]
        assert v == [1.0 if i % 2 else -1.0 for i in range(k)]
        want = v05.estimate(prior, v, mode="v05", cost=PLUGIN["cost"],
                            k_step=2, k_max=16)
        assert [m["advantage"] for m in meta] == pytest.approx(
            want["advantages"], abs=1e-6)
        assert [m["baseline"] for m in meta] == pytest.approx(
            [want["baseline"]] * k, abs=1e-12)
        for s in g:
            assert s.tokens[:len(ids)] == ids
            assert s.response_length == len(s.tokens) - len(ids) <= 4
            assert s.loss_mask == [1] * s.response_length
            assert s.rollout_log_probs is None
            assert s.status in (Sample.Status.COMPLETED,
                                Sample.Status.TRUNCATED)
            assert s.prefix_cache_info.total_prompt_tokens == len(ids)
        # The first n_samples_per_prompt samples are slime's own copies
        # (their own indices); the rest are new copies of the first.
        idx = [s.index for s in g]
        assert idx[:4] == list(range(idx[0], idx[0] + 4))
        assert idx[4:] == [idx[0]] * (k - 4)
        assert len({id(s) for s in g}) == k
    # The prior the rewards contradict drew a second wave; the other not.
    assert len(groups[0]) > 4 and len(groups[1]) == 4
    assert sorted(rewards.calls) == sorted(
        (g[0].group_index, i) for g in groups for i in range(len(g)))
    n = sum(len(g) for g in groups)
    assert out.metrics == {
        "v05/groups": 2, "v05/samples": n, "v05/k_mean": n / 2,
        "v05/k_max": len(groups[0]), "v05/groups_dropped": 0,
        "v05/groups_aborted": 0, "v05/groups_unused": 0,
        "v05/samples_past_last_step": n % 4}
    # What slime trains on: its rewards stay the raw ones, v05's
    # advantages are the rewards of the grpo estimators.
    flat = [s for g in groups for s in g]
    raw, adv = v05_slime.post_process_rewards(args, flat)
    assert raw == [s.reward for s in flat]
    assert adv == [s.metadata["v05"]["advantage"] for s in flat]
    assert settled(server.url, before) == {
        "groups": 2, "final": 2, "aborted": 0, "failed": 0,
        "reward_timeouts": 0}
    if REAL:
        slime_checks(args, groups)


def slime_checks(args, groups):
    """With slime's own modules: its checks of a rollout's output and its
    step split accept the groups (slime/ray/rollout.py's path)."""
    from slime.observability.rollout_data_utils import (
        validate_rollout_id_annotated)
    from slime.utils.dp_schedule import build_dp_schedule
    validate_rollout_id_annotated(groups)
    flat = [s for g in groups for s in g]
    ns = argparse.Namespace(use_dynamic_batch_size=False, micro_batch_size=1,
                            balance_data=False, balance_by_flops=False,
                            max_tokens_per_gpu=None)
    parts, _, nmb, _ = build_dp_schedule(
        ns, {"dp_size": 1, "cp_size": 1, "vpp_size": 1,
             "microbatch_group_size_per_vp_stage": 1},
        [len(s.tokens) for s in flat], global_batch_size=4,
        rollout_indices=list(range(len(flat))))
    assert len(parts[0]) == len(flat) // 4 * 4


def test_reward_key_and_range_and_env_servers(server, model_dir,
                                              monkeypatch):
    """A reward of several keys picked by --reward-key, on a [-1, 1]
    range; the servers from V05_SLIME_SERVERS, each one server, so its
    client gathers rewards per server (V05_SLIME_BATCH_REWARDS)."""
    rewards.reset()
    monkeypatch.setenv("V05_SLIME_SERVERS", server.url)
    monkeypatch.setenv("V05_SLIME_BATCH_REWARDS", "server")
    args = slime_args(None, model_dir, rollout_batch_size=1,
                      custom_rm_path="slime_test_rewards.as_dict",
                      reward_key="score", v05_reward_range=[-1, 1])
    out = rollout(args, Prompts(args, prompts()[1:]))
    (g,) = out.samples
    assert [s.reward["score"] for s in g] == \
        [s.metadata["v05"]["reward"] for s in g] == \
        [1.0 if i % 2 else -1.0 for i in range(len(g))]
    raw, _ = v05_slime.post_process_rewards(args, g)
    assert raw == [s.reward["score"] for s in g]


def test_servers_from_slimes_external_engines(server, model_dir):
    """Without v05_servers, the engines slime was pointed at
    (--rollout-external-engine-addrs, as slime records them)."""
    rewards.reset()
    args = slime_args(None, model_dir, rollout_batch_size=1,
                      custom_rm_path="slime_test_rewards.zero",
                      rollout_external_engine_infos=[{"url": server.url}])
    (g,) = rollout(args, Prompts(args, prompts()[1:])).samples
    assert [s.metadata["v05"]["reward"] for s in g] == [-1.0] * len(g)


def test_a_full_batch_aborts_the_groups_still_running(server, model_dir):
    """Two groups sent for a batch of one: the reward answers the first
    group it sees and holds the other's, so the other is running when the
    first fills the batch; it is aborted, nothing of it comes back, and
    the server ends idle with no prompt open."""
    rewards.reset()
    args = slime_args(server, model_dir, rollout_batch_size=1,
                      over_sampling_batch_size=2,
                      custom_rm_path="slime_test_rewards.hold_others")
    src = Prompts(args, prompts())
    before = stats(server.url)["server"]
    out = rollout(args, src)
    (g,) = out.samples
    assert g[0].group_index == rewards._first[0]
    assert out.metrics["v05/groups_aborted"] == 1
    assert out.metrics["v05/groups"] == 1
    # Every held reward call was cancelled, none answered.
    held = [c for c in rewards.calls if c[0] != rewards._first[0]]
    assert sorted(rewards.cancelled) == sorted(held)
    got = settled(server.url, before)
    assert got["final"] == 1 and got["groups"] - got["final"] == \
        got["aborted"] and got["reward_timeouts"] == got["failed"] == 0
    assert src.returned == []   # no partial rollout: prompts not handed back


def test_partial_rollout_hands_aborted_prompts_back(server, model_dir):
    rewards.reset()
    args = slime_args(server, model_dir, rollout_batch_size=1,
                      over_sampling_batch_size=2, partial_rollout=True,
                      custom_rm_path="slime_test_rewards.hold_others")
    src = Prompts(args, prompts())
    before = stats(server.url)["server"]
    (g,) = rollout(args, src).samples
    (back,) = src.returned
    assert {s.group_index for s in back} == {1 - g[0].group_index}
    assert [s.response for s in back] == [""] * 4  # whole prompts
    settled(server.url, before)


def test_a_failing_reward_fails_the_rollout_and_aborts_its_group(
        server, model_dir):
    rewards.reset()
    args = slime_args(server, model_dir, rollout_batch_size=1,
                      custom_rm_path="slime_test_rewards.raises")
    before = stats(server.url)["server"]
    with pytest.raises(RuntimeError, match=r"group slime-0-0-\w+ sample \d:"
                       r" ValueError: no verdict for this answer"):
        rollout(args, Prompts(args, prompts()))
    got = settled(server.url, before)
    assert got == {"groups": 1, "final": 0, "aborted": 1, "failed": 0,
                   "reward_timeouts": 0}


def test_a_reward_outside_the_range_is_refused_by_name(server, model_dir):
    rewards.reset()
    args = slime_args(server, model_dir, rollout_batch_size=1,
                      custom_rm_path="slime_test_rewards.too_big")
    before = stats(server.url)["server"]
    with pytest.raises(RuntimeError, match=r"the reward 2\.0 is outside the "
                       r"reward range \[0, 1\]"):
        rollout(args, Prompts(args, prompts()))
    assert settled(server.url, before)["final"] == 0


BAD = [
    (dict(v05_servers=None), "v05_servers: no v05 server given"),
    (dict(v05_servers=["ftp://x:1"]), r"v05_servers\[0\]: 'ftp://x:1'"),
    (dict(v05_reward_range=[1, 0]), r"v05_reward_range: \[1.0, 0.0\]"),
    (dict(group_rm=True), "group_rm: "),
    (dict(rollout_top_p=0.9), "rollout_top_p: "),
    (dict(rollout_stop=["\n"]), "rollout_stop: "),
    (dict(use_rollout_logprobs=True), "use_rollout_logprobs: "),
    (dict(custom_generate_function_path="m.f"),
     "custom_generate_function_path: "),
    (dict(advantage_estimator="ppo"), "advantage_estimator: 'ppo'"),
    (dict(v05_prior=1.5), r"v05_prior: the prior 1\.5 is not a number"),
    (dict(v05_timeout="soon"), "v05_timeout: 'soon' is not a number"),
    (dict(v05_timeout=0), "v05_timeout: 0 is not a number"),
    (dict(v05_batch_rewards="prompt"),
     "v05_batch_rewards: 'prompt' is not one of origin, group, server, off"),
]


@pytest.mark.parametrize("bad,match", BAD)
def test_bad_settings_are_refused_by_name(model_dir, monkeypatch, bad,
                                          match):
    """Refused before any request: no server is needed (none is given,
    and V05_SLIME_SERVERS is unset)."""
    monkeypatch.delenv("V05_SLIME_SERVERS", raising=False)
    args = slime_args(None, model_dir, custom_rm_path="x.y",
                      v05_servers=["127.0.0.1:9"])
    for k, v in bad.items():
        setattr(args, k, v)

    class NoPrompts:
        def get_samples(self, n):
            raise AssertionError("a prompt was asked for")
    with pytest.raises(ConfigError, match=match):
        rollout(args, NoPrompts())


def test_a_prior_out_of_range_is_refused_by_name(server, model_dir):
    args = slime_args(server, model_dir, rollout_batch_size=1,
                      custom_rm_path="slime_test_rewards.zero")
    with pytest.raises(ValueError, match=r"sample 0: v05_prior: the prior "
                       r"1\.5 is not a number in \[-1, 1\]"):
        rollout(args, Prompts(args, [Sample(prompt=TEXT, metadata={
            "v05_prior": 1.5})]))


def test_post_processing_refuses_samples_without_v05s_numbers(model_dir):
    args = slime_args(None, model_dir)
    with pytest.raises(ValueError, match="sample 3 has no v05 advantage"):
        v05_slime.post_process_rewards(args, [Sample(index=3, reward=1.0)])


def test_evaluation_is_slimes_own(model_dir, monkeypatch):
    """evaluation=True goes to slime's own generate_rollout (fixed-size
    groups through the servers' stock /generate)."""
    import types
    seen = []
    own = types.ModuleType("slime.rollout.sglang_rollout")
    own.generate_rollout = lambda *a, **kw: seen.append((a, kw)) or {"x": 1}
    monkeypatch.setitem(sys.modules, "slime.rollout.sglang_rollout", own)
    args = slime_args(None, model_dir)
    out = call_rollout_fn(load(FN), args, 3, "src", evaluation=True)
    assert out.data == {"x": 1}
    assert seen == [((args, 3, "src"), {"evaluation": True})]
