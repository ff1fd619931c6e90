/* SPDX-License-Identifier: MIT */
/* Test helpers for segments: unique names, small geometries. */
#ifndef V05_TEST_SEG_H
#define V05_TEST_SEG_H

#include <stddef.h>
#include <stdint.h>

#include "v05-internal/shm.h"

/* "t-<tag>-<pid>-<n>": unique per process and call. */
void test_name(char *buf, size_t len, const char *tag);

/* A small geometry: lanes x cap records, slots prompts, k_max. */
struct v05_geometry test_geometry(uint32_t lanes, uint32_t cap, uint32_t slots,
				  uint32_t k_max);

/* A v05_lane_event_fn (ctx: the struct v05_segment) that counts lane events
 * in the segment's counters, as the plugin does. */
void test_lane_count(void *seg, enum v05_lane_event ev, uint32_t lane,
		     uint32_t n);

/* Seconds from the environment variable (for scaled stress runs). */
unsigned long test_env_ul(const char *var, unsigned long dflt);

#endif
