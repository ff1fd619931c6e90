/* SPDX-License-Identifier: MIT */
/* Prompt table and sample arena: insert/find/delete under heavy collision
 * against a reference model, the load limit, slot reuse. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/seg.h"
#include "v05-internal/shm.h"

#define CAP 256u

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	/* splitmix64: reproducible, good enough to drive a model test. */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Keys whose low bits are all equal: every one homes to the same entry. */
static uint64_t colliding_key(uint32_t i)
{
	return ((uint64_t)(i + 1) << 32) | 0x5u;
}

static void check_model(struct v05_table *t, const uint64_t *model, size_t n,
			uint64_t (*keygen)(uint32_t))
{
	uint32_t count = 0;

	for (size_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(t, keygen((uint32_t)i));

		if (model[i]) {
			assert_non_null(e);
			assert_true(e->key == model[i]);
			/* The payload moved with its key. */
			assert_true(e->issued == model[i] * 3);
			count++;
		} else {
			assert_null(e);
		}
	}
	assert_int_equal(t->count, count);
}

static void run_model(uint64_t (*keygen)(uint32_t))
{
	struct v05_prompt *mem = calloc(CAP, sizeof(*mem));
	uint64_t model[CAP / 2] = { 0 }; /* model[i]: key i present or 0 */
	struct v05_table t;

	assert_non_null(mem);
	v05__table_init(&t, mem, CAP, NULL);
	for (int step = 0; step < 20000; step++) {
		uint32_t i = (uint32_t)(rnd() % (CAP / 2));
		uint64_t key = keygen(i);
		struct v05_prompt *e;

		if (!model[i]) {
			assert_int_equal(v05__table_insert(&t, key, &e), 0);
			e->issued = key * 3;
			model[i] = key;
		} else if (rnd() & 1) {
			assert_int_equal(v05__table_insert(&t, key, &e), -EEXIST);
			assert_true(e->key == key);
		} else {
			e = v05__table_find(&t, key);
			assert_non_null(e);
			v05__table_delete(&t, e);
			model[i] = 0;
		}
		if (step % 97 == 0)
			check_model(&t, model, CAP / 2, keygen);
	}
	check_model(&t, model, CAP / 2, keygen);
	free(mem);
}

static uint64_t random_key(uint32_t i)
{
	return ((uint64_t)i * 0x9e3779b97f4a7c15ull) | 1;
}

static void test_model_random_keys(void **state)
{
	(void)state;
	run_model(random_key);
}

static void test_model_heavy_collision(void **state)
{
	(void)state;
	run_model(colliding_key);
}

/* Collisions across the wrap at the end of the array. */
static uint64_t wrapping_key(uint32_t i)
{
	return ((uint64_t)(i + 1) << 32) | (CAP - 3 + (i % 5)) % CAP;
}

static void test_model_wrap(void **state)
{
	(void)state;
	run_model(wrapping_key);
}

static void test_load_limit(void **state)
{
	struct v05_prompt *mem = calloc(16, sizeof(*mem));
	struct v05_prompt *e;
	struct v05_table t;

	(void)state;
	v05__table_init(&t, mem, 16, NULL);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(v05__table_insert(&t, colliding_key(i), &e), 0);
	assert_int_equal(v05__table_insert(&t, colliding_key(8), &e), -ENOSPC);
	assert_int_equal(v05__table_insert(&t, 0, &e), -EINVAL);
	/* Recount from memory, as a takeover does. */
	v05__table_init(&t, mem, 16, NULL);
	assert_int_equal(t.count, 8);
	free(mem);
}

static void test_arena_reuse(void **state)
{
	struct v05_geometry g = test_geometry(1, 16, 8, 16);
	struct v05_segment seg;
	struct v05_arena a;
	uint32_t slots[8], s;
	/* The counter's wrap is in the run: 0 is skipped. */
	uint32_t last_gen = UINT32_MAX - 3;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "arena");
	assert_int_equal(v05__segment_create(name, &g, NULL, 0, 0600, &seg), 0);
	assert_int_equal(v05__arena_init(&a, &seg), 0);
	a.last_gen = &last_gen;
	/* Generations: one counter over all slots, each use the next. */
	for (int i = 0; i < 8; i++) {
		assert_int_equal(v05__arena_alloc(&a, &slots[i]), 0);
		assert_int_equal(slots[i], i);
		assert_int_equal(v05__slot(&seg, slots[i])->gen,
				 i < 3 ? UINT32_MAX - 2 + (uint32_t)i :
					 (uint32_t)i - 2);
		assert_int_equal(last_gen, v05__slot(&seg, slots[i])->gen);
		v05__slot_rewards(v05__slot(&seg, slots[i]))[15] = (float)i;
		v05__slot_advantages(&seg, v05__slot(&seg, slots[i]))[0] = -1.f;
	}
	assert_int_equal(v05__arena_alloc(&a, &s), -ENOSPC);
	/* Arrays do not overlap the next slot's header. */
	for (int i = 0; i < 8; i++) {
		assert_true(v05__slot_rewards(v05__slot(&seg, slots[i]))[15] ==
			    (float)i);
		assert_int_equal(v05__slot(&seg, slots[i])->state, V05_S_ACTIVE);
	}
	v05__arena_free(&a, 3);
	v05__arena_free(&a, 5);
	assert_int_equal(v05__arena_alloc(&a, &s), 0);
	assert_int_equal(s, 5);
	assert_int_equal(v05__slot(&seg, 5)->gen, 6);
	/* Rebuilt from the states, as a takeover does: only 3 is free; the
	 * counter (in the owner's state) goes on. */
	v05__arena_fini(&a);
	assert_int_equal(v05__arena_init(&a, &seg), 0);
	a.last_gen = &last_gen;
	assert_int_equal(a.nfree, 1);
	assert_int_equal(v05__arena_alloc(&a, &s), 0);
	assert_int_equal(s, 3);
	assert_int_equal(v05__slot(&seg, 3)->gen, 7);
	v05__arena_fini(&a);
	v05__segment_detach(&seg);
	assert_int_equal(v05_segment_unlink(name), 0);
}

/*
 * The states a delete cut short by a kill can leave (table.c): a whole
 * duplicate of a moved entry, or a keyless hole in front of a probe run.
 * Repair makes every entry reachable once, its fields intact.
 */
static void fill_run(struct v05_table *t, struct v05_prompt *mem, uint32_t n)
{
	struct v05_prompt *e;

	memset(mem, 0, 16 * sizeof(*mem));
	v05__table_init(t, mem, 16, NULL);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(v05__table_insert(t, colliding_key(i), &e), 0);
		e->issued = 100 + i;
		e->slot = i;
	}
}

static void check_run(struct v05_table *t, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < n; i++) {
		struct v05_prompt *e = v05__table_find(t, colliding_key(i));

		if (!e) {
			fail_msg("key %u unreachable", i);
			return;
		}
		assert_int_equal(e->issued, 100 + i);
		assert_int_equal(e->slot, i);
	}
	assert_int_equal(t->count, n - first);
	for (uint32_t i = 0; i <= t->mask; i++)
		for (uint32_t j = i + 1; j <= t->mask; j++)
			assert_false(t->e[i].key && t->e[i].key == t->e[j].key);
}

static void test_repair_after_cut_short_delete(void **state)
{
	struct v05_prompt mem[16];
	struct v05_table t;

	(void)state;
	/* Keys 0..3 at entries 5..8. Deleting key 0 moves 1 into 5, 2 into 6,
	 * 3 into 7, then clears 8. */

	/* Killed after the first move: key 1 at 5 and at 6. */
	fill_run(&t, mem, 4);
	mem[5] = mem[6];
	assert_true(v05__table_repair(&t) > 0);
	check_run(&t, 1, 4);

	/* Killed inside the second move, the key cleared and not yet
	 * written: a hole at 6 hides keys 2 and 3 from lookups. */
	fill_run(&t, mem, 4);
	mem[5] = mem[6];
	mem[6].key = 0;
	assert_null(v05__table_find(&t, colliding_key(2)));
	assert_true(v05__table_repair(&t) > 0);
	check_run(&t, 1, 4);

	/* Killed inside the last clear: key 3 at 7 and still at 8. */
	fill_run(&t, mem, 4);
	mem[5] = mem[6];
	mem[6] = mem[7];
	mem[7] = mem[8];
	assert_true(v05__table_repair(&t) > 0);
	check_run(&t, 1, 4);

	/* Nothing cut short: nothing to do. */
	fill_run(&t, mem, 4);
	assert_int_equal(v05__table_repair(&t), 0);
	check_run(&t, 0, 4);
}

/*
 * A kill inside entry_clear (key cleared, payload not yet wiped) leaves a
 * keyless copy of a live entry. Key 0 must find nothing (a record whose
 * key is 0 would otherwise be credited to that residue), and repair must
 * wipe the residue so nothing of it is left for a later lookup.
 */
static void test_key_zero_never_matches(void **state)
{
	struct v05_prompt mem[16];
	struct v05_table t;

	(void)state;
	fill_run(&t, mem, 4);
	/* Entry 8 (key 3) cut short in its clear: payload left, key 0. */
	mem[8].key = 0;
	assert_true(mem[8].issued != 0);
	assert_null(v05__table_find(&t, 0));
	/* An empty table as well: key 0 is no key. */
	{
		struct v05_prompt empty[4];
		struct v05_table e;

		memset(empty, 0, sizeof(empty));
		v05__table_init(&e, empty, 4, NULL);
		assert_null(v05__table_find(&e, 0));
	}
	v05__table_repair(&t);
	for (uint32_t i = 0; i <= t.mask; i++) {
		if (mem[i].key == 0) {
			assert_int_equal(mem[i].issued, 0);
			assert_int_equal(mem[i].received, 0);
			assert_int_equal(mem[i].slot, 0);
			assert_int_equal(mem[i].state, 0);
		}
	}
	check_run(&t, 0, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_random_keys),
		cmocka_unit_test(test_model_heavy_collision),
		cmocka_unit_test(test_model_wrap),
		cmocka_unit_test(test_load_limit),
		cmocka_unit_test(test_arena_reuse),
		cmocka_unit_test(test_repair_after_cut_short_delete),
		cmocka_unit_test(test_key_zero_never_matches),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
