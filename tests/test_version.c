/* SPDX-License-Identifier: MIT */
/*
 * The version check (v05/common.h, v05/version.h): the library this
 * program runs with passes the check with its own headers' version and
 * any older one, and refuses a newer one with -ENOTSUP and a message
 * naming both versions; the compile-time macro agrees in #if and in an
 * expression; v05_version() is the headers' string.
 */
#include <assert.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "v05.h"

#if !V05_VERSION_AT_LEAST(V05_VERSION_MAJOR, V05_VERSION_MINOR)
#error "V05_VERSION_AT_LEAST refuses the headers' own version"
#endif
#if V05_VERSION_AT_LEAST(V05_VERSION_MAJOR, V05_VERSION_MINOR + 1)
#error "V05_VERSION_AT_LEAST takes a newer minor"
#endif
static_assert(V05_VERSION_AT_LEAST(0, 0), "every version is at least 0.0");
static_assert(!V05_VERSION_AT_LEAST(V05_VERSION_MAJOR + 1, 0),
	      "a newer major is newer");

static void test_own_and_older(void **state)
{
	(void)state;
	assert_string_equal(v05_version(), V05_VERSION_STRING);
	assert_int_equal(V05_CHECK_VERSION(), 0);
	assert_int_equal(v05_check_version(V05_VERSION_MAJOR,
					   V05_VERSION_MINOR), 0);
	assert_int_equal(v05_check_version(0, 0), 0);
	if (V05_VERSION_MINOR > 0)
		assert_int_equal(v05_check_version(V05_VERSION_MAJOR,
						   V05_VERSION_MINOR - 1), 0);
	if (V05_VERSION_MAJOR > 0)
		assert_int_equal(v05_check_version(V05_VERSION_MAJOR - 1,
						   UINT32_MAX), 0);
}

/* Headers newer than the library: refused, the message naming the
 * library's version and the one asked for. */
static void test_newer_refused(void **state)
{
	const struct { uint32_t major, minor; } newer[] = {
		{ V05_VERSION_MAJOR, V05_VERSION_MINOR + 1 },
		{ V05_VERSION_MAJOR + 1, 0 },
		{ UINT32_MAX, UINT32_MAX },
	};
	char want[64];

	(void)state;
	for (size_t i = 0; i < sizeof(newer) / sizeof(newer[0]); i++) {
		assert_int_equal(v05_check_version(newer[i].major,
						   newer[i].minor), -ENOTSUP);
		snprintf(want, sizeof(want), "older than %u.%u",
			 newer[i].major, newer[i].minor);
		assert_non_null(strstr(v05_errmsg(), want));
		assert_non_null(strstr(v05_errmsg(), V05_VERSION_STRING));
	}
	/* A passing check leaves no message behind. */
	assert_int_equal(V05_CHECK_VERSION(), 0);
	assert_string_equal(v05_errmsg(), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_own_and_older),
		cmocka_unit_test(test_newer_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
