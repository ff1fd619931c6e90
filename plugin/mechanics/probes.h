/* SPDX-License-Identifier: MIT */
/*
 * USDT probes (provider "v05"), for perf and bpftrace: `perf probe -x
 * libv05.so sdt_v05:decision` (docs/OBSERVABILITY.md). Without a tracer
 * attached each is a single nop; built out entirely with -Dusdt=disabled.
 * Arguments are integers only (the sdt ABI handles those everywhere):
 *   reward_applied  key, sample, mask of the group's samples received so
 *                   far, the prompt instance's gen
 *   reward_rejected key, sample, reason (the V05_C_REJ_* counter index)
 *   decision        key, kind (enum v05_decision_kind), k, latency in ns
 *   final           key, k, latency in ns, group sequence number
 *   halt            batch id, prompts held when it halted
 */
#ifndef V05_PLUGIN_PROBES_H
#define V05_PLUGIN_PROBES_H

#ifdef V05_USDT
#include <sys/sdt.h>
#ifdef __clang__
/* sdt.h's macros pass empty variadic arguments internally (a GNU
 * extension clang's -Wpedantic names); the expansion is theirs, not ours. */
#pragma clang diagnostic ignored "-Wgnu-zero-variadic-macro-arguments"
#endif
#define V05_PROBE2(n, a, b) STAP_PROBE2(v05, n, a, b)
#define V05_PROBE3(n, a, b, c) STAP_PROBE3(v05, n, a, b, c)
#define V05_PROBE4(n, a, b, c, d) STAP_PROBE4(v05, n, a, b, c, d)
#else
#define V05_PROBE2(n, a, b) do { } while (0)
#define V05_PROBE3(n, a, b, c) do { } while (0)
#define V05_PROBE4(n, a, b, c, d) do { } while (0)
#endif

#endif
