# SPDX-License-Identifier: MIT
"""What bench/nobarrier.py and bench/rules.py share: running `v05ctl sim`
and reading its one JSON object, the build's v05ctl, a geometric mean; the
run's identity (commit, date, machine) and its summary, the JSON each page
is written from, kept in bench/results/ (committed: a page is rewritten
from it with --from)."""
import datetime
import json
import math
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V05CTL = os.path.join(ROOT, "build", "tools", "v05ctl", "v05ctl")
RESULTS = os.path.join(ROOT, "bench", "results")


# What the benchmarks write: a change there is not a change to what ran.
OUTPUTS = [":(exclude)bench/results", ":(exclude)bench/*.md",
           ":(exclude)bench/plots", ":(exclude)bench/train/*.md",
           ":(exclude)bench/train/plots"]


def git(*args):
    return subprocess.run(["git", "-C", ROOT] + list(args),
                          capture_output=True, text=True).stdout.strip()


def identity(command):
    """Where a run comes from (taken before it starts): the commit, with
    "-dirty" when the tree has uncommitted changes other than the
    benchmarks' own pages and summaries (such a run names no committed
    tree), the date, the machine, the command that reruns it."""
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", ".",
           *OUTPUTS):
        commit += "-dirty"
    return {"commit": commit, "date": str(datetime.date.today()),
            "machine": f"{platform.machine()} ({os.cpu_count()} cores)",
            "command": command}


def save(name, summary):
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, name)
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    return path


def load(path):
    with open(path) as f:
        return json.load(f)


def summary_of(ap, name, command, measure):
    """(args, summary): with --from, the saved summary; else measure(the
    v05ctl to run), saved as bench/results/NAME with the run's identity."""
    ap.add_argument("--v05ctl", default=V05CTL)
    ap.add_argument("--from", dest="src", metavar="SUMMARY",
                    help="rewrite the page from a saved summary, run nothing")
    a = ap.parse_args()
    if a.src:
        return a, load(a.src)
    run = identity(command)
    summary = measure(a.v05ctl)
    summary["run"] = run
    save(name, summary)
    return a, summary


def provenance(script, summary, rel):
    """The page's sentence saying where its numbers come from."""
    run = summary["run"]
    dirty = run["commit"].endswith("-dirty")
    return (f"Written by `{script}` from `{rel}`, the summary of the run "
            f"of commit {run['commit']} on {run['date']}, {run['machine']}"
            + (" (uncommitted changes: these figures name no committed "
               "tree)" if dirty else "") +
            f"; rerun: `{run['command']}`; rewrite this page from the "
            f"summary: `python3 {script} --from {rel}`.")


def sim(v05ctl, args, prompts, batch):
    """One `v05ctl sim` run of `prompts` prompts in batches of `batch`."""
    out = subprocess.run([v05ctl, "sim", "--prompts", str(prompts),
                          "--batch", str(batch)] + args,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
