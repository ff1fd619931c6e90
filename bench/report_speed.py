#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""RESULTS.md's sections on speed, for bench/report.py: the transport (a
lane against rte_ring and ck_ring, records/s and instructions), the
latency against the physical floor, and v05_poll's cost per reward and
per empty poll; each goal judged from the same numbers."""

from report_inputs import load, load_opt


def met(ok):
    return "**met**" if ok else "**not met**"


def mrec(v):
    return "%.1f M/s" % (v / 1e6)


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
