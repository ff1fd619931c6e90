/* SPDX-License-Identifier: MIT */
/*
 * The window the cut-off judges a claim on (docs/SHM.md, "Cutting a lane
 * off"): honest late rewards, every one of several whole cancelled
 * segments' worth, do not trip it; a claim is judged on lane_cut_records
 * records at least and by lane_cut_permille of them rejected; a window
 * larger than a lane's records. Producers are forked children driven over
 * pipes (tests/util/cutoff_fx.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/cutoff_fx.h"
#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

/* A batch of prompts, cancelled before any reward: all n x k rewards the
 * kid then pushes are late (unknown keys). */
static uint32_t cancelled_batch(struct v05_plugin *p, struct kid *k,
				const char *tag, uint32_t n)
{
	static struct v05_decision d[256];
	static struct v05_reward recs[256 * 16];
	uint32_t m = 0;

	cut_submit(p, tag, n, d);
	assert_int_equal(v05_cancel(p, d[0].batch), (int)n);
	for (uint32_t i = 0; i < n; i++)
		m += cut_rewards_for(&d[i], recs + m);
	cut_kid_push(k, p, recs, m);
	return m;
}

/* A batch whose rewards all land (mode v05-fixed, k_init = k_max: one
 * wave, then final). */
static uint32_t landed_batch(struct v05_plugin *p, struct kid *k,
			     const char *tag, uint32_t n)
{
	static struct v05_decision d[256], out[256];
	static struct v05_reward recs[256 * 16];
	uint32_t m = 0, finals = 0;

	cut_submit(p, tag, n, d);
	for (uint32_t i = 0; i < n; i++)
		m += cut_rewards_for(&d[i], recs + m);
	cut_kid_push(k, p, recs, m);
	while (finals < n) {
		int got = v05_poll(p, out, 256);

		assert_true(got >= 0);
		for (int i = 0; i < got; i++) {
			assert_int_equal(out[i].kind, V05_DECISION_FINAL);
			assert_int_equal(v05_release(p, out[i].slot, out[i].gen,
						     out[i].key), 0);
			finals++;
		}
	}
	return m;
}

/*
 * The honest path, with the default cut-off: a producer's rewards made late
 * by cancels are cut_rejected, yet it is not cut off, neither by three whole
 * segments' worth of late rewards in a row from its first push (every
 * sample the segment can hold, each time), nor by a cancel after every
 * batch that lands; its rewards keep being applied.
 */
static void test_honest_late_rewards_not_cut(void **state)
{
	const uint32_t n = 128, k = 16; /* 2048 samples: the segment full */
	struct v05_plugin *p;
	struct kid hk;
	char name[64], tag[32];
	uint64_t late = 0, landed = 0;

	(void)state;
	test_name(name, sizeof(name), "honest");
	p = cut_make(name, V05_MODE_V05_FIXED, n, k, k, 0);
	/* The default: 4 x max_prompts x k_max records, 90%. */
	assert_int_equal(p->cfg.lane_cut_records, 4 * n * k);
	assert_int_equal(p->cfg.lane_cut_permille, 900);
	cut_kid_start(&hk, name);
	for (int i = 0; i < 3; i++) {
		snprintf(tag, sizeof(tag), "c%d", i);
		late += cancelled_batch(p, &hk, tag, n);
	}
	for (int i = 0; i < 10; i++) {
		snprintf(tag, sizeof(tag), "l%d", i);
		landed += landed_batch(p, &hk, tag, n);
		snprintf(tag, sizeof(tag), "x%d", i);
		late += cancelled_batch(p, &hk, tag, n);
	}
	assert_int_equal(late, 13 * n * k);
	assert_int_equal(cut_ctr(p, V05_C_REJ_UNKNOWN), late);
	assert_int_equal(cut_ctr(p, V05_C_REWARDS_APPLIED), landed);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 0);
	assert_int_equal(p->seg.lane_own[hk.lane].cut_owner, 0);
	assert_int_equal(p->seg.lane_own[hk.lane].applied, landed);
	assert_int_equal(p->seg.lane_own[hk.lane].rejected, late);
	assert_int_equal(cut_kid_do(&hk, OP_CLOSE, NULL, 0).ret, 0);
	cut_kid_reap(&hk);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* Take every decision out of the queue; release the finals. */
static void release_all(struct v05_plugin *p)
{
	struct v05_decision out[64];
	int got;

	while ((got = v05_poll(p, out, 64)) > 0)
		for (int i = 0; i < got; i++)
			if (out[i].kind != V05_DECISION_SAMPLE)
				assert_int_equal(v05_release(p, out[i].slot, out[i].gen,
							     out[i].key), 0);
	assert_int_equal(got, 0);
}

/*
 * The window (minimum 100 records here): exactly 90% cut_rejected is not cut,
 * more is; and the counts are halved at twice the minimum, so a claim's
 * long honest past (1,000 records applied) does not cover a cut_flood for
 * long: it is cut within 2,000 cut_rejected records, where the whole claim's
 * fraction would pass 90% only after more than 9,000.
 */
static void test_window(void **state)
{
	struct v05_decision d[PROMPTS];
	struct v05_reward good[PROMPTS * 4], bad[LANE_CAP];
	struct v05_plugin *p;
	struct kid hk;
	char name[64], tag[32];
	uint32_t ng = 0, cut_flood = 0;
	uint64_t landed = 0;

	(void)state;
	test_name(name, sizeof(name), "window");
	p = cut_make(name, V05_MODE_V05_FIXED, PROMPTS, 4, 4, 100);
	cut_kid_start(&hk, name);
	/* 10 applied, then 90 cut_rejected: 100 records, 90% exactly: kept. */
	cut_submit(p, "a", PROMPTS, d);
	for (uint32_t i = 0; i < PROMPTS; i++)
		ng += cut_rewards_for(&d[i], good + ng);
	cut_kid_push(&hk, p, good, 10);
	cut_wrong_gens(d, PROMPTS, bad, 90);
	cut_kid_push(&hk, p, bad, 90);
	assert_int_equal(cut_ctr(p, V05_C_REJ_LATE), 90);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 0);
	cut_kid_push(&hk, p, good + 10, ng - 10);
	release_all(p);
	/* A long honest past: 31 more batches land. */
	for (int i = 0; i < 31; i++) {
		snprintf(tag, sizeof(tag), "b%d", i);
		landed += landed_batch(p, &hk, tag, PROMPTS);
	}
	assert_int_equal(cut_ctr(p, V05_C_REWARDS_APPLIED), ng + landed);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 0);
	/* Then a cut_flood of cut_rejected records, 64 at a time, until cut. */
	cut_wrong_gens(d, PROMPTS, bad, 64);
	while (!cut_ctr(p, V05_C_LANES_CUT_OFF) && cut_flood < 20000) {
		cut_kid_push(&hk, p, bad, 64);
		cut_flood += 64;
	}
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_true(cut_flood < 2000);
	/* Cut on the first batch past 90% of a window of >= 100. */
	assert_true(p->seg.lane_own[hk.lane].cut_records >= 100);
	assert_true(p->seg.lane_own[hk.lane].cut_rejected * 10ull >
		    p->seg.lane_own[hk.lane].cut_records * 9ull);
	assert_int_equal(cut_kid_do(&hk, OP_CLOSE, NULL, 0).ret, 0);
	cut_kid_reap(&hk);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* A lane_cut_records above 2^31 works (the window is 64-bit): the old
 * 32-bit window halved there and could never reach it. */
static void test_big_window(void **state)
{
	struct v05_plugin *p;
	char name[64];
	struct v05_lane_own *own;

	(void)state;
	test_name(name, sizeof(name), "cutbig");
	p = cut_make(name, V05_MODE_V05, PROMPTS, 4, 16, 3000000000u);
	own = &p->seg.lane_own[0];
	/* A window just below the minimum, mostly cut_rejected: one more
	 * cut_rejected batch of 64 crosses it. */
	own->win_records = 3000000000ull - 10;
	own->win_rejected = 3000000000ull - 20;
	own->win_grant = own->grant;
	{
		struct v05_decision d[PROMPTS];
		struct v05_ring_hdr *r;
		void *m;

		cut_submit(p, "q", PROMPTS, d);
		r = cut_map_lane_file(name, 0, &m);
		raw_publish(r, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 64);
		assert_true(v05_poll(p, NULL, 0) >= 0);
		munmap(m, v05__lane_stride(LANE_CAP));
	}
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_int_equal(own->cut_records, 3000000054u);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_big_window),
		cmocka_unit_test(test_honest_late_rewards_not_cut),
		cmocka_unit_test(test_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
