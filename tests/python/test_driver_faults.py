# SPDX-License-Identifier: MIT
"""The shared driver (v05.engines.driver.GroupRollout) under bad rewards,
with a generate function of its own (no engine; the real vLLM runs the
same cases in tests/engines/test_cancel.py): a scorer's bad value fails
the batch with the uid, sample and value named, a bad reward pushed by
reward workers elsewhere is reported by the plugin and fails the batch
the same way, and neither leaves anything behind or hangs."""
import asyncio

import pytest

import v05
from v05.core import _lib
from v05.engines.driver import GroupRollout, RewardRejected

P, K = 6, 4


async def generate(prompt, uid, sample, batch):
    await asyncio.sleep(0)
    return f"{uid}/{sample}"


def items(step):
    return [(f"b{step}-q{i}", "p", 0.0) for i in range(P)]


def clean(plugin):
    st = plugin.stats()
    return (st["prompts_open"], st["prompts_final"], plugin._uids,
            plugin._batch_keys, plugin._final_keys) == (0, 0, {}, {}, set())


def run_then_next(plugin, drv, bad_step_error):
    """One batch that must fail as bad_step_error says, then one that must
    finish, on the same plugin and driver."""
    async def main():
        with pytest.raises(bad_step_error[0]) as ei:
            await asyncio.wait_for(drv.run(items(0)), 30)
        assert clean(plugin)
        res = await drv.run(items(1))
        assert len(res) == P and all(r.group.k == K for r in res.values())
        if not drv.release:
            for r in res.values():
                r.group = None
                plugin.release(r.decision)
        return ei.value
    err = asyncio.run(main())
    for word in bad_step_error[1]:
        assert word in str(err), str(err)
    assert clean(plugin)
    return err


@pytest.mark.parametrize("bad, words", [
    (float("nan"), ["is nan: not finite"]),
    (float("inf"), ["is inf: not finite"]),
    (1.5, ["is 1.5: outside [-1, 1]"]),
    (-1.0000001, ["is -1.0000001: outside [-1, 1]"]),
])
def test_bad_score_fails_the_batch(segname, bad, words):
    def score(uid, sample, out):
        if uid == "b0-q3" and sample == 2:
            return bad
        return 1.0 if sample % 2 else -1.0

    with v05.Plugin.create(segname, mode="grpo", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, score=score, release=True)
        run_then_next(plugin, drv, (ValueError, words + [
            f"push to segment {segname}: the reward of uid 'b0-q3' sample 2"]))
        drv.close()


@pytest.mark.parametrize("wait_on", ["auto", "doorbell"])
@pytest.mark.parametrize("bad", [True, "0.5", None])
def test_score_that_is_not_a_number_fails_the_batch(segname, bad, wait_on):
    """A scorer returning a bool, a string or None fails the batch with a
    TypeError naming the value, under both waits: nothing turns it into a
    number first (True would be a success, "0.5" a half)."""
    def score(uid, sample, out):
        if uid == "b0-q2" and sample == 1:
            return bad
        return 1.0 if sample % 2 else -1.0

    with v05.Plugin.create(segname, mode="grpo", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, score=score, release=True,
                           wait_on=wait_on)
        run_then_next(plugin, drv, (TypeError, [
            f"the reward of uid 'b0-q2' sample 1 is {bad!r}", "not a number"]))
        drv.close()


def test_bad_reward_from_elsewhere_is_reported(segname):
    """Reward workers elsewhere (on_output) push through the C call, past
    RewardWriter's check: the plugin refuses the value and says so, and
    the driver fails the batch instead of waiting for that sample."""
    writer = {}

    def on_output(uid, sample, gen, out):
        if "w" not in writer:
            writer["w"] = v05.RewardWriter.attach(segname)
        w = writer["w"]
        r = float("nan") if (uid, sample) == ("b0-q1", 3) else 1.0
        assert _lib.lib.v05_producer_push(w._handle(), v05.key_of(uid), gen,
                                          sample, r) == 0

    with v05.Plugin.create(segname, mode="grpo", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, on_output=on_output)
        err = run_then_next(plugin, drv, (RewardRejected, [
            f"segment {segname} refused the reward of uid 'b0-q1' sample 3",
            "nan is not finite"]))
        assert isinstance(err, ValueError)
        assert plugin.stats()["rejected_nonfinite"] == 1
        drv.close()
        writer["w"].close()


def test_scorer_error_does_not_wait_for_the_poll_timeout(segname):
    """The failing task wakes the driver: with a poll timeout of an hour
    the batch still fails at once (the test's own bound is 30 s)."""
    def score(uid, sample, out):
        if sample == 1:
            raise ValueError("verifier crashed")
        return 1.0

    with v05.Plugin.create(segname, mode="grpo", k_init=K, k_max=K,
                           pad_multiple=1, max_prompts=4 * P) as plugin:
        drv = GroupRollout(plugin, generate, score=score, poll_timeout=3600)

        async def main():
            with pytest.raises(ValueError, match="verifier crashed"):
                await asyncio.wait_for(drv.run(items(0)), 30)
        asyncio.run(main())
        assert clean(plugin)
        drv.close()
