/* SPDX-License-Identifier: MIT */
/*
 * The plugin core's process-local state and the functions its files share
 * (plugin/mechanics/internal.h, which brings the segment's headers and vocab.h with
 * it), for white-box tests, the soak and stress programs, bench_poll and
 * the lane fuzzer. Not installed.
 */
#ifndef V05_INTERNAL_PLUGIN_H
#define V05_INTERNAL_PLUGIN_H

#include "../../plugin/mechanics/internal.h"

#endif
