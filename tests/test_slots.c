/* SPDX-License-Identifier: MIT */
/* Final groups: zero-copy views, release identity, late rewards, the two
 * holders (engine and a reader in another process), a reader's death, the
 * support buffer. */
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

static void test_zero_copy_views(void **state)
{
	static const double priors[1] = { -0.5 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_group g;
	uint64_t keys[1], roff, aoff;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	submit(f, priors, 1, keys);
	push_samples(f, keys[0], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	assert_int_equal(v05_group(f->p, f->d[0].slot, &g), 0);
	assert_int_equal(v05_slot_offsets(f->p, g.slot, &roff, &aoff), 0);
	/* The view is the segment itself, rewards and advantages beside. */
	assert_ptr_equal(g.rewards, f->p->seg.base + roff);
	assert_ptr_equal(g.advantages, f->p->seg.base + aoff);
	assert_true(aoff - roff == 64); /* k_max 16 floats */
	assert_int_equal(v05_group(f->p, 9999, &g), -EINVAL);
	assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen, f->d[0].key), 0);
	assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen, f->d[0].key), -EALREADY);
	assert_int_equal(v05_group(f->p, f->d[0].slot, &g), -EAGAIN);
	fx_close(f);
	free(f);
}

/*
 * Release checks the decision's identity: a stale decision whose slot now
 * holds another prompt, and another plugin's decision, are refused and
 * free nothing.
 */
static void test_release_identity(void **state)
{
	static const double priors[1] = { 0.0 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f)), *o = calloc(1, sizeof(*o));
	struct v05_decision stale, fresh;
	struct v05_group g;
	uint64_t keys[1], okeys[1];

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	f->c.max_prompts = 1; /* one slot: the resubmit reuses it */
	fx_open(f);
	assert_int_equal(submit(f, priors, 1, keys), 1);
	push_samples(f, keys[0], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	stale = f->d[0];
	assert_int_equal(stale.kind, V05_DECISION_FINAL);
	assert_int_equal(v05_release(f->p, stale.slot, stale.gen, stale.key), 0);
	/* The same uid again, in the same slot, a new generation. */
	assert_int_equal(submit(f, priors, 1, keys), 1);
	assert_int_equal(f->d[0].slot, stale.slot);
	assert_true(f->d[0].gen != stale.gen);
	push_samples(f, keys[0], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	fresh = f->d[0];
	/* The stale decision is refused and the new group stays. */
	assert_int_equal(v05_release(f->p, stale.slot, stale.gen, stale.key),
			 -ESTALE);
	assert_int_equal(v05_group(f->p, fresh.slot, &g), 0);
	assert_true(g.key == fresh.key && g.gen == fresh.gen);

	/* Another plugin, same uid, same slot number. */
	fx_config(o);
	o->c.params.mode = V05_MODE_V05_FIXED;
	o->c.max_prompts = 1;
	fx_open(o);
	assert_int_equal(submit(o, priors, 1, okeys), 1);
	push_samples(o, okeys[0], 0xf, r);
	assert_int_equal(v05_poll(o->p, o->d, MAXD), 1);
	assert_int_equal(o->d[0].slot, fresh.slot);
	assert_true(okeys[0] == keys[0]);
	assert_int_equal(v05_release(o->p, fresh.slot, fresh.gen, fresh.key),
			 -ESTALE);
	assert_int_equal(v05_group(o->p, o->d[0].slot, &g), 0);
	assert_int_equal(v05_release(o->p, o->d[0].slot, o->d[0].gen,
				     o->d[0].key), 0);
	assert_int_equal(v05_release(f->p, fresh.slot, fresh.gen, fresh.key), 0);
	assert_int_equal(v05_release(f->p, fresh.slot, fresh.gen, fresh.key),
			 -EALREADY);
	fx_close(o);
	fx_close(f);
	free(o);
	free(f);
}

/*
 * A late reward for a uid that was released and submitted again: pushed
 * before the new instance existed, it is refused as late, not credited to
 * the new instance's sample.
 */
static void test_late_reward_not_credited_to_new_instance(void **state)
{
	static const double priors[1] = { 0.0 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[1];
	uint64_t late_before;
	struct v05_prompt *e;
	uint32_t old_gen;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	assert_int_equal(submit(f, priors, 1, keys), 1);
	old_gen = f->d[0].gen;
	push_samples(f, keys[0], 0x7, r); /* samples 0..2 of 4 */
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	/* The group completes and is released. */
	assert_int_equal(v05_producer_push(f->w, keys[0], old_gen, 3, 1.0f), 0);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 1);
	assert_int_equal(v05_release(f->p, f->d[0].slot, f->d[0].gen,
				     f->d[0].key), 0);
	/* The old instance's late reward, still in flight... */
	assert_int_equal(v05_producer_push(f->w, keys[0], old_gen, 1, -1.0f), 0);
	/* ...is drained only after the uid was submitted again. Submit
	 * without polling first: add the prompt through v05_submit only.
	 * Then another late one, pushed after the new submit (only the
	 * generation tells the instances apart), and the new instance's own
	 * reward for the same sample, which must go through. */
	{
		struct v05_prompt_in in = { "u0", 2, 0.0 };
		struct v05_decision d[1];

		assert_int_equal(v05_submit(f->p, &in, 1, d, NULL), 1);
		assert_true(d[0].gen != old_gen);
		assert_int_equal(v05_producer_push(f->w, keys[0], old_gen, 2,
						   -1.0f), 0);
		assert_int_equal(v05_producer_push(f->w, keys[0], d[0].gen, 0,
						   1.0f), 0);
	}
	late_before = ctr(f, V05_C_REJ_LATE);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 0);
	assert_int_equal(ctr(f, V05_C_REJ_LATE), late_before + 2);
	e = v05__table_find(&f->p->table, keys[0]);
	/* Nothing of the old instance credited to the new one; its own
	 * reward is. */
	assert_true(e != NULL && e->received == 0x1);
	fx_close(f);
	free(f);
}

static int reader_child(const char *name, uint32_t want, const double *priors,
			const uint64_t *keys, int go)
{
	struct v05_reader *r = NULL;
	struct v05_params params;
	uint32_t got = 0;
	char c;

	v05_params_default(&params);
	/* The plugin may not have the reader ring yet: retry the claim only
	 * while it answers busy. */
	while (v05_reader_open(name, 0, &r) == -EBUSY)
		;
	if (!r)
		return 1;
	/* Read nothing until the engine has released every group. */
	if (read(go, &c, 1) != 1)
		return 6;
	while (got < want) {
		struct v05_group g;
		struct v05_estimate e;
		double rw[64], adv[64];
		int i;

		if (v05_reader_next(r, &g) != 1)
			continue;
		for (i = 0; i < 8 && keys[i] != g.key; i++)
			;
		if (i == 8)
			return 5;
		for (uint32_t s = 0; s < g.k; s++)
			rw[s] = g.rewards[s];
		if (v05_estimate(&params, priors[i], rw, g.k, &e, adv) ||
		    e.baseline != g.baseline)
			return 2;
		for (uint32_t s = 0; s < g.k; s++)
			if ((float)adv[s] != g.advantages[s])
				return 3;
		if (v05_reader_release(r, &g))
			return 4;
		got++;
	}
	return v05_reader_close(r);
}

/*
 * A final group has two holders, the engine and the reader: the engine's
 * release leaves the slot to the reader (its values intact), the reader's
 * release then frees it.
 */
static void test_reader_other_process(void **state)
{
	double priors[8];
	static const float r[64] = { 1, -1, 1, 1, -1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[8], t0;
	int go[2], n = 0, st;
	pid_t pid;

	(void)state;
	for (int i = 0; i < 8; i++)
		priors[i] = -0.7 + 0.2 * i;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	submit(f, priors, 8, keys);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	if (pid == 0)
		_exit(reader_child(f->name, 8, priors, keys, go[0]));
	/* Wait (state, not time) until the reader holds the ring. */
	while (!v05__completions_reader(&f->p->compl))
		;
	for (int i = 0; i < 8; i++)
		push_samples(f, keys[i], 0xf, r);
	while (n < 8) {
		int m = v05_poll(f->p, f->d, MAXD);

		for (int i = 0; i < m; i++)
			assert_int_equal(v05_release(f->p, f->d[i].slot,
						     f->d[i].gen, f->d[i].key), 0);
		n += m;
	}
	assert_int_equal(ctr(f, V05_C_RELEASES), 8);
	assert_int_equal(ctr(f, V05_C_PROMPTS_FINAL), 0);
	/* Released by the engine, still the reader's: not back yet. */
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts - 8);
	assert_int_equal(write(go[1], "g", 1), 1);
	t0 = v05__now_ns();
	while (f->p->arena.nfree < f->c.max_prompts &&
	       v05__now_ns() - t0 < 10000000000ull) {
		v05_poll(f->p, f->d, MAXD);
		v05_wait(f->p, 10);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(ctr(f, V05_C_COMPLETIONS), 8);
	assert_int_equal(ctr(f, V05_C_READER_RELEASES), 8);
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts); /* all back */
	close(go[0]);
	close(go[1]);
	fx_close(f);
	free(f);
}

/*
 * A reader that dies holding groups: it read three of six, released one.
 * The plugin applies that release, frees the claim, and the next reader
 * gets the other five (two it had read, three it had not), in group order.
 */
static int dying_reader(const char *name, int fd)
{
	struct v05_reader *r = NULL;
	struct v05_group g;
	int got = 0;

	while (v05_reader_open(name, 0, &r) == -EBUSY)
		;
	if (!r)
		return 1;
	if (write(fd, "r", 1) != 1) /* holding the ring now */
		return 2;
	while (got < 3)
		got += v05_reader_next(r, &g) == 1;
	return v05_reader_release(r, &g) ? 3 : 0; /* and die, no close */
}

static int next_reader(const char *name)
{
	struct v05_reader *r = NULL;
	struct v05_group g;
	uint64_t last = 0;
	int got = 0;

	while (v05_reader_open(name, 0, &r) == -EBUSY)
		;
	if (!r)
		return 100;
	while (got < 5) {
		if (v05_reader_next(r, &g) != 1)
			continue;
		if (g.seq <= last)
			return 101; /* out of group order */
		last = g.seq;
		if (v05_reader_release(r, &g))
			return 102;
		got++;
	}
	v05_reader_close(r);
	return got;
}

static void test_dead_reader_republish(void **state)
{
	double priors[6] = { -0.5, -0.3, -0.1, 0.1, 0.3, 0.5 };
	static const float r[64] = { 1, -1, 1, 1 };
	struct v05_decision finals[6];
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t keys[6], t0;
	int go[2], st, n = 0;
	pid_t pid;
	char c;

	(void)state;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	submit(f, priors, 6, keys);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	if (pid == 0)
		_exit(dying_reader(f->name, go[1]));
	assert_int_equal(read(go[0], &c, 1), 1);
	while (!v05__completions_reader(&f->p->compl))
		;
	for (int i = 0; i < 6; i++)
		push_samples(f, keys[i], 0xf, r);
	while (n < 6) {
		int m = v05_poll(f->p, f->d, MAXD);

		for (int i = 0; i < m; i++)
			finals[n + i] = f->d[i];
		n += m;
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The plugin notices the death on a later poll (state, with a
	 * generous bound). */
	t0 = v05__now_ns();
	while (v05__completions_reader(&f->p->compl) &&
	       v05__now_ns() - t0 < 10000000000ull) {
		v05_poll(f->p, f->d, MAXD);
		v05_wait(f->p, 10);
	}
	assert_int_equal(v05__completions_reader(&f->p->compl), 0);
	assert_int_equal(ctr(f, V05_C_READER_RELEASES), 1);

	pid = fork();
	if (pid == 0)
		_exit(next_reader(f->name));
	t0 = v05__now_ns();
	while (ctr(f, V05_C_READER_RELEASES) < 6 &&
	       v05__now_ns() - t0 < 10000000000ull) {
		v05_poll(f->p, f->d, MAXD);
		v05_wait(f->p, 10);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 5);
	assert_int_equal(ctr(f, V05_C_READER_RELEASES), 6);
	assert_int_equal(ctr(f, V05_C_RELEASES_BAD), 0);
	/* Every reader is done; the engine's releases free the slots. */
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts - 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(v05_release(f->p, finals[i].slot, finals[i].gen,
					     finals[i].key), 0);
	assert_int_equal(f->p->arena.nfree, f->c.max_prompts);
	close(go[0]);
	close(go[1]);
	fx_close(f);
	free(f);
}

static void test_support_sample(void **state)
{
	double priors[40];
	static const float r[64] = { 1, -1, 1, 1 };
	struct fx *f = calloc(1, sizeof(*f));
	struct v05_support a[256], b[256], c[256];
	uint64_t keys[40];
	int n;

	(void)state;
	for (int i = 0; i < 40; i++)
		priors[i] = 0.5;
	fx_config(f);
	f->c.params.mode = V05_MODE_V05_FIXED;
	fx_open(f);
	assert_int_equal(v05_support_sample(f->p, a, 256, 1), 0);
	submit(f, priors, 40, keys);
	for (int i = 0; i < 40; i++)
		push_samples(f, keys[i], 0xf, r);
	assert_int_equal(v05_poll(f->p, f->d, MAXD), 40);
	n = v05_support_sample(f->p, a, 256, 7);
	assert_int_equal(n, 40); /* fewer than 256 finalized: all of them */
	assert_int_equal(v05_support_sample(f->p, b, 10, 7), 10);
	assert_int_equal(v05_support_sample(f->p, c, 10, 8), 10);
	assert_memory_equal(a, b, 10 * sizeof(a[0])); /* seeded */
	assert_memory_not_equal(b, c, 10 * sizeof(b[0]));
	for (int i = 0; i < n; i++) {
		assert_true(a[i].mean == 0.5f && a[i].k == 4);
		assert_true(find(keys, 40, a[i].key) >= 0);
		for (int j = 0; j < i; j++)
			assert_true(a[i].key != a[j].key); /* no repeats */
	}
	fx_close(f);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zero_copy_views),
		cmocka_unit_test(test_release_identity),
		cmocka_unit_test(test_late_reward_not_credited_to_new_instance),
		cmocka_unit_test(test_reader_other_process),
		cmocka_unit_test(test_dead_reader_republish),
		cmocka_unit_test(test_support_sample),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
