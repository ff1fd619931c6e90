/* SPDX-License-Identifier: MIT */
/*
 * Mode v05-pg through a plugin (plugin/rules/rule_pg.c, plugin/submit.c):
 * first waves of the sizes pg_first allows once the running fit is warm;
 * a prompt the fit is sure gives no signal skipped: submit hands it no
 * SAMPLE, the next poll its DROP with k = 0, counted (prompts_skipped),
 * its slot released like any dropped group's; the same batch without the
 * skip takes it; an owner killed between a batch going live and its skips
 * being finished leaves nothing a takeover cannot finish.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05.h"

#define N 32

struct pgp {
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[4 * N];
	double truth[N];
	uint64_t draws;
};

/* The skip bar these tests' batches are drawn for (per mille): the
 * warm-up's spread of truths keeps every prompt above it, and half of
 * batch "b" is far below it; the mechanics do not depend on the bar. */
#define PGP_SKIP 250u

static void pgp_config(struct pgp *f, uint32_t skip)
{
	v05_config_default(&f->c);
	assert_int_equal(v05_config_mode(&f->c, V05_MODE_PG), 0);
	f->c.max_prompts = 2 * N;
	f->c.max_producers = 2;
	f->c.lane_capacity = 1024;
	f->c.max_batches = 4;
	f->c.eb_cold = 8;
	f->c.pg_skip = skip;
}

static void pgp_open(struct pgp *f, const char *tag)
{
	test_name(f->name, sizeof(f->name), tag);
	assert_int_equal(v05_plugin_create(f->name, &f->c, &f->p), 0);
	assert_int_equal(v05_producer_open(f->name, 0, &f->w), 0);
}

static void pgp_close(struct pgp *f)
{
	assert_int_equal(v05_producer_close(f->w), 0);
	assert_int_equal(v05_plugin_close(f->p, V05_CLOSE_UNLINK), 0);
}

static uint64_t pgp_ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	assert_int_equal(v05_counters(p, v, V05_COUNTER_SLOTS),
			 V05_COUNTER_SLOTS);
	return v[c];
}

/* A reward of prompt i's sample: +1 with its true probability, by a
 * fixed stream. */
static float reward(struct pgp *f, uint32_t i)
{
	uint64_t x = ++f->draws * 0x9e3779b97f4a7c15ull;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (double)(x >> 11) / 9007199254740992.0 < f->truth[i] ? 1.0f :
								       -1.0f;
}

/* Submit batch `tag` of N prompts, the i-th with truth[i] and prior
 * 2 truth[i] - 1 (prior[i] if given); answer every SAMPLE until every
 * prompt is final; count first-wave sizes (bit n of *sizes) and the
 * DROPs with k = 0. Returns the SAMPLE decisions submit handed out. */
static int pgp_batch(struct pgp *f, const char *tag, const double *prior,
		     uint32_t *sizes, uint32_t *skipped)
{
	struct v05_prompt_in in[N];
	char uids[N][24];
	uint32_t finals = 0;
	int m, first;

	for (uint32_t i = 0; i < N; i++) {
		snprintf(uids[i], sizeof(uids[i]), "%s-%u", tag, i);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = prior ? prior[i] : 2.0 * f->truth[i] - 1.0;
	}
	first = m = v05_submit(f->p, in, N, f->d, NULL);
	assert_true(m >= 0);
	for (int j = 0; j < m; j++)
		*sizes |= 1u << f->d[j].k;
	while (finals < N) {
		for (int j = 0; j < m; j++) {
			struct v05_decision *d = &f->d[j];
			char uid[24] = "";
			uint32_t i;

			assert_true(v05_slot_uid(f->p, d->slot, uid,
						 sizeof(uid) - 1) >= 0);
			i = (uint32_t)strtoul(strrchr(uid, '-') + 1, NULL, 10);
			if (d->kind == V05_DECISION_SAMPLE) {
				for (uint32_t s = 0; s < 64; s++)
					if (d->samples >> s & 1)
						assert_int_equal(v05_producer_push(
							f->w, d->key, d->gen, s,
							reward(f, i)), 0);
				continue;
			}
			assert_true(d->kind == V05_DECISION_FINAL ||
				    d->kind == V05_DECISION_DROP);
			if (d->k == 0) {
				assert_int_equal(d->kind, V05_DECISION_DROP);
				assert_true(d->baseline == in[i].prior);
				(*skipped)++;
			}
			assert_int_equal(v05_release(f->p, d->slot, d->gen,
						     d->key), 0);
			finals++;
		}
		m = v05_poll(f->p, f->d, 4 * N);
		assert_true(m >= 0);
	}
	return first;
}

/* Truths spread over (0.05, 0.95); the fit learns the priors are right. */
static void pgp_warm(struct pgp *f)
{
	uint32_t sizes = 0, skipped = 0;

	for (uint32_t i = 0; i < N; i++)
		f->truth[i] = 0.05 + 0.9 * i / (N - 1.0);
	/* The fit's cold start, then batches whose prompts fold into the
	 * rule's sums at submit, under the warm fit: 32 prompts' weight or
	 * more, forgetting aside. */
	assert_int_equal(pgp_batch(f, "w0", NULL, &sizes, &skipped), N);
	assert_int_equal(sizes, 1u << f->c.params.k_init);
	pgp_batch(f, "w1", NULL, &sizes, &skipped);
	pgp_batch(f, "w2", NULL, &sizes, &skipped);
	assert_int_equal(skipped, 0);
	assert_true(f->p->fit->pg.weight >= 32.0);
}

/* Half the batch hopeless by a sure prior: skipped, each its DROP. */
static void test_skip_through_the_plugin(void **state)
{
	double prior[N];
	uint32_t sizes = 0, skipped = 0;
	struct pgp f;
	int m;

	(void)state;
	memset(&f, 0, sizeof(f));
	pgp_config(&f, PGP_SKIP);
	pgp_open(&f, "pg-skip");
	pgp_warm(&f);
	for (uint32_t i = 0; i < N; i++) {
		f.truth[i] = i % 2 ? 0.0005 : 0.1 + 0.8 * i / N;
		prior[i] = 2.0 * f.truth[i] - 1.0;
	}
	m = pgp_batch(&f, "b", prior, &sizes, &skipped);
	assert_int_equal(skipped, N / 2);
	assert_int_equal(m, N - N / 2);
	assert_int_equal(pgp_ctr(f.p, V05_C_PROMPTS_SKIPPED), N / 2);
	assert_int_equal(pgp_ctr(f.p, V05_C_K_HIST + 0), N / 2);
	/* Only the sizes pg_first allows. */
	assert_int_equal(sizes & ~f.c.pg_first & ~(1u << f.c.params.k_init), 0);
	/* Every slot released: the segment takes a full batch again. */
	assert_int_equal(pgp_ctr(f.p, V05_C_PROMPTS_OPEN), 0);
	assert_int_equal(pgp_ctr(f.p, V05_C_PROMPTS_FINAL), 0);
	pgp_close(&f);

	/* Without the skip the same prompts are all taken. */
	memset(&f, 0, sizeof(f));
	pgp_config(&f, 0);
	pgp_open(&f, "pg-noskip");
	pgp_warm(&f);
	for (uint32_t i = 0; i < N; i++)
		f.truth[i] = i % 2 ? 0.0005 : 0.1 + 0.8 * i / N;
	skipped = 0;
	assert_int_equal(pgp_batch(&f, "b", prior, &sizes, &skipped), N);
	assert_int_equal(skipped, 0);
	pgp_close(&f);
}

/* Killed after the batch went live, before its skips were finished:
 * the takeover finishes them (DROP, k = 0, from v05_recover) and the
 * rest of the batch goes on. */
static void test_killed_before_the_skips(void **state)
{
	double prior[N];
	struct pgp f;
	pid_t pid;
	int st;

	(void)state;
	memset(&f, 0, sizeof(f));
	pgp_config(&f, PGP_SKIP);
	test_name(f.name, sizeof(f.name), "pg-kill");
	for (uint32_t i = 0; i < N; i++)
		prior[i] = i % 2 ? 2.0 * 0.0005 - 1.0 : 0.0;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char name[64];
		uint32_t sizes = 0, skipped = 0;

		memcpy(name, f.name, sizeof(name));
		if (v05_plugin_create(name, &f.c, &f.p) ||
		    v05_producer_open(name, 0, &f.w))
			_exit(2);
		pgp_warm(&f);
		setenv("V05_TEST_POINT", "submit.skips", 1);
		pgp_batch(&f, "b", prior, &sizes, &skipped);
		_exit(3); /* the test point kills first */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	assert_int_equal(v05_plugin_attach(f.name, 0, &f.p), 0);
	{
		uint32_t drops = 0, samples = 0;
		int m = v05_recover(f.p, f.d, 4 * N);

		assert_true(m > 0);
		for (int j = 0; j < m; j++) {
			if (f.d[j].kind == V05_DECISION_DROP && f.d[j].k == 0)
				drops++;
			if (f.d[j].kind == V05_DECISION_SAMPLE)
				samples++;
		}
		assert_int_equal(drops, N / 2);
		assert_int_equal(samples, N / 2);
		assert_int_equal(pgp_ctr(f.p, V05_C_PROMPTS_SKIPPED), N / 2);
	}
	assert_int_equal(v05_plugin_close(f.p, V05_CLOSE_UNLINK), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_skip_through_the_plugin),
		cmocka_unit_test(test_killed_before_the_skips),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
