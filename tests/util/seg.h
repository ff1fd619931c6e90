/* SPDX-License-Identifier: MIT */
/* Test helpers for segments: unique names, small geometries. */
#ifndef V05_TEST_SEG_H
#define V05_TEST_SEG_H

#include <stddef.h>
#include <stdint.h>

#include "shm/layout.h"

/* "t-<tag>-<pid>-<n>": unique per process and call. */
void test_name(char *buf, size_t len, const char *tag);

/* A small geometry: lanes x cap records, slots prompts, k_max. */
struct v05_geometry test_geometry(uint32_t lanes, uint32_t cap, uint32_t slots,
				  uint32_t k_max);

/* Seconds from the environment variable (for scaled stress runs). */
unsigned long test_env_ul(const char *var, unsigned long dflt);

#endif
