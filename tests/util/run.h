/* SPDX-License-Identifier: MIT */
/* Test helper: run a program, capture stdout and stderr, return its status. */
#ifndef V05_TEST_RUN_H
#define V05_TEST_RUN_H

#include <stddef.h>

struct run_result {
	int status;    /* exit status, or 128 + signal */
	char out[65536];
	char err[8192];
	size_t out_len, err_len;
};

/* argv[0] is the program path; NULL-terminated. Returns 0 or -errno. */
int run_capture(char *const argv[], struct run_result *r);

/* The number after "key": in a one-line JSON object: 0, or -ENOENT when
 * the key is absent. null reads as NAN. */
int json_number(const char *json, const char *key, double *out);

/* Lines in s (number of '\n'). */
unsigned count_lines(const char *s);

#endif
