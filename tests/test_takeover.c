/* SPDX-License-Identifier: MIT */
/* Attach after the owner and recover; a decision queue that cannot grow
 * fails poll until recover hands the state out again. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/plugin_fx.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"

static void test_attach_and_recover(void **state)
{
	static const double priors[3] = { 0.8, -0.8, 0.8 };
	static const float r[64] = { 1, 1, 1, -1 };
	static const float ones[64] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_plugin *q;
	uint64_t keys[3];
	int n, sample = 0, final = 0;

	(void)state;
	fx_config(f);
	f->c.pad_multiple = 1;
	f->c.halt_fraction = 0.0;
	fx_open(f);
	submit(f, priors, 3, keys);
	assert_int_equal(v05_plugin_attach(f->name, 0, &q), -EBUSY);
	push_samples(f, keys[0], 0xf, r);    /* final at 4 */
	push_samples(f, keys[1], 0xf, ones); /* more: 4, 5 issued */
	push_samples(f, keys[2], 0x3, r);    /* half way */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1); /* u0 final; u1 held */
	/* Hand over: state stays in the segment. */
	assert_int_equal(v05_plugin_close(f->p, 0), 0);
	assert_int_equal(v05_plugin_attach(f->name, 0, &f->p), 0);
	n = v05_recover(f->p, f->d, MAXD);
	for (int i = 0; i < n; i++) {
		struct v05_decision *d = &f->d[i];

		assert_true(d->flags & V05_DF_RECOVERED);
		if (d->kind == V05_DECISION_FINAL) {
			assert_true(d->key == keys[0]);
			final++;
		} else if (d->key == keys[2]) {
			assert_true(d->samples == 0xc); /* the two missing */
			sample++;
		}
	}
	assert_int_equal(final, 1);
	assert_int_equal(sample, 1);
	/* u1's round completes once u2 decides; the rest goes on. */
	push_samples(f, keys[2], 0xc, r);
	n = v05_poll(f->p, f->d, MAXD);
	assert_int_equal(n, 2); /* u2 final, u1 SAMPLE 4..5 */
	fx_close(f);
	free(f);
}

static void *no_memory(size_t n)
{
	(void)n;
	return NULL;
}

/*
 * The decision queue's growth fails: the decision that did not fit is not
 * silently lost. v05_poll answers -ENOMEM, on every call, until
 * v05_recover hands out the whole state again.
 */
static void test_queue_alloc_failure(void **state)
{
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint32_t finals = 0;
	int n;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	f->c.max_prompts = 1; /* queue of 2 preallocated */
	fx_open(f);
	for (uint32_t round = 0; round < 3; round++) {
		char uid[8];
		struct v05_prompt_in in = { uid, 0, 0.0 };
		struct v05_group g;

		snprintf(uid, sizeof(uid), "q%u", round);
		in.uid_len = (uint32_t)strlen(uid);
		assert_int_equal(v05_submit(f->p, &in, 1, f->d, NULL), 1);
		push_samples(f, f->d[0].key, 0xf, r);
		if (round == 2)
			v05__queue_malloc = no_memory;
		/* Take no decision out: the queue fills. */
		n = v05_poll(f->p, NULL, 0);
		if (round < 2) {
			assert_int_equal(n, 0);
			/* Release through the group (the decision waits). */
			assert_int_equal(v05_group(f->p, 0, &g), 0);
			assert_int_equal(v05_release(f->p, 0, g.gen, g.key), 0);
		}
	}
	v05__queue_malloc = malloc;
	assert_int_equal(n, -ENOMEM);
	/* Sticky: still -ENOMEM, with memory back, until recovered. */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), -ENOMEM);
	assert_int_equal(v05_pending(f->p), 1);
	n = v05_recover(f->p, f->d, MAXD);
	assert_true(n >= 1);
	for (int i = 0; i < n; i++) {
		assert_true(f->d[i].flags & V05_DF_RECOVERED);
		if (f->d[i].kind == V05_DECISION_FINAL) {
			finals++;
			assert_int_equal(v05_release(f->p, f->d[i].slot,
						     f->d[i].gen, f->d[i].key), 0);
		}
	}
	assert_int_equal(finals, 1); /* the third group, the one not queued */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	fx_close(f);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_and_recover),
		cmocka_unit_test(test_queue_alloc_failure),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
