/* SPDX-License-Identifier: MIT */
/* v05_errmsg's rule: every call that returns a negative errno sets the
 * calling thread's message to that failure's explanation, never leaving an
 * earlier failure's in place. Each case plants a sentinel, fails a call,
 * and checks the message changed and is not empty. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05/observer.h"

#define SENTINEL "sentinel: an earlier failure"

static void plant(void)
{
	(void)v05__fail(-EPERM, "%s", SENTINEL);
}

static void fresh(int ret, const char *what)
{
	if (ret >= 0)
		fail_msg("%s: expected a failure, got %d", what, ret);
	if (!strcmp(v05_errmsg(), SENTINEL) || !v05_errmsg()[0])
		fail_msg("%s failed (%d) with a stale or empty message: \"%s\"",
			 what, ret, v05_errmsg());
}

#define CHECK(call)                    \
	do {                           \
		plant();               \
		fresh((call), #call);  \
	} while (0)

static void test_null_handles(void **state)
{
	struct v05_decision d[1];

	(void)state;
	CHECK(v05_fd(NULL));
	CHECK(v05_arm(NULL, 0));
	CHECK(v05_pending(NULL));
	CHECK(v05_wait(NULL, 0));
	CHECK(v05_poll(NULL, d, 1));
	CHECK(v05_recover(NULL, d, 1));
	CHECK(v05_cancel(NULL, 1));
	CHECK(v05_submit(NULL, NULL, 1, d, NULL));
}

static void test_bad_arguments(void **state)
{
	struct v05_params prm;
	struct v05_config c;
	double m, r[2] = { 0.5, 2.0 };

	(void)state;
	v05_params_default(&prm);
	prm.k_max = 0;
	CHECK(v05_params_check(&prm));
	v05_config_default(&c);
	c.max_prompts = 0;
	CHECK(v05_config_check(&c));
	CHECK(v05_mean(r, 0, &m));
	CHECK(v05_mode_from_name("no-such-mode"));
	CHECK(v05_eb_fit(NULL, NULL, NULL, 0, NULL));
	CHECK(v05_segment_unlink("no-such-segment-errmsg"));
	CHECK(v05_observer_open("no-such-segment-errmsg", 0, NULL));
}

static void test_plugin_failures(void **state)
{
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_group g;
	struct v05_reward rec = { .key = 1, .reward = 1.0f };
	uint32_t cap;

	(void)state;
	v05_config_default(&c);
	c.max_prompts = 16;
	c.max_producers = 2;
	c.lane_capacity = 64;
	c.max_batches = 2;
	test_name(name, sizeof(name), "errmsg");
	assert_int_equal(v05_plugin_create(name, &c, &p), 0);
	CHECK(v05_plugin_create(name, &c, &p)); /* exists */
	CHECK(v05_cancel(p, 12345));
	CHECK(v05_release(p, 1u << 30, 0, 0));
	CHECK(v05_group(p, 0, &g));
	CHECK(v05_slot_uid(p, 0, NULL, 4));
	assert_int_equal(v05_producer_open(name, 0, &w), 0);
	/* Fill the lane: nothing polls it. */
	cap = 0;
	while (v05_producer_push(w, 1, 0, 0, 1.0f) == 0)
		cap++;
	assert_true(cap >= 64);
	CHECK(v05_producer_push(w, 1, 0, 0, 1.0f));
	CHECK(v05_producer_push_batch(w, &rec, 1));
	assert_int_equal(v05_producer_close(w), 0);
	assert_int_equal(v05_plugin_close(p, V05_CLOSE_UNLINK), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_null_handles),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_plugin_failures),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
