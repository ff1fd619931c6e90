/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/config.h"
#include "util/plugin_fx.h"
#include "util/seg.h"

void fx_config(struct fx *f)
{
	tc_config(&f->c);
	/* These tests check the paper's rule, its halt and padding by hand
	 * (v05-eb has its own, tests/test_plugin_eb.c), under the paper's
	 * rounds unless a test says otherwise. */
	f->c.params.mode = V05_MODE_V05;
	f->c.schedule = V05_SCHEDULE_ROUNDS;
	f->c.max_prompts = 64;
	f->c.max_producers = 4;
	f->c.lane_capacity = 1024;
	f->c.max_batches = 4;
}

void fx_open(struct fx *f)
{
	test_name(f->name, sizeof(f->name), "plugin");
	assert_int_equal(v05_plugin_create(f->name, &f->c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
}

void fx_close(struct fx *f)
{
	assert_int_equal(v05_producer_close(f->w), 0);
	assert_int_equal(v05_plugin_close(f->p, V05_CLOSE_UNLINK), 0);
}

uint64_t ctr(struct fx *f, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	assert_int_equal(v05_counters(f->p, v, V05_COUNTER_SLOTS),
			 V05_COUNTER_SLOTS);
	return v[c];
}

/* Submit uids "u<i>" with the given priors. */
int submit(struct fx *f, const double *priors, uint32_t n,
		  uint64_t *keys)
{
	struct v05_prompt_in in[64];
	char uids[64][16];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], sizeof(uids[i]), "u%u", i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = priors[i];
		keys[i] = v05_key(uids[i], in[i].uid_len);
	}
	return v05_submit(f->p, in, n, f->d, NULL);
}

uint32_t fx_gen(struct fx *f, uint64_t key)
{
	struct v05_prompt *e = v05__table_find(&f->p->table, key);

	return e ? e->gen : 0;
}

void push_samples(struct fx *f, uint64_t key, uint64_t samples,
			 const float *r)
{
	uint32_t gen = fx_gen(f, key);

	for (uint32_t s = 0; s < 64; s++)
		if (samples >> s & 1)
			assert_int_equal(v05_producer_push(f->w, key, gen, s,
							   r[s]), 0);
}

int find(const uint64_t *keys, uint32_t n, uint64_t key)
{
	for (uint32_t i = 0; i < n; i++)
		if (keys[i] == key)
			return (int)i;
	return -1;
}
