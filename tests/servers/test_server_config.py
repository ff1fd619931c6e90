# SPDX-License-Identifier: MIT
"""The server's configuration and its scorer (v05.servers.config,
v05.servers.scorer), without a server: what is refused, with which
message, and what a scorer's answer becomes."""
import math
import os
import sys

import pytest

from v05.servers import config, scorer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def refused(raw, words):
    with pytest.raises(ValueError) as e:
        config.parse(raw, "V05_SERVER")
    assert words in str(e.value), str(e.value)


def test_scorer_settings_accepted():
    c = config.parse({"scorer": "v05_test_scorers:score",
                      "scorer_threads": 3}, "V05_SERVER")
    assert (c.scorer, c.scorer_threads) == ("v05_test_scorers:score", 3)
    c = config.parse({}, "V05_SERVER")
    assert (c.scorer, c.scorer_threads, c.keep_segment) == (None, 2, False)
    assert config.parse({"keep_segment": True}, "x").keep_segment is True


def test_server_segments_pad_second_waves_by_1_unless_told(tmp_path):
    """A server's group is a batch of its own: its segment is made with
    pad_multiple 1 (the library's 32 would take each second wave to
    k_max) and as many batches as prompts (the library's 64 would cap
    the groups in flight), abort records on; all only defaults."""
    from v05.core.observer import Observer
    from v05.core.plugin import Plugin
    args = config.parse({"plugin": {"mode": "v05"}}, "x").plugin_args()
    assert args == {"mode": "v05", "abort_records": True, "pad_multiple": 1,
                    "max_batches": 4096}
    small = config.parse({"plugin": {"max_prompts": 100}}, "x")
    assert small.plugin_args()["max_batches"] == 100
    told = config.parse({"plugin": {"pad_multiple": 8, "max_batches": 7,
                                    "abort_records": False}}, "x")
    assert told.plugin_args() == {"abort_records": False, "pad_multiple": 8,
                                  "max_batches": 7}
    name = f"tcfg{os.getpid()}"
    with Plugin.create(name, **args) as p:
        with Observer(p.name) as o:
            info = o.info()
    assert (info["pad_multiple"], info["batches"]) == (1, 4096)


@pytest.mark.parametrize("raw,words", [
    ({"scorer": "pkg.mod"}, "scorer must be an import path "
                            "'package.module:function', not 'pkg.mod'"),
    ({"scorer": "pkg.mod:"}, "not 'pkg.mod:'"),
    ({"scorer": "a b:c"}, "not 'a b:c'"),
    ({"scorer": 7}, "not 7"),
    ({"scorer_threads": 0}, "scorer_threads must be an integer in [1, 64]"),
    ({"scorer_threads": True}, "scorer_threads must be an integer"),
    ({"scorer_threads": 65}, "not 65"),
    ({"keep_segment": 1}, "keep_segment must be true or false, not 1"),
])
def test_bad_scorer_settings_refused(raw, words):
    refused(raw, words)


async def _async_fn(record):
    return 1.0


@pytest.mark.parametrize("path,words", [
    ("v05_no_such_module:f", "module 'v05_no_such_module' does not import "
                             "(ModuleNotFoundError"),
    ("v05_test_scorers:nope", "v05_test_scorers has no 'nope'"),
    ("v05_test_scorers:math", "is not callable"),
    ("test_server_config:_async_fn", "is an async def"),
])
def test_bad_import_paths_refused(path, words):
    with pytest.raises(ValueError) as e:
        scorer.load(path)
    assert words in str(e.value) and repr(path) in str(e.value)


def answer(fn, record=None):
    s = scorer.Scorer("v05_test_scorers:score", 1)
    try:
        s.fn = fn
        return s._score(record or {"sample": 3})
    finally:
        s.close()


def test_answers_checked_as_the_reward_route_checks_a_push():
    assert answer(lambda r: -0.5) == -0.5
    assert answer(lambda r: 1) == 1.0
    assert answer(lambda r: None) is None
    for bad, words in ((math.nan, "scorer: nan is not a finite number"),
                       (math.inf, "scorer: inf is not a finite number"),
                       (-1.01, "scorer: -1.01 is outside [-1, 1]"),
                       (True, "scorer: must be a number, not a boolean"),
                       ("1", "scorer: must be a number, not a string")):
        with pytest.raises(scorer.ScorerError) as e:
            answer(lambda r, bad=bad: bad)
        assert str(e.value) == ("scorer v05_test_scorers:score gave no "
                                f"reward for sample 3: {words}")


def test_a_raising_scorer_is_named():
    def boom(record):
        raise KeyError("answer")
    with pytest.raises(scorer.ScorerError) as e:
        answer(boom)
    assert str(e.value) == ("scorer v05_test_scorers:score raised on sample "
                            "3: KeyError: 'answer'")
