/* SPDX-License-Identifier: MIT */
/* Test points (testpoint.h): die or wait where a test asks. */
#include "testpoint.h"

#ifdef V05_TEST_POINTS
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Passes left before the point acts (V05_TEST_POINT_SKIP), per process. */
static long skip_left = -1;

static void handshake(const char *spec)
{
	int w = -1, r = -1;
	char b = 'p';

	if (sscanf(spec, "fd:%d:%d", &w, &r) != 2 || w < 0 || r < 0) {
		fprintf(stderr, "v05: V05_TEST_POINT_ACTION '%s' is not fd:W:R\n",
			spec);
		abort();
	}
	while (write(w, &b, 1) < 0 && errno == EINTR)
		;
	while (read(r, &b, 1) < 0 && errno == EINTR)
		;
}

void v05__test_point(const char *where)
{
	const char *want = getenv("V05_TEST_POINT");
	const char *action;

	if (!want || strcmp(want, where))
		return;
	if (skip_left < 0) {
		const char *s = getenv("V05_TEST_POINT_SKIP");

		skip_left = s ? strtol(s, NULL, 10) : 0;
	}
	if (skip_left > 0) {
		skip_left--;
		return;
	}
	action = getenv("V05_TEST_POINT_ACTION");
	if (action && !strncmp(action, "fd:", 3)) {
		handshake(action);
		return;
	}
	raise(SIGKILL);
}
#endif
