/* SPDX-License-Identifier: MIT */
/* What an observer in another process copies while the owner moves it
 * (plugin/observer.c; the seqlocks of shm/atomics.h): a prompt looked up
 * by key (v05_observer_prompt) is never "not there" while it lives, even
 * as the owner shifts it through the table; the running fit's own part
 * (v05_observer_eb_state) is never a mix of two folds. The owner runs in
 * a forked child, so the two sides share nothing but the segment. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05/observer.h"

/* Shared between the owner (child) and the observer (parent). */
struct shared {
	uint32_t ready;     /* the segment exists                       */
	uint32_t live_gen;  /* the tracked prompt's gen while it lives  */
	uint32_t done;      /* the owner finished its rounds            */
	uint32_t read;      /* the observer took its last copy          */
	uint32_t seen;      /* copies (or lookups) the observer checked */
	struct v05_eb_state own; /* the owner's own part at the end     */
};

static struct shared *shared_map(void)
{
	void *m = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(m != MAP_FAILED);
	memset(m, 0, sizeof(struct shared));
	return m;
}

/* The owner's end: done, then wait for the observer's last look, at
 * most a minute (an observer that failed never looks). */
static void done_wait(struct shared *sh)
{
	__atomic_store_n(&sh->done, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 60000 && !__atomic_load_n(&sh->read,
						       __ATOMIC_SEQ_CST); i++)
		usleep(1000);
}

static void child_fail(const char *what, int ret)
{
	fprintf(stderr, "owner: %s: %d (%s)\n", what, ret, v05_errmsg());
	_exit(2);
}

static void submit1(struct v05_plugin *p, const char *uid, double prior,
		    struct v05_decision *d)
{
	struct v05_prompt_in in = { uid, (uint32_t)strlen(uid), prior };
	int ret = v05_submit(p, &in, 1, d, NULL);

	if (ret != 1)
		child_fail("submit", ret);
}

/* A prompt's life in the observer's eyes: its instance and progress,
 * then nothing once released. */
static void test_prompt_view(void **state)
{
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_observer *o;
	struct v05_prompt_view v;
	struct v05_decision d[8];
	uint64_t key = v05_key("v0", 2);

	(void)state;
	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_GRPO), 0);
	c.params.k_init = c.params.k_max = 4;
	c.max_prompts = 16;
	c.max_producers = 2;
	test_name(name, sizeof(name), "obs");
	assert_int_equal(v05_plugin_create(name, &c, &p), 0);
	assert_int_equal(v05_producer_open(name, 0, &w), 0);
	assert_int_equal(v05_observer_open(name, 0, &o), 0);
	assert_int_equal(v05_observer_prompt(o, key, &v), 0);
	submit1(p, "v0", 0.0, d);
	assert_int_equal(v05_observer_prompt(o, key, &v), 1);
	assert_true(v.key == key && v.gen == d[0].gen);
	assert_int_equal(v.state, V05_PROMPT_COLLECTING);
	assert_int_equal(v.issued, 0xfu);
	assert_int_equal(v.received, 0);
	assert_int_equal(v05_producer_push(w, key, d[0].gen, 2, 1.0f), 0);
	assert_int_equal(v05_poll(p, d + 1, 7), 0);
	assert_int_equal(v05_observer_prompt(o, key, &v), 1);
	assert_int_equal(v.received, 1u << 2);
	for (uint32_t s = 0; s < 4; s++)
		if (s != 2)
			assert_int_equal(v05_producer_push(w, key, d[0].gen, s,
							   0.0f), 0);
	assert_int_equal(v05_poll(p, d + 1, 7), 1);
	assert_int_equal(v05_observer_prompt(o, key, &v), 1);
	assert_int_equal(v.state, V05_PROMPT_FINAL);
	assert_int_equal(v05_release(p, d[1].slot, d[1].gen, d[1].key), 0);
	assert_int_equal(v05_observer_prompt(o, key, &v), 0);
	assert_int_equal(v05_observer_prompt(NULL, key, &v), -EINVAL);
	assert_int_equal(v05_observer_prompt(o, key, NULL), -EINVAL);
	/* Not v05-eb: no running fit to copy. */
	{
		struct v05_eb_state st;

		assert_int_equal(v05_observer_eb_state(o, &st), -EINVAL);
		assert_non_null(strstr(v05_errmsg(), "stream"));
	}
	assert_int_equal(v05_observer_close(o), 0);
	assert_int_equal(v05_producer_close(w), 0);
	assert_int_equal(v05_plugin_close(p, V05_CLOSE_UNLINK), 0);
}

#define BLOCKERS 6
/* Rounds until the observer has checked this many lookups (or copies),
 * and at most this many rounds. */
#define WANT_SEEN 20000u
#define MAX_ROUNDS 2000000

/* uids whose keys have the table home h (the first one's if h is ~0). */
static uint32_t colliding(const struct v05_plugin *p, uint32_t *h,
			  char uids[][16], uint32_t n, char tag)
{
	uint32_t got = 0;

	for (uint32_t i = 0; got < n; i++) {
		uint64_t k;

		snprintf(uids[got], sizeof(uids[0]), "%c%u", tag, i);
		k = v05_key(uids[got], (uint32_t)strlen(uids[got]));
		if (*h == ~0u)
			*h = (uint32_t)k & p->table.mask;
		if (((uint32_t)k & p->table.mask) == *h)
			got++;
	}
	return got;
}

/*
 * The owner: each round, blockers of the tracked prompt's home first,
 * then the prompt (behind them on its probe path), then the blockers
 * cancelled one batch each: every delete shifts the prompt back toward
 * its home, a move a lookup can overlap. live_gen says when it lives.
 */
static void owner_moves(const char *name, struct shared *sh)
{
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_decision d[4];
	char blk[BLOCKERS][16], trk[1][16];
	uint64_t batches[BLOCKERS];
	uint32_t h = ~0u;
	int ret;

	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_GRPO), 0);
	c.params.k_init = c.params.k_max = 2;
	c.max_prompts = 16;
	c.max_batches = 2 * BLOCKERS;
	if ((ret = v05_plugin_create(name, &c, &p)))
		child_fail("create", ret);
	colliding(p, &h, trk, 1, 't');
	colliding(p, &h, blk, BLOCKERS, 'b');
	__atomic_store_n(&sh->ready, 1, __ATOMIC_SEQ_CST);
	for (int r = 0; r < MAX_ROUNDS &&
	     __atomic_load_n(&sh->seen, __ATOMIC_SEQ_CST) < WANT_SEEN; r++) {
		uint64_t tb;

		for (int i = 0; i < BLOCKERS; i++) {
			submit1(p, blk[i], 0.0, d);
			batches[i] = d[0].batch;
		}
		submit1(p, trk[0], 0.0, d);
		tb = d[0].batch;
		__atomic_store_n(&sh->live_gen, d[0].gen, __ATOMIC_SEQ_CST);
		for (int i = 0; i < BLOCKERS; i++)
			if ((ret = v05_cancel(p, batches[i])) != 1)
				child_fail("cancel a blocker", ret);
		__atomic_store_n(&sh->live_gen, 0u, __ATOMIC_SEQ_CST);
		if ((ret = v05_cancel(p, tb)) != 1)
			child_fail("cancel the prompt", ret);
	}
	done_wait(sh);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	_exit(0);
}

static void test_prompt_seen_while_moved(void **state)
{
	char name[64];
	struct shared *sh = shared_map();
	struct v05_observer *o;
	struct v05_prompt_view v;
	uint64_t key = v05_key("t0", 2);
	unsigned long looked = 0, again = 0;
	int status;
	pid_t pid;

	(void)state;
	test_name(name, sizeof(name), "obsmv");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		owner_moves(name, sh);
	while (!__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST))
		usleep(1000);
	assert_int_equal(v05_observer_open(name, 0, &o), 0);
	while (!__atomic_load_n(&sh->done, __ATOMIC_SEQ_CST)) {
		uint32_t g1 = __atomic_load_n(&sh->live_gen, __ATOMIC_SEQ_CST);
		int ret = v05_observer_prompt(o, key, &v);
		uint32_t g2 = __atomic_load_n(&sh->live_gen, __ATOMIC_SEQ_CST);

		if (ret == -EAGAIN) {
			again++;
			continue;
		}
		assert_true(ret == 0 || ret == 1);
		if (g1 == 0 || g1 != g2)
			continue; /* not alive for the whole lookup */
		looked++;
		__atomic_store_n(&sh->seen, (uint32_t)looked, __ATOMIC_SEQ_CST);
		/* Alive throughout: found, and as that instance. */
		if (ret != 1)
			fail_msg("lookup %lu: the prompt was not found while it lived (gen %u)",
				 looked, g1);
		assert_int_equal(v.gen, g1);
		assert_int_equal(v.key, key);
	}
	__atomic_store_n(&sh->read, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(v05_observer_close(o), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	print_message("lookups while alive: %lu, asked again: %lu\n", looked,
		      again);
	assert_true(looked >= WANT_SEEN);
	munmap(sh, sizeof(*sh));
}

/*
 * The same move, the owner stopped inside it (the test point in table.c's
 * entry_move: the destination's key cleared, the entry not yet written):
 * a hole on the prompt's probe path. Every lookup made there must say
 * "ask again", never "not there"; once the owner goes on, found.
 */
static void owner_one_round(const char *name, struct shared *sh,
			    int w, int r)
{
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_decision d[4];
	char blk[BLOCKERS][16], trk[1][16];
	uint64_t batches[BLOCKERS];
	uint32_t h = ~0u;
	char spec[32];
	int ret;

	v05_config_default(&c);
	assert_int_equal(v05_config_mode(&c, V05_MODE_GRPO), 0);
	c.params.k_init = c.params.k_max = 2;
	c.max_prompts = 16;
	c.max_batches = 2 * BLOCKERS;
	if ((ret = v05_plugin_create(name, &c, &p)))
		child_fail("create", ret);
	colliding(p, &h, trk, 1, 't');
	colliding(p, &h, blk, BLOCKERS, 'b');
	for (int i = 0; i < BLOCKERS; i++) {
		submit1(p, blk[i], 0.0, d);
		batches[i] = d[0].batch;
	}
	submit1(p, trk[0], 0.0, d);
	__atomic_store_n(&sh->live_gen, d[0].gen, __ATOMIC_SEQ_CST);
	/* Every move from here on stops until the observer says go. */
	snprintf(spec, sizeof(spec), "fd:%d:%d", w, r);
	setenv("V05_TEST_POINT_ACTION", spec, 1);
	setenv("V05_TEST_POINT", "table_move", 1);
	for (int i = 0; i < BLOCKERS; i++)
		if ((ret = v05_cancel(p, batches[i])) != 1)
			child_fail("cancel a blocker", ret);
	unsetenv("V05_TEST_POINT");
	close(w);
	done_wait(sh);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	_exit(0);
}

static void test_prompt_lookup_inside_a_move(void **state)
{
	char name[64];
	struct shared *sh = shared_map();
	struct v05_observer *o = NULL;
	struct v05_prompt_view v;
	uint64_t key = v05_key("t0", 2);
	int up[2], down[2], status, stops = 0;
	char b = 'g';
	pid_t pid;

	(void)state;
	/* Test points are in builds with debug info (meson.build), which
	 * every test build is. */
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	test_name(name, sizeof(name), "obsmv1");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		owner_one_round(name, sh, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	/* A stop per move, until the owner is past the cancels. */
	while (read(up[0], &b, 1) == 1) {
		if (!o)
			assert_int_equal(v05_observer_open(name, 0, &o), 0);
		stops++;
		assert_int_equal(v05_observer_prompt(o, key, &v), -EAGAIN);
		assert_non_null(strstr(v05_errmsg(), "ask again"));
		assert_int_equal(write(down[1], &b, 1), 1);
	}
	assert_true(stops >= 1);
	assert_int_equal(v05_observer_prompt(o, key, &v), 1);
	assert_int_equal(v.gen, sh->live_gen);
	__atomic_store_n(&sh->read, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(v05_observer_close(o), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	print_message("moves stopped in: %d\n", stops);
	close(up[0]);
	close(down[1]);
	munmap(sh, sizeof(*sh));
}

/* The owner folds first waves (v05-eb, stream) as fast as it can, then
 * leaves its own part in the shared page for the observer to compare. */
static void owner_folds(const char *name, struct shared *sh, uint32_t window)
{
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[64];
	int ret;

	v05_config_default(&c);
	c.params.k_init = 4;
	c.params.k_max = 4; /* first waves only: every group final at once */
	c.pad_multiple = 1;
	c.eb_window = window;
	c.eb_cold = 1;
	c.max_prompts = 64;
	c.max_producers = 2;
	if ((ret = v05_plugin_create(name, &c, &p)) ||
	    (ret = v05_producer_open(name, 0, &w)))
		child_fail("create", ret);
	__atomic_store_n(&sh->ready, 1, __ATOMIC_SEQ_CST);
	for (uint32_t r = 0; r < MAX_ROUNDS &&
	     __atomic_load_n(&sh->seen, __ATOMIC_SEQ_CST) < WANT_SEEN; r++) {
		char uid[16];
		int n;

		snprintf(uid, sizeof(uid), "f%u", r);
		submit1(p, uid, (double)(r % 7) / 4.0 - 0.75, d);
		for (uint32_t s = 0; s < 4; s++)
			v05_producer_push(w, d[0].key, d[0].gen, s,
					  (r >> s) & 1 ? 1.0f : -1.0f);
		n = v05_poll(p, d, 64);
		for (int i = 0; i < n; i++)
			if (d[i].kind == V05_DECISION_FINAL ||
			    d[i].kind == V05_DECISION_DROP)
				v05_release(p, d[i].slot, d[i].gen, d[i].key);
	}
	if ((ret = v05_eb_state_get(p, &sh->own)))
		child_fail("eb_state_get", ret);
	done_wait(sh);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	_exit(0);
}

/* What `folded` first waves weigh under eb_window w (each fold keeps
 * 1 - 1/w of the weight and adds 1): a copy mixing two folds' words
 * says otherwise. */
static double weight_of(uint64_t folded, uint32_t w)
{
	return w * (1.0 - pow(1.0 - 1.0 / w, (double)folded));
}

static void test_own_part_whole(void **state)
{
	char name[64];
	struct shared *sh = shared_map();
	struct v05_observer *o;
	struct v05_eb_state st;
	uint64_t last = 0;
	unsigned long copies = 0, again = 0;
	const uint32_t window = 64;
	int status, ret;
	pid_t pid;

	(void)state;
	test_name(name, sizeof(name), "obseb");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		owner_folds(name, sh, window);
	while (!__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST))
		usleep(1000);
	assert_int_equal(v05_observer_open(name, 0, &o), 0);
	while (!__atomic_load_n(&sh->done, __ATOMIC_SEQ_CST)) {
		ret = v05_observer_eb_state(o, &st);
		if (ret == -EAGAIN) {
			again++;
			continue;
		}
		assert_int_equal(ret, 0);
		copies++;
		__atomic_store_n(&sh->seen, (uint32_t)copies, __ATOMIC_SEQ_CST);
		assert_true(st.folded >= last);
		last = st.folded;
		if (fabs(st.weight - weight_of(st.folded, window)) >
		    1e-9 * window)
			fail_msg("copy %lu: weight %.17g is not what %llu folds weigh (%.17g): a torn copy",
				 copies, st.weight, (unsigned long long)st.folded,
				 weight_of(st.folded, window));
	}
	/* At rest: exactly the owner's own part. */
	assert_int_equal(v05_observer_eb_state(o, &st), 0);
	assert_memory_equal(&st, &sh->own, sizeof(st));
	assert_true(st.folded > 0);
	__atomic_store_n(&sh->read, 1, __ATOMIC_SEQ_CST);
	assert_int_equal(v05_observer_close(o), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	print_message("copies while folding: %lu, asked again: %lu\n", copies,
		      again);
	assert_true(copies >= WANT_SEEN);
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prompt_view),
		cmocka_unit_test(test_prompt_seen_while_moved),
		cmocka_unit_test(test_prompt_lookup_inside_a_move),
		cmocka_unit_test(test_own_part_whole),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
