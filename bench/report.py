#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Turn bench/out/*.json (written by bench/run) into bench/RESULTS.md and
bench/plots/*.svg. Every number in RESULTS.md comes from those files; the
goals are judged here, from the same numbers, and reported either way.
The files, with the machine and commit they were measured on, are kept in
bench/results/run.json (committed), from which the page is rewritten:

    report.py OUT_DIR RERUN_COMMAND      (bench/run)
    report.py --from bench/results/run.json

This file writes the page; its sections come from report_speed.py (the
transport, latency and poll), report_sim.py (the simulator) and
stats_report.py, its plots from report_plots.py, and its inputs are kept
and restored by report_inputs.py.
"""

import os
import platform
import subprocess
import sys
import tempfile

import stats_report
from report_inputs import HERE, ROOT, SUMMARY, restore_inputs, save_inputs
from report_plots import plots
from report_sim import false_rejection, sim_records, simulator
from report_speed import latency, met, per_reward, transport


def sh(*cmd):
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = "%.1f GiB" % (kb / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    dirty = sh("git", "status", "--porcelain", "--untracked-files=no")
    commit = sh("git", "rev-parse", "--short=12", "HEAD")
    if dirty and dirty != "unknown":
        commit += " (with uncommitted changes)"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "os": sh("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
        "compiler": sh("sh", "-c", "${CC:-cc} --version | head -n1"),
        "commit": commit,
        "date": sh("date", "-u", "+%Y-%m-%d %H:%M UTC"),
    }


# ------------------------------------------------------------------ main


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--from":
        with tempfile.TemporaryDirectory() as out:
            m, rerun = restore_inputs(sys.argv[2], out)
            write(out, m, rerun)
        return
    if len(sys.argv) != 3:
        sys.exit("usage: report.py OUT_DIR RERUN_COMMAND | report.py --from SUMMARY")
    out, rerun = sys.argv[1], sys.argv[2]
    m = machine()
    save_inputs(out, m, rerun)
    write(out, m, rerun)


def write(out, m, rerun):
    recs = sim_records(out)
    goals = []
    body = []
    body += transport(out, goals) + [""]
    body += latency(out, goals) + [""]
    body += per_reward(out, goals) + [""]
    body += simulator(recs) + [""]
    stats_recs = []
    if os.path.exists(os.path.join(out, "stats.jsonl")):
        lines, stats_recs = stats_report.section(out, recs, goals)
        body += lines + [""]
    body += false_rejection(out) + [""]
    made = plots(out, recs, stats_recs)

    head = ["# v05 benchmark results", "",
            "Written by `bench/report.py` from the run below, whose every "
            "input is in `%s` (committed; `python3 bench/report.py --from "
            "%s` rewrites this page, plots included, from it); do not edit "
            "by hand. Rerun with `%s` (bench/README.md explains each "
            "benchmark). These VMs are shared and noisy: compare the ratios, "
            "measured side by side in one run, more than the absolute "
            "figures." % (SUMMARY, SUMMARY, rerun), "",
            "| | |", "|---|---|",
            "| date | %s |" % m["date"],
            "| commit | %s |" % m["commit"],
            "| CPU | %s, %s cores |" % (m["cpu"], m["cores"]),
            "| memory | %s |" % m["memory"],
            "| OS, kernel | %s, Linux %s |" % (m["os"], m["kernel"]),
            "| compiler | %s, meson buildtype=release (-O2) |" % m["compiler"],
            "",
            "## Goals", "",
            "| goal | measured | |", "|---|---|---|"]
    for what, value, ok in goals:
        head.append("| %s | %s | %s |" % (what, value, met(ok)))
    head.append("")
    if made:
        head += ["Plots: " + ", ".join("[%s](%s)" % (p, p) for p in made) + ".", ""]
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("\n".join(head + body).rstrip() + "\n")


if __name__ == "__main__":
    main()


if __name__ == "__main__":
    main()
