# SPDX-License-Identifier: MIT
"""Abort records and the observer's prompt lookup from Python: what a
server's front end uses to abort a group another front end owns and to
answer for it (docs/SERVERS.md). The C side is tests/test_abort.c and
tests/test_observer_reads.c; this checks the bindings say the same."""
import errno

import pytest

import v05
from v05.core.observer import Observer

KW = dict(k_init=4, k_max=8, pad_multiple=1, max_prompts=16)


def first_wave(plugin, uid):
    (d,) = plugin.submit([(uid, 0.0)])
    assert d.kind == "sample" and d.samples == [0, 1, 2, 3]
    return d


def test_an_abort_record_cancels_the_prompt(segname):
    with v05.Plugin.create(segname, abort_records=True, **KW) as p, \
            v05.RewardWriter.attach(segname) as w, \
            Observer(segname) as o:
        d = first_wave(p, "u")
        w.push("u", 0, 1.0, gen=d.gen)
        w.push("u", 1, -1.0, gen=d.gen)
        assert p.poll() == []
        view = o.prompt("u")
        assert view == {"gen": d.gen, "issued": [0, 1, 2, 3],
                        "received": [0, 1], "state": "collecting"}
        w.abort("u", gen=d.gen)
        (c,) = p.poll()
        assert (c.kind, c.uid, c.gen, c.samples, c.k) == \
            ("cancel", "u", d.gen, [2, 3], 2)
        assert o.prompt("u") is None
        # A reward for a cancelled sample comes too late: refused.
        w.push("u", 2, 1.0, gen=d.gen)
        assert p.poll() == []
        s = p.stats()
        assert s["aborts_applied"] == 1
        assert s["rejected_unknown"] == 1
        # The slot is free: the same uid runs again as a new instance.
        d2 = first_wave(p, "u")
        assert d2.gen != d.gen


def test_refused_aborts_are_counted_by_reason(segname):
    with v05.Plugin.create(segname, abort_records=True, **KW) as p, \
            v05.RewardWriter.attach(segname) as w:
        d = first_wave(p, "u")
        w.abort("u", gen=d.gen + 1)        # another instance: late
        w.abort("nobody", gen=d.gen)       # no such prompt: unknown
        assert p.poll() == []
        s = p.stats()
        assert (s["aborts_applied"], s["rejected_late"],
                s["rejected_unknown"]) == (0, 1, 1)
        for i in range(4):
            w.push("u", i, 1.0, gen=d.gen)
        kinds = [x.kind for x in p.poll()]
        assert kinds and "cancel" not in kinds


def test_a_segment_without_abort_records_refuses_them(segname):
    with v05.Plugin.create(segname, **KW) as p, \
            v05.RewardWriter.attach(segname) as w:
        d = first_wave(p, "u")
        w.abort("u", gen=d.gen)
        assert p.poll() == []
        s = p.stats()
        assert (s["aborts_applied"], s["rejected_kind"]) == (0, 1)


def test_abort_needs_a_gen(segname):
    with v05.Plugin.create(segname, abort_records=True, **KW), \
            v05.RewardWriter.attach(segname) as w:
        with pytest.raises(TypeError, match="gen is required"):
            w.abort("u")


def test_observer_reads_the_running_fit(segname):
    # eb_first=(): every first wave k_init, not one chosen by the warm fit.
    with v05.Plugin.create(segname, mode="v05-eb", schedule="stream",
                           eb_cold=1, eb_first=(), **KW) as p, \
            v05.RewardWriter.attach(segname) as w, \
            Observer(segname) as o:
        for i, r in enumerate(([1.0, 1.0, -1.0, 1.0],
                               [-1.0, -1.0, -1.0, 1.0])):
            d = first_wave(p, f"u{i}")
            for s, x in enumerate(r):
                w.push(f"u{i}", s, x, gen=d.gen)
            for x in p.poll():
                if x.kind in ("final", "drop"):
                    p.release(x)
        own = o.eb_state()
        assert own.folded == 2
        assert own == p.eb_state_shared()


def test_observer_fit_of_another_mode_is_refused(segname):
    with v05.Plugin.create(segname, mode="v05", **KW), \
            Observer(segname) as o:
        with pytest.raises(v05.V05Error, match="runs mode v05") as e:
            o.eb_state()
        assert e.value.errno == errno.EINVAL

