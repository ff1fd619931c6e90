# SPDX-License-Identifier: MIT
"""The wire types of the server routes (v05.servers.wire), without a
server: every refusal names its field, every accepted body comes out as
plain values, nothing is half-accepted."""
import json
import math

import pytest

from v05.servers import wire


def group(**body):
    return wire.group_request(json.loads(json.dumps(body)))


def refused(fn, body, field, status=422):
    with pytest.raises(wire.WireError) as e:
        fn(body)
    assert (e.value.field, e.value.status) == (field, status), str(e.value)
    assert str(e.value).startswith(field + ": ")
    return e.value


def test_group_accepted():
    g = group(uid="u1", prompt_ids=[1, 2, 3], prior=-0.25,
              sampling={"max_tokens": 8, "temperature": 0.7, "top_p": 1,
                        "top_k": -1, "seed": 3, "ignore_eos": True,
                        "stop_token_ids": [2]})
    assert (g.uid, g.prompt, g.prior) == ("u1", [1, 2, 3], -0.25)
    assert g.sampling == {"max_tokens": 8, "temperature": 0.7, "top_p": 1.0,
                          "top_k": -1, "seed": 3, "ignore_eos": True,
                          "stop_token_ids": [2]}
    assert group(uid="u", prompt="abc").prior == 0.0
    assert group(uid="u", prompt="abc", prior=None).prior is None


@pytest.mark.parametrize("body,field", [
    ([], "body"),
    ({"prompt": "a"}, "uid"),
    ({"uid": 7, "prompt": "a"}, "uid"),
    ({"uid": "", "prompt": "a"}, "uid"),
    ({"uid": "x" * 129, "prompt": "a"}, "uid"),
    ({"uid": "u"}, "prompt"),
    ({"uid": "u", "prompt": "a", "prompt_ids": [1]}, "prompt"),
    ({"uid": "u", "prompt": ""}, "prompt"),
    ({"uid": "u", "prompt_ids": []}, "prompt_ids"),
    ({"uid": "u", "prompt_ids": [1, 2.5]}, "prompt_ids[1]"),
    ({"uid": "u", "prompt_ids": [1, True]}, "prompt_ids[1]"),
    ({"uid": "u", "prompt_ids": [-1]}, "prompt_ids[0]"),
    ({"uid": "u", "prompt": "a", "prior": 1.01}, "prior"),
    ({"uid": "u", "prompt": "a", "prior": "0.5"}, "prior"),
    ({"uid": "u", "prompt": "a", "prior": math.nan}, "prior"),
    ({"uid": "u", "prompt": "a", "sampling": []}, "sampling"),
    ({"uid": "u", "prompt": "a", "sampling": {"n": 4}}, "sampling.n"),
    ({"uid": "u", "prompt": "a", "sampling": {"max_tokens": 0}},
     "sampling.max_tokens"),
    ({"uid": "u", "prompt": "a", "sampling": {"temperature": -1}},
     "sampling.temperature"),
    ({"uid": "u", "prompt": "a", "sampling": {"ignore_eos": 1}},
     "sampling.ignore_eos"),
    ({"uid": "u", "prompt": "a", "sampling": {"stop_token_ids": [1, "x"]}},
     "sampling.stop_token_ids[1]"),
    ({"uid": "u", "prompt": "a", "k_max": 32}, "k_max"),
])
def test_group_refused_by_field(body, field):
    refused(wire.group_request, body, field)


def test_not_json_is_400():
    refused(wire.parse_json, b"{", "body", status=400)
    refused(wire.parse_json, b"\xff", "body", status=400)


def test_rewards_accepted_one_or_many():
    one = {"uid": "u", "sample": 3, "gen": 9, "reward": -1}
    assert wire.rewards(one) == [wire.Reward("u", 3, -1.0, 9, None)]
    many = wire.rewards({"rewards": [one, dict(one, sample=4, owner=1,
                                               reward=0.5)]})
    assert [(r.sample, r.reward, r.owner) for r in many] == \
        [(3, -1.0, None), (4, 0.5, 1)]


@pytest.mark.parametrize("body,field", [
    ({"uid": "u", "sample": 0, "gen": 1}, "body.reward"),
    ({"uid": "u", "sample": 0, "gen": 1, "reward": math.nan}, "body.reward"),
    ({"uid": "u", "sample": 0, "gen": 1, "reward": math.inf}, "body.reward"),
    ({"uid": "u", "sample": 0, "gen": 1, "reward": 1.5}, "body.reward"),
    ({"uid": "u", "sample": 0, "gen": 1, "reward": True}, "body.reward"),
    ({"uid": "u", "sample": 64, "gen": 1, "reward": 1}, "body.sample"),
    ({"uid": "u", "sample": 0, "gen": -1, "reward": 1}, "body.gen"),
    ({"uid": "u", "sample": 0, "gen": 1, "reward": 1, "owner": "a"},
     "body.owner"),
    ({"uid": "u", "sample": 0, "gen": 1, "reward": 1, "x": 0}, "body.x"),
    ({"rewards": []}, "rewards"),
    ({"rewards": [{"uid": "u", "sample": 0, "gen": 1, "reward": 1},
                  {"uid": "u", "sample": 1, "gen": 1, "reward": 2}]},
     "rewards[1].reward"),
])
def test_rewards_refused_by_field(body, field):
    refused(wire.rewards, body, field)


def test_abort_and_fit():
    assert wire.abort_request({"uid": "u"}) == ("u", None)
    assert wire.abort_request({"uid": "u", "owner": 1}) == ("u", 1)
    refused(wire.abort_request, {"uid": "u", "owner": -1}, "owner")
    refused(wire.abort_request, {"uid": "u", "owner": "1"}, "owner")
    refused(wire.abort_request, {"uid": "u", "all": True}, "all")
    assert wire.fit_post({"others": [0, 1.5], "policy_version": 3}) == \
        {"others": [0.0, 1.5], "policy_version": 3}
    refused(wire.fit_post, {"others": [0, math.nan], "policy_version": 1},
            "others[1]")
    refused(wire.fit_post, {"others": [0]}, "policy_version")


def test_records_are_one_json_line_each():
    rec = wire.sample_record("u", 2, 7, 1, "fe9", {"token_ids": [5]})
    assert json.loads(wire.line(rec)) == {
        "type": "sample", "uid": "u", "sample": 2, "gen": 7, "owner": 1,
        "origin": "fe9", "token_ids": [5]}
    assert wire.line(rec).count(b"\n") == 1
