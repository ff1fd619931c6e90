/* SPDX-License-Identifier: MIT */
/*
 * The thread contract (include/v05/plugin.h): a plugin handle is used by
 * one thread at a time. Builds with debug info check it: while one thread
 * is inside a call on the handle (here v05_wait, blocked on the doorbell),
 * another thread's call is refused with -EBUSY and a message, and touches
 * nothing; once the first call returns, the other thread's calls go
 * through (handing a handle from thread to thread is fine); the calls
 * that read only what create fixed, or relaxed counters, are allowed from
 * any thread. Built only with debug info (meson's debug option).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/plugin_fx.h"
#include "v05-internal/shm.h"
#include "v05.h"

struct waiter {
	struct v05_plugin *p;
	int ret;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->ret = v05_wait(w->p, 30000);
	return NULL;
}

static void test_second_thread_refused(void **state)
{
	struct fx f;
	struct waiter w;
	pthread_t t;
	double prior = 0.0;
	uint64_t key, ctrs[V05_COUNTER_SLOTS];
	int64_t ns;
	struct v05_group g;
	float r[64];

	(void)state;
	memset(&f, 0, sizeof(f));
	fx_config(&f);
	f.c.params.mode = V05_MODE_GRPO;
	f.c.params.k_init = f.c.params.k_max = 2;
	fx_open(&f);
	assert_int_equal(submit(&f, &prior, 1, &key), 1);
	w.p = f.p;
	w.ret = -1;
	assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
	/* Until the waiter holds the handle: it blocks in the wait, which
	 * only a reward ends. */
	while (!v05_load_relaxed(&f.p->in_call))
		v05_cpu_relax();
	assert_int_equal(v05_poll(f.p, f.d, MAXD), -EBUSY);
	assert_non_null(strstr(v05_errmsg(), "one thread at a time"));
	assert_non_null(strstr(v05_errmsg(), "poll"));
	assert_int_equal(v05_next_deadline(f.p, &ns), -EBUSY);
	assert_int_equal(v05_group(f.p, 0, &g), -EBUSY);
	assert_int_equal(v05_release(f.p, 0, 0, key), -EBUSY);
	assert_int_equal(v05_cancel(f.p, 1), -EBUSY);
	assert_int_equal(v05_plugin_close(f.p, 0), -EBUSY);
	/* Reads of what create fixed and of relaxed counters: any thread. */
	assert_true(v05_fd(f.p) >= 0);
	assert_non_null(v05_wait_path(f.p));
	assert_int_equal(v05_counters(f.p, ctrs, V05_COUNTER_SLOTS),
			 V05_COUNTER_SLOTS);
	/* A reward (a producer's own handle) ends the wait. */
	for (uint32_t i = 0; i < 64; i++)
		r[i] = i ? -1.0f : 1.0f;
	push_samples(&f, key, 3, r);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.ret, 1);
	/* Handed back: this thread's calls go through. */
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 1);
	assert_int_equal(f.d[0].kind, V05_DECISION_FINAL);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_second_thread_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
