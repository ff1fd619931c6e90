/* SPDX-License-Identifier: MIT */
/* The fixture util/eb_fx.h declares. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/config.h"
#include "util/eb_fx.h"
#include "util/seg.h"
#include "v05-internal/plugin.h" /* V05_C_SAMPLES_PADDED */
#include "v05.h"

uint64_t ebfx_lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 11;
}

double ebfx_u01(uint64_t *s)
{
	return (double)ebfx_lcg(s) / 9007199254740992.0;
}

/* Priors and rewards of batch `batch` (the same for every plugin). */
void ebfx_world(struct fx *f, uint64_t batch)
{
	uint64_t seed = 77 + batch;

	for (uint32_t i = 0; i < N; i++) {
		double mu = 2 * ebfx_u01(&seed) - 1;

		f->prior[i] = i % 4 == 0 ? 2 * ebfx_u01(&seed) - 1 :
			      fmax(-1, fmin(1, mu + 0.3 * (ebfx_u01(&seed) - 0.5)));
		for (uint32_t s = 0; s < 16; s++)
			f->r[i][s] = ebfx_u01(&seed) < (1 + mu) / 2 ? 1.0f : -1.0f;
	}
}

void ebfx_config(struct fx *f, uint32_t cold, uint32_t pad)
{
	memset(f, 0, sizeof(*f));
	tc_config(&f->c);
	f->c.params.cost = 0.002;
	f->c.eb_cold = cold;
	f->c.eb_window = 40;
	f->c.pad_multiple = pad;
	f->c.max_prompts = N;
	f->c.max_producers = 1;
	f->c.lane_capacity = 1024;
	f->c.max_batches = 2;
}

void ebfx_open_fx(struct fx *f, const char *tag)
{
	test_name(f->name, sizeof(f->name), tag);
	assert_int_equal(v05_plugin_create(f->name, &f->c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
}

void ebfx_close_fx(struct fx *f)
{
	assert_int_equal(v05_producer_close(f->w), 0);
	assert_int_equal(v05_plugin_close(f->p, V05_CLOSE_UNLINK), 0);
}

/* Submit batch `batch`: prompts b<batch>-<i>. */
void ebfx_submit(struct fx *f, uint64_t batch)
{
	struct v05_prompt_in in[N];
	char uids[N][24];

	ebfx_world(f, batch);
	for (uint32_t i = 0; i < N; i++) {
		snprintf(uids[i], sizeof(uids[i]), "b%llu-%u",
			 (unsigned long long)batch, i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = f->prior[i];
		f->key[i] = v05_key(uids[i], in[i].uid_len);
	}
	assert_int_equal(v05_submit(f->p, in, N, f->d, NULL), N);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(f->d[i].kind, V05_DECISION_SAMPLE);
		assert_int_equal(f->d[i].key, f->key[i]);
		f->gen[i] = f->d[i].gen;
	}
}

int ebfx_idx_of(const struct fx *f, uint64_t key)
{
	for (int i = 0; i < N; i++)
		if (f->key[i] == key)
			return i;
	fail_msg("unknown key");
	return -1;
}

double ebfx_first_successes(const struct fx *f, int i)
{
	double s = 0;

	for (int j = 0; j < 4; j++)
		s += (1.0 + f->r[i][j]) / 2.0;
	return s;
}

/* Push samples [from, to) of prompt i. */
void ebfx_push_range(struct fx *f, int i, uint32_t from, uint32_t to)
{
	for (uint32_t s = from; s < to; s++)
		assert_int_equal(v05_producer_push(f->w, f->key[i], f->gen[i], s,
						   f->r[i][s]), 0);
}

/* Answer every SAMPLE of d[0..m) (second waves), release every final. */
void ebfx_settle(struct fx *f, int m)
{
	while (m > 0) {
		for (int j = 0; j < m; j++) {
			const struct v05_decision *d = &f->d[j];
			int i = ebfx_idx_of(f, d->key);

			if (d->kind == V05_DECISION_SAMPLE) {
				for (uint32_t s = 0; s < 64; s++)
					if (d->samples >> s & 1)
						ebfx_push_range(f, i, s, s + 1);
			} else {
				assert_int_equal(v05_release(f->p, d->slot,
							     d->gen, d->key), 0);
			}
		}
		m = v05_poll(f->p, f->d, MAXD);
		assert_true(m >= 0);
	}
}
