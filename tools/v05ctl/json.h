/* SPDX-License-Identifier: MIT */
/* Minimal JSON writing for v05ctl's machine-readable output. */
#ifndef V05CTL_JSON_H
#define V05CTL_JSON_H

#include <stdio.h>

/* A double with full precision (%.17g); non-finite values become null. */
void json_num(FILE *f, double v);
/* A string with JSON escapes. */
void json_str(FILE *f, const char *s);
/* Bytes as a JSON string: printable ASCII kept, everything else \u00XX. */
void json_bytes(FILE *f, const void *p, size_t n);

#endif
