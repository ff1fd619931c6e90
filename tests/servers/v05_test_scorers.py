# SPDX-License-Identifier: MIT
"""The scorer the server tests name by import path
(``v05_test_scorers:score``, on the server's PYTHONPATH): what it answers
depends on the group's uid, so one server covers every case."""
import math
import os


def _alternate(sample: int) -> float:
    return 1.0 if sample % 2 else -1.0


def score(record):
    uid, sample = record["uid"], record["sample"]
    # The record the scorer is promised: the sample and its group's prompt.
    if not isinstance(record["prompt"], list) or not record["token_ids"] \
            or record["type"] != "sample":
        raise AssertionError(f"not a sample record with its prompt: {record}")
    if uid.startswith("scored-"):
        return _alternate(sample)
    if uid.startswith("raises-") and sample == 1:
        raise ValueError("no verdict for this one")
    if uid.startswith("nan-") and sample == 2:
        return math.nan
    if uid.startswith("range-") and sample == 0:
        return 1.5
    if uid.startswith("blocked-"):
        if sample == 0:
            # Blocks until the test opens the FIFO for writing and
            # closes it: a scorer that holds its thread.
            with open(os.environ["V05_TEST_FIFO"]) as f:
                f.read()
        return 1.0
    if uid.startswith(("raises-", "nan-", "range-")):
        return 1.0
    return None  # the test pushes these over HTTP
