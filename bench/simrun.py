# SPDX-License-Identifier: MIT
"""What bench/nobarrier.py and bench/rules.py share: running `v05ctl sim`
and reading its one JSON object, the build's v05ctl, a geometric mean."""
import json
import math
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V05CTL = os.path.join(ROOT, "build", "tools", "v05ctl", "v05ctl")


def sim(v05ctl, args, prompts, batch):
    """One `v05ctl sim` run of `prompts` prompts in batches of `batch`."""
    out = subprocess.run([v05ctl, "sim", "--prompts", str(prompts),
                          "--batch", str(batch)] + args,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
