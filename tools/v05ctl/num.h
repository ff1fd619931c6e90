/* SPDX-License-Identifier: MIT */
/*
 * Strict number parsing for v05ctl arguments: the whole string must be a
 * plain decimal number, nothing before or after it, and finite.
 */
#ifndef V05CTL_NUM_H
#define V05CTL_NUM_H

#include <stdint.h>

/* 0 or -EINVAL (not a decimal number), -ERANGE (not finite / overflow). */
int v05ctl_parse_double(const char *s, double *out);
/* Unsigned decimal integer in [0, max]; 0, -EINVAL or -ERANGE. */
int v05ctl_parse_u64(const char *s, uint64_t max, uint64_t *out);
/*
 * Comma-separated list of doubles, at most max entries. Returns the count,
 * or -EINVAL / -ERANGE / -E2BIG; *bad_index (if not NULL) names the entry
 * that failed (0-based).
 */
int v05ctl_parse_double_list(const char *s, double *out, unsigned max,
			     unsigned *bad_index);

#endif
