/* SPDX-License-Identifier: MIT */
/*
 * The lane cut-off (docs/SHM.md, "Cutting a lane off"): a producer whose
 * records are mostly rejected (wrong gens: a producer trying gens) is cut
 * off once its claim passed the threshold: its lane is read no more (a
 * flood it publishes afterwards costs the owner no record and no wake-up),
 * its next push fails with -ECONNABORTED and a message, the owner's
 * applied count and decisions are those of a run without it, and the lane
 * is free again once it closes or dies, across a takeover too; a lane
 * nobody claimed, or whose owner word a producer keeps changing, is cut
 * all the same. The window that judges a claim: test_cutoff_window.c; a
 * brokered producer's cut and its uid's backoff: test_cutoff_broker.c.
 * Producers are forked children (a producer in the plugin's own process is
 * never cut off) driven over pipes: nothing sleeps.
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

/*
 * Drive the prompts of first[0..n) to their finals with the honest
 * producer w (in this process: never cut off), between polls; hostile,
 * when given, is called after every poll. Returns the finals, in order.
 */
static uint32_t drive(struct v05_plugin *p, struct v05_producer *w,
		      const struct v05_decision *first, uint32_t n,
		      struct final *out,
		      void (*hostile)(void *), void *hctx)
{
	struct v05_decision q[256], d[64];
	struct v05_reward recs[64];
	uint32_t nq = n, finals = 0;

	memcpy(q, first, n * sizeof(*q));
	while (finals < n) {
		int got;

		for (uint32_t i = 0; i < nq; i++) {
			uint32_t m = cut_rewards_for(&q[i], recs);

			assert_int_equal(v05_producer_push_wait(w, recs, m, 5000), (int)m);
		}
		nq = 0;
		got = v05_poll(p, d, 64);
		assert_true(got >= 0);
		if (hostile)
			hostile(hctx);
		for (int i = 0; i < got; i++) {
			struct v05_group g;

			if (d[i].kind == V05_DECISION_SAMPLE) {
				q[nq++] = d[i];
				continue;
			}
			assert_int_equal(v05_group(p, d[i].slot, &g), 0);
			out[finals].key = g.key;
			out[finals].baseline = g.baseline;
			out[finals].k = g.k;
			memcpy(out[finals].adv, g.advantages, g.k * sizeof(float));
			finals++;
			assert_int_equal(v05_release(p, d[i].slot, d[i].gen, d[i].key), 0);
		}
	}
	return finals;
}

struct hostile_ctx {
	struct kid *k;
	struct v05_plugin *p;
	uint32_t lane;
	uint64_t consumed;
	int floods;
};

/* After a cut: the kid floods its lane raw; the owner reads none of it. */
static void hostile_flood(void *arg)
{
	struct hostile_ctx *h = arg;
	struct kid_reply rep;

	if (h->floods >= 8)
		return;
	h->floods++;
	rep = cut_kid_do(h->k, OP_FLOOD, NULL, 100000);
	assert_int_equal(rep.ret, 0);
	/* Nothing to do for the owner: no wake-up, no record read. */
	assert_int_equal(v05_pending(h->p), 0);
	assert_int_equal(v05_poll(h->p, NULL, 0), 0);
	assert_int_equal(v05_load_relaxed(&h->p->seg.lane_own[h->lane].consumed),
			 h->consumed);
}

/*
 * A producer pushing wrong gens is cut off after lane_cut_records records:
 * the rest of what it pushed is never read, its next push fails with
 * -ECONNABORTED and a message, its raw floods cost nothing; the honest
 * producer's rewards cut_make exactly the finals a run without it makes; the
 * lane comes back, empty, once the hostile producer closes.
 */
static void test_wrong_gens_cut_off(void **state)
{
	struct v05_decision d[PROMPTS], dref[PROMPTS];
	struct v05_reward bad[100];
	struct final got[PROMPTS], want[PROMPTS];
	struct v05_producer *w, *wref;
	struct v05_plugin *p, *ref;
	struct hostile_ctx h;
	struct v05_lane_stat ls[3];
	struct v05_observer *o;
	struct kid_reply rep;
	struct kid hk, k2;
	char name[64], rname[64];
	uint32_t lane;

	(void)state;
	test_name(name, sizeof(name), "cut");
	test_name(rname, sizeof(rname), "cutref");
	p = cut_make(name, V05_MODE_V05, PROMPTS, 4, 16, 64);
	ref = cut_make(rname, V05_MODE_V05, PROMPTS, 4, 16, 64);
	assert_int_equal(p->cfg.lane_cut_records, 64);
	assert_int_equal(p->cfg.lane_cut_permille, 900);
	cut_submit(p, "q", PROMPTS, d);
	cut_submit(ref, "q", PROMPTS, dref);

	/* 100 records, every one with a wrong gen for a live key. */
	cut_kid_start(&hk, name);
	lane = (uint32_t)hk.lane;
	cut_wrong_gens(d, PROMPTS, bad, 100);
	rep = cut_kid_do(&hk, OP_PUSH, bad, 100);
	assert_int_equal(rep.ret, 100);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	/* Cut after the first batch of 64 (>= 64 records, all cut_rejected):
	 * the other 36 are in the lane, unread, and nothing is pending. */
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_int_equal(cut_ctr(p, V05_C_REJ_LATE), 64);
	assert_int_equal(cut_ctr(p, V05_C_REWARDS_APPLIED), 0);
	assert_int_equal(v05_load_relaxed(&p->seg.lane_own[lane].consumed), 64);
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->owner),
			 V05_OWNER_CUT);
	assert_int_equal(v05__owner_pid(p->seg.lane_own[lane].cut_owner),
			 (uint32_t)hk.pid);
	assert_int_equal(v05_pending(p), 0);
	assert_int_equal(v05_arm(p, 0), 0);
	/* What v05ctl stat and the Python stats show. */
	assert_int_equal(v05_observer_open(name, 0, &o), 0);
	assert_int_equal(v05_observer_lanes(o, ls, 3), 3);
	assert_int_equal(ls[lane].cut, 1);
	assert_int_equal(ls[lane].cut_pid, (uint32_t)hk.pid);
	assert_int_equal(ls[lane].cuts, 1);
	assert_int_equal(ls[lane].cut_records, 64);
	assert_int_equal(ls[lane].cut_rejected, 64);
	assert_int_equal(ls[lane].rejected, 64);
	assert_int_equal(ls[lane].applied, 0);
	v05_observer_close(o);

	/* Its next push fails, and says why. */
	rep = cut_kid_do(&hk, OP_PUSH, bad, 1);
	assert_int_equal(rep.ret, -ECONNABORTED);
	assert_non_null(strstr(rep.msg, "cut lane"));
	assert_non_null(strstr(rep.msg, name));

	/* The honest producer's work, while the cut one floods its lane
	 * raw after every poll: the same finals as the run without it. */
	assert_int_equal(v05_producer_open(name, 0, &w), 0);
	assert_int_equal(v05_producer_open(rname, 0, &wref), 0);
	h = (struct hostile_ctx){ &hk, p, lane, 64, 0 };
	assert_int_equal(drive(p, w, d, PROMPTS, got, hostile_flood, &h), PROMPTS);
	assert_int_equal(drive(ref, wref, dref, PROMPTS, want, NULL, NULL), PROMPTS);
	assert_true(h.floods > 0);
	for (uint32_t i = 0; i < PROMPTS; i++) {
		assert_int_equal(got[i].key, want[i].key);
		assert_int_equal(got[i].k, want[i].k);
		assert_memory_equal(&got[i].baseline, &want[i].baseline,
				    sizeof(double));
		assert_memory_equal(got[i].adv, want[i].adv,
				    got[i].k * sizeof(float));
	}
	assert_int_equal(cut_ctr(p, V05_C_REWARDS_APPLIED),
			 cut_ctr(ref, V05_C_REWARDS_APPLIED));
	assert_int_equal(cut_rejected(p), 64);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);

	/* It closes: its lane is dropped unread and free again once its
	 * uid's backoff is over (at the owner's next look at the lanes,
	 * forced here), not before. */
	rep = cut_kid_do(&hk, OP_CLOSE, NULL, 0);
	assert_int_equal(rep.ret, 0);
	cut_kid_reap(&hk);
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->quit),
			 p->seg.lane_own[lane].cut_owner);
	assert_true(p->seg.lane_own[lane].cut_until_ns > v05__now_ns());
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	assert_int_equal(p->seg.lane_own[lane].cut, 1);
	p->seg.lane_own[lane].cut_until_ns = 0; /* the backoff is over */
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->owner), 0);
	assert_int_equal(p->seg.lane_own[lane].cut_owner, 0);
	/* 36 records and the floods: at most a lane's worth is counted. */
	assert_int_equal(p->seg.lane_own[lane].discarded, LANE_CAP);
	assert_int_equal(p->seg.lane_own[lane].consumed, 64);
	assert_int_equal(cut_rejected(p), 64);

	/* The next producer gets a working lane and a window of its own. */
	cut_kid_start(&k2, name);
	{
		struct v05_decision d2[PROMPTS];
		struct v05_reward recs[PROMPTS * 4];
		uint32_t n = 0;

		cut_submit(p, "r", PROMPTS, d2);
		for (uint32_t i = 0; i < PROMPTS; i++)
			n += cut_rewards_for(&d2[i], recs + n);
		cut_kid_push(&k2, p, recs, n);
		assert_int_equal(cut_ctr(p, V05_C_REWARDS_APPLIED),
				 cut_ctr(ref, V05_C_REWARDS_APPLIED) + n);
	}
	rep = cut_kid_do(&k2, OP_CLOSE, NULL, 0);
	assert_int_equal(rep.ret, 0);
	cut_kid_reap(&k2);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);

	v05_producer_close(w);
	v05_producer_close(wref);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	v05_plugin_close(ref, V05_CLOSE_UNLINK);
}

/*
 * A cut lane stays cut across a takeover (the state is in the owner's
 * lane statistics), and comes back once its producer dies without
 * closing.
 */
static void test_cut_kept_then_freed_at_death(void **state)
{
	struct v05_decision d[PROMPTS];
	struct v05_reward bad[100];
	struct v05_plugin *p;
	struct kid_reply rep;
	struct kid hk;
	char name[64];
	uint32_t lane;

	(void)state;
	test_name(name, sizeof(name), "cutdie");
	p = cut_make(name, V05_MODE_V05, PROMPTS, 4, 16, 64);
	cut_submit(p, "q", PROMPTS, d);
	cut_kid_start(&hk, name);
	lane = (uint32_t)hk.lane;
	cut_wrong_gens(d, PROMPTS, bad, 100);
	assert_int_equal(cut_kid_do(&hk, OP_PUSH, bad, 100).ret, 100);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);

	/* A takeover: the new owner does not read the lane either. */
	assert_int_equal(v05_plugin_close(p, 0), 0);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	assert_int_equal(v05_pending(p), 0);
	assert_int_equal(v05_poll(p, NULL, 0) >= 0, 1);
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	assert_int_not_equal(p->seg.lane_own[lane].cut_owner, 0);
	assert_int_equal(p->seg.lane_own[lane].consumed, 64);
	rep = cut_kid_do(&hk, OP_PUSH, bad, 1);
	assert_int_equal(rep.ret, -ECONNABORTED);

	/* It dies without closing: freed at the next look. */
	{
		struct kid_cmd cmd = { OP_EXIT, 0 };

		cut_full_write(hk.to, &cmd, sizeof(cmd));
	}
	cut_kid_reap(&hk);
	p->seg.lane_own[lane].cut_until_ns = 0; /* the backoff is over */
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	assert_int_equal(p->seg.lane_own[lane].cut_owner, 0);
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->owner), 0);
	assert_int_equal(p->seg.lane_own[lane].discarded, 36);
	assert_int_equal(v05_pending(p), 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/*
 * A producer that never claims its lane (its owner word stays 0), or that
 * writes a new word before every batch (each would have started a new
 * window when the window was the claim's), is cut off all the same after
 * lane_cut_records records: the window is the lane's. Its cut_flood is then
 * not read.
 */
static void test_unclaimed_and_word_changing_cut(void **state)
{
	for (int variant = 0; variant < 2; variant++) {
		struct v05_decision d[PROMPTS];
		struct v05_ring_hdr *r;
		struct v05_plugin *p;
		char name[64];
		void *m;

		(void)state;
		test_name(name, sizeof(name), "cutword");
		p = cut_make(name, V05_MODE_V05, PROMPTS, 4, 16, 64);
		cut_submit(p, "q", PROMPTS, d);
		r = cut_map_lane_file(name, 2, &m);
		for (uint32_t round = 0; round < 8 && !cut_ctr(p, V05_C_LANES_CUT_OFF);
		     round++) {
			/* 0, or a new word (a pid that does not exist) each
			 * batch. */
			v05_store_release(&r->owner,
					  variant ? ((uint64_t)(0x7fff0000u + round) << 32) : 0);
			raw_publish(r, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 32);
			assert_true(v05_poll(p, NULL, 0) >= 0);
		}
		assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);
		assert_int_equal(cut_ctr(p, V05_C_REWARDS_APPLIED), 0);
		assert_int_equal(p->seg.lane_own[2].cut, 1);
		assert_int_equal(v05_load_relaxed(&r->owner), V05_OWNER_CUT);
		/* Whatever it writes now (its word back, a cut_flood) is unread. */
		v05_store_release(&r->owner, 0);
		raw_publish(r, LANE_CAP, d[0].key, d[0].gen ^ 1, 200);
		assert_int_equal(v05_pending(p), 0);
		assert_int_equal(v05_poll(p, NULL, 0), 0);
		assert_int_equal(cut_ctr(p, V05_C_REJ_LATE), 64);
		munmap(m, v05__lane_stride(LANE_CAP));
		v05_plugin_close(p, V05_CLOSE_UNLINK);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unclaimed_and_word_changing_cut),
		cmocka_unit_test(test_wrong_gens_cut_off),
		cmocka_unit_test(test_cut_kept_then_freed_at_death),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
