/* SPDX-License-Identifier: MIT */
/* Completion and release rings: order, full ring, one reader at a time,
 * and a dead reader's claim freed with its last releases applied. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/shm.h"

struct got {
	uint32_t slot[64], gen[64], n;
};

static void on_release(void *ctx, uint32_t slot, uint32_t gen)
{
	struct got *g = ctx;

	g->slot[g->n] = slot;
	g->gen[g->n] = gen;
	g->n++;
}

static void test_roundtrip(void **state)
{
	struct v05_geometry geo = test_geometry(1, 16, 8, 4); /* rings: 16 */
	struct v05_segment seg, rseg;
	struct v05_completions c;
	struct v05_reader_rings r, r2;
	struct v05_completion e;
	struct got got = { .n = 0 };
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "compl");
	assert_int_equal(v05__segment_create(name, &geo, NULL, 0, 0600, &seg), 0);
	v05__completions_init(&c, &seg);
	assert_true(v05__completions_reader(&c) == 0);
	for (uint32_t i = 0; i < 16; i++)
		assert_int_equal(v05__completion_push(&c, 100 + i, i % 8, i), 0);
	assert_int_equal(v05__completion_push(&c, 1, 1, 1), -EAGAIN);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_READER, 0, &rseg), 0);
	assert_int_equal(v05__reader_claim(&rseg, &r), 0);
	assert_true(v05__completions_reader(&c) == v05__owner_self());
	assert_int_equal(v05__reader_claim(&rseg, &r2), -EBUSY);
	for (uint32_t i = 0; i < 16; i++) {
		assert_int_equal(v05__reader_next(&r, &e), 1);
		assert_true(e.key == 100 + i && e.slot == i % 8 && e.gen == i);
		assert_int_equal(v05__reader_release(&r, e.slot, e.gen), 0);
	}
	assert_int_equal(v05__reader_next(&r, &e), 0);
	assert_int_equal(v05__releases_drain(&c, on_release, &got), 16);
	assert_int_equal(got.n, 16);
	assert_int_equal(got.slot[9], 1);
	assert_int_equal(got.gen[9], 9);
	assert_int_equal(v05__completion_push(&c, 1, 1, 1), 0); /* room again */
	v05__reader_unclaim(&r);
	assert_true(v05__completions_reader(&c) == 0);
	v05__segment_detach(&rseg);
	v05__segment_detach(&seg);
	assert_int_equal(v05_segment_unlink(name), 0);
}

static void test_dead_reader(void **state)
{
	struct v05_geometry geo = test_geometry(1, 16, 8, 4);
	struct v05_segment seg, rseg;
	struct v05_completions c;
	struct v05_reader_rings r;
	struct v05_completion e;
	struct got got = { .n = 0 };
	char name[64];
	pid_t pid;
	int st;

	(void)state;
	test_name(name, sizeof(name), "deadreader");
	assert_int_equal(v05__segment_create(name, &geo, NULL, 0, 0600, &seg), 0);
	v05__completions_init(&c, &seg);
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(v05__completion_push(&c, i, i, 1), 0);
	pid = fork();
	if (pid == 0) {
		struct v05_segment s;
		struct v05_reader_rings rr;
		struct v05_completion ce;

		if (v05__segment_attach(name, V05_ROLE_READER, 0, &s) ||
		    v05__reader_claim(&s, &rr))
			_exit(1);
		/* Read two, release one, die holding the claim. */
		if (v05__reader_next(&rr, &ce) != 1 ||
		    v05__reader_next(&rr, &ce) != 1 ||
		    v05__reader_release(&rr, ce.slot, ce.gen))
			_exit(2);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_false(v05__owner_alive(v05__completions_reader(&c)));
	assert_int_equal(v05__segment_attach(name, V05_ROLE_READER, 0, &rseg), 0);
	assert_int_equal(v05__reader_claim(&rseg, &r), -EBUSY);
	/* The plugin applies the dead reader's release and frees the claim;
	 * the three completions it never read are dropped (the plugin
	 * republishes unreleased slots itself). */
	assert_int_equal(v05__completions_reset(&c, on_release, &got), 1);
	assert_int_equal(got.slot[0], 1);
	assert_int_equal(v05__reader_claim(&rseg, &r), 0);
	assert_int_equal(v05__reader_next(&r, &e), 0);
	assert_int_equal(v05__completion_push(&c, 9, 4, 2), 0);
	assert_int_equal(v05__reader_next(&r, &e), 1);
	assert_true(e.key == 9);
	v05__reader_unclaim(&r);
	v05__segment_detach(&rseg);
	v05__segment_detach(&seg);
	assert_int_equal(v05_segment_unlink(name), 0);
}

/*
 * A reader dies after writing one bad word into a ring index it can reach.
 * The plugin's reset must restore every index of both rings, so the next
 * reader gets what is published after it (not 0 forever).
 */
static void test_dead_reader_bad_word(void **state)
{
	(void)state;
	for (int which = 0; which < 4; which++) {
		struct v05_geometry geo = test_geometry(1, 16, 8, 4);
		struct v05_segment seg, rseg;
		struct v05_completions c;
		struct v05_reader_rings r;
		struct v05_completion e;
		struct got got = { .n = 0 };
		char name[64];
		pid_t pid;
		int st;

		test_name(name, sizeof(name), "badword");
		assert_int_equal(v05__segment_create(name, &geo, NULL, 0, 0600,
						     &seg), 0);
		v05__completions_init(&c, &seg);
		for (uint32_t i = 0; i < 3; i++)
			assert_int_equal(v05__completion_push(&c, i + 1, i, 1), 0);
		pid = fork();
		if (pid == 0) {
			struct v05_segment s;
			struct v05_reader_rings rr;
			struct v05_completion ce;

			if (v05__segment_attach(name, V05_ROLE_READER, 0, &s) ||
			    v05__reader_claim(&s, &rr) ||
			    v05__reader_next(&rr, &ce) != 1)
				_exit(1);
			/* One stray 4-byte store, then death. */
			switch (which) {
			case 0: rr.ch->tail = 0x7fff0000u; break;
			case 1: rr.ch->head = 0x7fff0000u; break;
			case 2: rr.rh->head = 0x7fff0000u; break;
			default: rr.rh->tail = 0x7fff0000u; break;
			}
			_exit(0);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		v05__completions_reset(&c, on_release, &got);
		assert_int_equal(v05__segment_attach(name, V05_ROLE_READER, 0,
						     &rseg), 0);
		assert_int_equal(v05__reader_claim(&rseg, &r), 0);
		/* What the plugin publishes now reaches the new reader... */
		assert_int_equal(v05__completion_push(&c, 77, 5, 3), 0);
		assert_int_equal(v05__reader_next(&r, &e), 1);
		assert_true(e.key == 77 && e.slot == 5 && e.gen == 3);
		/* ...and its release reaches the plugin. */
		assert_int_equal(v05__reader_release(&r, e.slot, e.gen), 0);
		got.n = 0;
		assert_int_equal(v05__releases_drain(&c, on_release, &got), 1);
		assert_true(got.slot[0] == 5 && got.gen[0] == 3);
		v05__reader_unclaim(&r);
		v05__segment_detach(&rseg);
		v05__segment_detach(&seg);
		assert_int_equal(v05_segment_unlink(name), 0);
	}
}

/* A reader whose ring shows an impossible fill says so instead of
 * returning "nothing" for ever. */
static void test_reader_impossible_index(void **state)
{
	struct v05_geometry geo = test_geometry(1, 16, 8, 4);
	struct v05_segment seg, rseg;
	struct v05_completions c;
	struct v05_reader_rings r;
	struct v05_completion e;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "impossible");
	assert_int_equal(v05__segment_create(name, &geo, NULL, 0, 0600, &seg), 0);
	v05__completions_init(&c, &seg);
	assert_int_equal(v05__segment_attach(name, V05_ROLE_READER, 0, &rseg), 0);
	assert_int_equal(v05__reader_claim(&rseg, &r), 0);
	/* A transient bad tail (the plugin's next publish rewrites it): the
	 * reader re-reads instead of trusting its cached copy. */
	r.ch->tail = 0x7fff0000u;
	assert_true(v05__reader_next(&r, &e) <= 0);
	assert_int_equal(v05__completion_push(&c, 5, 1, 1), 0);
	assert_int_equal(v05__reader_next(&r, &e), 1);
	assert_true(e.key == 5);
	/* A bad tail that stays: an error, not a silent 0. */
	r.ch->tail = 0x7fff0000u;
	assert_int_equal(v05__reader_next(&r, &e), -EIO);
	v05__reader_unclaim(&r);
	v05__segment_detach(&rseg);
	v05__segment_detach(&seg);
	assert_int_equal(v05_segment_unlink(name), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_dead_reader),
		cmocka_unit_test(test_dead_reader_bad_word),
		cmocka_unit_test(test_reader_impossible_index),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
