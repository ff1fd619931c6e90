# SPDX-License-Identifier: MIT
"""Priors: the value-model client (support-buffer context, batched
queries) and the history prior."""
import pytest

import v05
from v05.core.prior import HistoryPrior, ValueModelPrior
from test_api import drive


def test_value_model_prior(segname):
    calls = []

    def predict(ctx_prompts, ctx_labels, targets):
        calls.append((list(ctx_prompts), list(ctx_labels), list(targets)))
        return [0.75] * len(targets)

    with v05.Plugin.create(segname, max_prompts=64, mode="v05-fixed") as p:
        vm = ValueModelPrior(p, predict, batch_size=4, context_size=256)
        first = vm.priors([(f"u{i}", f"text {i}") for i in range(10)])
        assert calls == []  # no finished groups yet: the default prior
        assert [x for _, x in first] == [0.0] * 10
        ds = p.submit(first)
        with v05.RewardWriter.attach(segname) as w:
            finals = drive(p, w, ds, lambda uid, s: 1.0 if s else -1.0)
        for d in finals.values():
            p.release(d)
        new = vm.priors([(f"n{i}", f"new {i}") for i in range(10)])
        assert [len(c[2]) for c in calls] == [4, 4, 2]  # batches of 4
        ctx_prompts, ctx_labels, _ = calls[0]
        assert sorted(ctx_prompts) == sorted(f"text {i}" for i in range(10))
        assert ctx_labels == [0.75] * 10  # 3 of 4 right: (0.5 + 1) / 2
        assert [x for _, x in new] == [pytest.approx(0.5)] * 10

    def broken(c, l, t):
        return [float("nan")] * len(t)

    with v05.Plugin.create(segname + "b", max_prompts=8) as p:
        vm = ValueModelPrior(p, broken, default_p=0.5)
        vm.context = lambda: (["x"], [1.0])
        with pytest.raises(ValueError):
            vm.priors([("a", "t")])


def test_history_prior():
    h = HistoryPrior(default_p=0.5, strength=2.0)
    assert h.prior("new") == 0.0
    h.update("a", [1, 1, 1, -1])  # 3 of 4
    assert h.p("a") == pytest.approx((3 + 1) / (4 + 2))
    h.update("a", [-1, -1])
    assert h.p("a") == pytest.approx((3 + 1) / (6 + 2))
    d = HistoryPrior(default_p=0.2, strength=1.0, decay=0.5)
    d.update("b", [1, 1])
    d.update("b", [-1, -1])
    assert d.p("b") == pytest.approx((1.0 + 0.2) / (3.0 + 1.0))
    with pytest.raises(ValueError):
        HistoryPrior(default_p=1.5)
