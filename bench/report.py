#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Turn bench/out/*.json (written by bench/run) into bench/RESULTS.md and
bench/plots/*.svg. Every number in RESULTS.md comes from those files; the
goals are judged here, from the same numbers, and reported either way.
The files, with the machine and commit they were measured on, are kept in
bench/results/run.json (committed), from which the page is rewritten:

    report.py OUT_DIR RERUN_COMMAND      (bench/run)
    report.py --from bench/results/run.json
"""

import json
import os
import platform
import subprocess
import sys
import tempfile

import stats_report
from report_sim import load, plots, sim_records, simulator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

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


def met(ok):
    return "**met**" if ok else "**not met**"


def mrec(v):
    return "%.1f M/s" % (v / 1e6)


# ---------------------------------------------------------------- tables


def transport(out, goals):
    rows = []
    for b in (1, 8, 32):
        r = load(out, "ring-%d.json" % b)
        v = r["v05"]["median"]
        line = ["%d" % b, mrec(v)]
        for peer in ("dpdk", "ck"):
            if peer in r:
                p = r[peer]["median"]
                # Runs i of v05 and of the peer ran back to back: their
                # ratio cancels most of the host's drift between runs.
                pairs = sorted(a / c for a, c in zip(r["v05"]["runs"], r[peer]["runs"]))
                ratio = pairs[len(pairs) // 2]
                line += [mrec(p), "%.2f (%.2f-%.2f)" % (ratio, pairs[0], pairs[-1])]
                goals.append(("transport, batch %d: v05 / %s >= 1.0" %
                              (b, "DPDK rte_ring" if peer == "dpdk" else "ck_ring"),
                              "%.2f (runs %.2f-%.2f)" % (ratio, pairs[0], pairs[-1]),
                              ratio >= 1.0))
            else:
                line += ["not built", "-"]
        rows.append(line)
    reps = r["reps"]
    recs = r["records"]
    s = ["## Transport throughput: one lane against DPDK and ck", "",
         "%d records of 32 bytes per run, producer and consumer pinned to "
         "different cores. After one untimed pass of each ring, %d "
         "repetitions run the three rings back to back, the order rotated "
         "every repetition. Rates are each ring's median run; a ratio is "
         "the median over the %d repetitions of v05's rate over the peer's "
         "in the same repetition, with the range in brackets. DPDK's "
         "`rte_ring` is the SP/SC "
"`_elem` ring with 32-byte elements, initialised on our own memory "
         "with `rte_ring_init` (no EAL); ck is `ck_ring` SPSC with typed "
         "32-byte entries (`CK_RING_PROTOTYPE`), which has no batch "
         "enqueue, so its batch is a loop of single calls. The v05 column "
         "is the real path: `v05_producer_push_batch` (one release store "
         "per batch, doorbell check included) and the plugin's drain, "
         "which copies and checks every record. Every consumer copies the "
         "records out and sums a field." % (recs, reps, reps), "",
         "| batch | v05 lane | DPDK rte_ring | v05/DPDK | ck_ring | v05/ck |",
         "|---:|---:|---:|---:|---:|---:|"]
    s += ["| " + " | ".join(x) + " |" for x in rows]
    ins = load_opt(out, "instr.json")
    if ins:
        s += ["", "Instructions per record (callgrind, `bench/instr`: one thread "
              "pushes a batch and drains it, %d records, then polls the empty "
              "ring as often; each step is its own function, counted "
              "inclusively). Counts do not move with the host's load, so a "
              "regression shows here even when the rates above are lost in "
              "noise. They are not the whole story: a cross-core run is also "
              "bound by cache-line transfers, which `rte_ring` and ck pay on "
              "every enqueue (they re-read the consumer's index) and the lane "
              "only when its cached index says full." % ins["records"], "",
              "| batch | v05 push | v05 drain | v05 empty poll | rte_ring push | rte_ring drain | rte_ring empty poll | ck push | ck drain | ck empty poll |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for b in ("1", "8", "32"):
            row = ins["ring"][b]
            cells = [b]
            for r in ("v05", "dpdk", "ck"):
                if r in row:
                    cells += ["%.1f" % row[r][k] for k in ("push", "drain", "empty")]
                else:
                    cells += ["not built"] * 3
            s.append("| " + " | ".join(cells) + " |")
    missed = [g for g in goals if g[0].startswith("transport") and not g[2]]
    if missed:
        s += ["", "**Not met** in this run: " + "; ".join(
            g[0].split(":")[0] + " against " + g[0].split("/ ")[1].split(" >=")[0] +
            " at " + g[1] for g in missed) + ". Where the paired range "
            "crosses 1.0 the host's drift between runs is as large as the "
            "difference; bench/README.md has every run of the batch-32 "
            "comparison and why it is close (\"Batch 32: a few percent ahead "
            "of rte_ring\"), and the profile of the batch-1 lane (\"Where a "
            "one-record push's time goes\")."]
    return s


def load_opt(out, name):
    try:
        return load(out, name)
    except OSError:
        return None


def latency(out, goals):
    r = load(out, "latency.json")
    names = [("floor", "cache-line ping-pong (the floor)"),
             ("spin", "v05 lane, spinning consumer"),
             ("bell_io_uring", "v05 doorbell wake, io_uring FUTEX_WAIT"),
             ("bell_thread", "v05 doorbell wake, fallback thread + eventfd")]
    s = ["## One-way latency", "",
         "Producer and consumer on different cores, in the same run. The "
         "floor is one 64-byte line written by one core and seen by the "
         "other (half of a ping-pong round trip); the lane rows time a "
         "32-byte record from the producer's clock read before the push to "
         "the consumer's clock read after the drain. The doorbell rows put "
         "the consumer to sleep before every record (the worst case: a "
         "consumer that is always idle). Doorbell fence: `%s`." % r["doorbell"], "",
         "| path | samples | p50 | p99 | p99.9 | min |",
         "|---|---:|---:|---:|---:|---:|"]
    for key, label in names:
        if key not in r:
            s.append("| %s | not run | | | | |" % label)
            continue
        x = r[key]
        s.append("| %s | %d | %d ns | %d ns | %d ns | %d ns |" % (
            label, x["samples"], x["p50_ns"], x["p99_ns"], x["p999_ns"], x["min_ns"]))
    ratio = r["spin"]["p50_ns"] / r["floor"]["p50_ns"]
    goals.append(("latency: spinning p50 <= 2x the floor's p50",
                  "%.2fx (%d ns vs %d ns)" % (ratio, r["spin"]["p50_ns"], r["floor"]["p50_ns"]),
                  ratio <= 2.0))
    return s


def per_reward(out, goals):
    c = load(out, "poll.json")
    py = load(out, "poll_python.json")
    ratio = py["median_ns_per_reward"] / c["median_ns_per_reward"]
    ins = load_opt(out, "instr.json")
    per = ""
    if ins:
        per = ", %.0f instructions" % ins["poll"]["per_reward"]
    # "Nothing measurable": what v05_poll adds to the lane scan any
    # consumer must do, paired in one run, is within the scan's own spread
    # over the repetitions, or under 5 ns.
    over = c["median_poll_over_scan_ns"]
    spread = max(c["lane_scan_runs_ns"]) - min(c["lane_scan_runs_ns"])
    goals.append(("an empty v05_poll costs nothing measurable beyond the "
                  "lane scan (poll minus scan <= 5 ns or within the scan's "
                  "spread)",
                  "%.1f ns, scan %.1f ns: +%.1f ns (runs +%.1f to +%.1f)%s" % (
                      c["median_empty_poll_ns"], c["median_lane_scan_ns"],
                      over, c["poll_over_scan_range_ns"][0],
                      c["poll_over_scan_range_ns"][1],
                      ", %.0f vs %.0f instructions" % (
                          ins["poll"]["empty"], ins["poll"]["scan"])
                      if ins and "scan" in ins["poll"] else ""),
                  over <= max(5.0, spread)))
    goals.append(("per-reward cost of v05_poll <= 100 ns (65,536 prompts, 8 producers)",
                  "%.1f ns (runs %.1f-%.1f)%s" % (
                      c["median_ns_per_reward"], min(c["runs_ns"]),
                      max(c["runs_ns"]), per),
                  c["median_ns_per_reward"] <= 100.0))
    s = ["## Per-reward cost of `v05_poll`", "",
         "%d active prompts in one batch (v05 mode, k_init = 4), %d "
         "producers (threads, each with its own lane) that push every "
         "prompt's first 4 rewards, %d in all, before the clock starts; "
         "then the time `v05_poll` takes to apply them all: lane read, table "
         "lookup, exactly-once checks, slot write, and for each completed "
         "group the statistics and the decision. This is the consumer's "
         "cost alone. The Python row is the same per-reward logic (a dict "
         "of prompt states, a check and a store per reward, the V0.5 "
         "statistics with numpy when a group is complete) written plainly, "
         "on the same stream in the order a round-robin drain sees it "
         "(Python %s, numpy %s)." % (
             c["prompts"], c["producers"], c["rewards"], py["python"], py["numpy"]),
         "",
         "| implementation | ns per reward (median) | runs |",
         "|---|---:|---|",
         "| v05_poll (C) | %.1f | %s |" % (
             c["median_ns_per_reward"], ", ".join("%.1f" % x for x in c["runs_ns"])),
         "| plain Python + numpy | %.0f | %s |" % (
             py["median_ns_per_reward"], ", ".join("%.0f" % x for x in py["runs_ns"])),
         "",
         "v05 is %.0fx cheaper per reward than the plain Python version." % ratio,
         ""] + empty_poll(c, ins) + [
         "",
         "Shared memory per active prompt: **%d bytes** in the prompt table "
         "and sample arena (k_max = 16 float32 rewards and advantages, the "
         "table entry at load 0.5, the completion ring); the whole segment "
         "of this run, lanes and header included, is %d bytes, %d per "
         "prompt." % (c["bytes_per_prompt"], c["segment_bytes"],
                      c["segment_bytes_per_prompt"])]
    return s


def empty_poll(c, ins):
    s = ["A poll with nothing to do (every lane empty, no release, no "
         "deadline due; after the rewards above, %s polls timed): "
         "**%.1f ns** median (runs %s), against **%.1f ns** (runs %s) for "
         "a bare scan of the same 8 empty lanes (`v05__lanes_drain` alone, "
         "what any consumer of 8 rings pays), the two timed in alternating "
         "blocks of the same run: `v05_poll` adds %.1f ns (runs %.1f to "
         "%.1f)" % (
             "100,000", c["median_empty_poll_ns"],
             ", ".join("%.1f" % x for x in c["empty_poll_runs_ns"]),
             c["median_lane_scan_ns"],
             ", ".join("%.1f" % x for x in c["lane_scan_runs_ns"]),
             c["median_poll_over_scan_ns"], c["poll_over_scan_range_ns"][0],
             c["poll_over_scan_range_ns"][1])]
    if ins:
        s[0] += (". Instructions (callgrind): %.0f per empty poll, %s per "
                 "bare scan; per applied reward, `v05_poll` executes %.0f." % (
                     ins["poll"]["empty"],
                     "%.0f" % ins["poll"]["scan"] if "scan" in ins["poll"] else "?",
                     ins["poll"]["per_reward"]))
    else:
        s[0] += "."
    s[0] += (" What an empty poll does besides the scan is a test of a word "
             "this process owns per step (arguments and sticky errors, armed, "
             "reader check due, lane reclaim due, stream schedule, journal "
             "work, queued decisions) and two loads for the release ring; "
             "it reads no precise clock (the first record applied does), "
             "and the coarse clock (`CLOCK_MONOTONIC_COARSE`), with the "
             "heartbeat's store, on every 8th poll and the first after a "
             "wait; it leaves `v05_errmsg()` alone.")
    return s


def false_rejection(out):
    r = load(out, "false_rejection.json")
    rows = r["false_rejection"]
    s = ["## False rejection of an exact prior (the base group size)", "",
         "The prior is exact (V = %g, so p = %g) and the group of k Bernoulli "
         "rewards is enumerated exactly: the rate is P(delta2 > 0), the "
         "probability that the empirical mean lands more than 1/sqrt(k) from "
         "the prior, so that v05 rejects a correct prior. The empirical "
         "mean moves in steps of 2/k (the gap), the rejection radius is "
         "1/sqrt(k)." % (r["prior"], r["p"]), "",
         "| k | false rejection | mean's step 2/k | radius 1/sqrt(k) |",
         "|---:|---:|---:|---:|"]
    for x in rows:
        s.append("| %d | %.4f | %.3f | %.3f |" % (x["k"], x["rate"], x["gap"], x["radius"]))
    best = min(rows, key=lambda x: x["rate"])
    drops = [rows[i]["k"] for i in range(1, len(rows)) if rows[i]["rate"] < rows[i - 1]["rate"]]
    k4 = next((x["rate"] for x in rows if x["k"] == 4), None)
    s += ["",
          "The rate is %s in k: it drops at k = %s, where a new lattice "
          "point of the empirical mean falls inside the radius, and climbs "
          "in between as the radius shrinks. Among k <= %d the lowest is "
          "k = %d (%.4f)." % (
              "not monotone" if drops and len(drops) < len(rows) - 1 else "monotone",
              ", ".join(str(k) for k in drops) or "none", rows[-1]["k"],
              best["k"], best["rate"])]
    if k4 is not None:
        s[-1] += (" At k = 4, the default k_init, an exact prior is rejected "
                  "%.1f%% of the time; OSLA's further samples are what "
                  "undo such a rejection." % (100 * k4))
    return s


# ------------------------------------------------------------------ main


SUMMARY = "bench/results/run.json"


def save_inputs(out, m, rerun):
    """Every file of OUT_DIR (JSON, or JSON lines as a list), with the
    machine, commit and command: the summary the page is made from. A
    simulator run's per-batch figures are left out: the page reads only
    its totals."""
    files = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            files[name] = [{k: v for k, v in json.loads(x).items()
                            if k != "batches"} for x in f if x.strip()] \
                if name.endswith(".jsonl") else json.load(f)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(ROOT, SUMMARY), "w") as f:
        json.dump({"machine": m, "rerun": rerun, "files": files}, f,
                  sort_keys=True, separators=(",", ":"))
        f.write("\n")


def restore_inputs(path, out):
    """The files of a summary back in OUT_DIR; its machine and command."""
    with open(path) as f:
        s = json.load(f)
    for name, content in s["files"].items():
        with open(os.path.join(out, name), "w") as f:
            if name.endswith(".jsonl"):
                f.write("".join(json.dumps(x) + "\n" for x in content))
            else:
                json.dump(content, f)
    return s["machine"], s["rerun"]


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
