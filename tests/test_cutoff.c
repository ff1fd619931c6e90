/* SPDX-License-Identifier: MIT */
/*
 * The lane cut-off (docs/SHM.md, "Cutting a lane off"): a producer whose
 * records are mostly rejected (wrong gens: a producer trying gens) is cut
 * off once its claim passed the threshold: its lane is read no more (a
 * flood it publishes afterwards costs the owner no record and no wake-up),
 * its next push fails with -ECONNABORTED and a message, the owner's
 * applied count and decisions are those of a run without it, and the lane
 * is free again once it closes or dies, across a takeover too. Honest
 * late rewards, every one of several whole cancelled segments' worth, do
 * not trip it. Producers are forked children (a producer in the plugin's
 * own process is never cut off) driven over pipes: nothing sleeps.
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

#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define LANE_CAP 256u
#define PROMPTS 8u

/* ---- a producer in a child process, driven over two pipes --------------- */

enum kid_op {
	OP_PUSH = 1,  /* push the n records that follow (push_wait)         */
	OP_FLOOD = 2, /* publish n more records raw, as a hostile process
		       * would: through its own mapping of its lane's file  */
	OP_CLOSE = 3, /* v05_producer_close                                  */
	OP_EXIT = 4,  /* die without closing                                 */
};

struct kid_cmd {
	uint32_t op, n;
};

struct kid_reply {
	int32_t ret;
	int32_t lane;
	char msg[512];
};

struct kid {
	pid_t pid;
	int to, from;
	int lane;
};

static void full_read(int fd, void *buf, size_t len)
{
	uint8_t *b = buf;

	while (len) {
		ssize_t n = read(fd, b, len);

		if (n <= 0)
			_exit(90);
		b += n;
		len -= (size_t)n;
	}
}

static void full_write(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = write(fd, b, len);

		if (n <= 0)
			_exit(91);
		b += n;
		len -= (size_t)n;
	}
}

/* Publish n records of zeros past the lane's tail, through a mapping of
 * the lane's own file: what a producer ignoring its library can do. */
static int flood(const char *name, int lane, uint32_t n)
{
	char seg[PATH_MAX], path[PATH_MAX + 32];
	uint64_t len = v05__lane_stride(LANE_CAP);
	struct v05_ring_hdr *r;
	void *m;
	int fd;

	if (v05__segment_path(name, seg, sizeof(seg)))
		return -EINVAL;
	snprintf(path, sizeof(path), "%s:side/lane.%d", seg, lane);
	fd = open(path, O_RDWR);
	if (fd < 0)
		return -errno;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	r = V05_AT(struct v05_ring_hdr, m, v05__lane_skew((uint32_t)lane));
	v05_store_release(&r->tail, v05_load_relaxed(&r->tail) + n);
	munmap(m, len);
	return 0;
}

static void kid_main(const char *name, int in, int out)
{
	struct v05_producer *w = NULL;
	struct kid_reply rep;
	struct v05_reward *recs = malloc(LANE_CAP * sizeof(*recs));

	memset(&rep, 0, sizeof(rep));
	rep.ret = v05_producer_open(name, 0, &w);
	rep.lane = rep.ret ? -1 : v05_producer_lane(w);
	snprintf(rep.msg, sizeof(rep.msg), "%s", v05_errmsg());
	full_write(out, &rep, sizeof(rep));
	if (rep.ret || !recs)
		_exit(1);
	for (;;) {
		struct kid_cmd cmd;

		full_read(in, &cmd, sizeof(cmd));
		memset(&rep, 0, sizeof(rep));
		rep.lane = v05_producer_lane(w);
		switch (cmd.op) {
		case OP_PUSH:
			if (cmd.n > LANE_CAP)
				_exit(2);
			full_read(in, recs, cmd.n * sizeof(*recs));
			rep.ret = v05_producer_push_wait(w, recs, cmd.n, 5000);
			break;
		case OP_FLOOD:
			rep.ret = flood(name, rep.lane, cmd.n);
			break;
		case OP_CLOSE:
			rep.ret = v05_producer_close(w);
			break;
		case OP_EXIT:
			_exit(0);
		}
		snprintf(rep.msg, sizeof(rep.msg), "%s", v05_errmsg());
		full_write(out, &rep, sizeof(rep));
		if (cmd.op == OP_CLOSE)
			_exit(0);
	}
}

static void kid_start(struct kid *k, const char *name)
{
	int down[2], up[2];
	struct kid_reply rep;

	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (k->pid == 0) {
		close(down[1]);
		close(up[0]);
		kid_main(name, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	k->to = down[1];
	k->from = up[0];
	full_read(k->from, &rep, sizeof(rep));
	if (rep.ret)
		fail_msg("kid's producer_open: %d %s", rep.ret, rep.msg);
	k->lane = rep.lane;
}

static struct kid_reply kid_do(struct kid *k, uint32_t op,
			       const struct v05_reward *recs, uint32_t n)
{
	struct kid_cmd cmd = { op, n };
	struct kid_reply rep;

	full_write(k->to, &cmd, sizeof(cmd));
	if (op == OP_PUSH)
		full_write(k->to, recs, n * sizeof(*recs));
	full_read(k->from, &rep, sizeof(rep));
	return rep;
}

/* Push n records (any number) through the kid, the plugin polled between
 * chunks so that its lane has room: each chunk fits a drained lane. */
static void kid_push(struct kid *k, struct v05_plugin *p,
		     const struct v05_reward *recs, uint32_t n)
{
	for (uint32_t at = 0; at < n; at += LANE_CAP) {
		uint32_t m = n - at < LANE_CAP ? n - at : LANE_CAP;
		struct kid_reply rep = kid_do(k, OP_PUSH, recs + at, m);

		if (rep.ret != (int)m)
			fail_msg("kid push: %d %s", rep.ret, rep.msg);
		/* Drained (decisions may queue up meanwhile). */
		while (v05__lanes_pending(&p->lanes))
			assert_true(v05_poll(p, NULL, 0) >= 0);
	}
}

static void kid_reap(struct kid *k)
{
	int st;

	close(k->to);
	close(k->from);
	assert_int_equal(waitpid(k->pid, &st, 0), k->pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the plugin side ------------------------------------------------------ */

static struct v05_plugin *make_as(const char *name, uint32_t mode,
				  uint32_t prompts, uint32_t k_init,
				  uint32_t k_max, uint32_t cut_records,
				  bool broker)
{
	struct v05_plugin *p;
	struct v05_config c;

	v05_config_default(&c);
	c.params.mode = mode;
	c.params.k_init = k_init;
	c.params.k_step = k_init < k_max ? 2 : k_max;
	c.params.k_max = k_max;
	c.pad_multiple = 1;
	c.max_prompts = prompts;
	c.max_producers = 3;
	c.lane_capacity = LANE_CAP;
	c.lane_cut_records = cut_records;
	if (broker) {
		c.flags = V05_CONFIG_PRODUCER_BROKER;
		c.broker_uids[0] = 4242;
		c.n_broker_uids = 1;
	}
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

static struct v05_plugin *make(const char *name, uint32_t mode, uint32_t prompts,
			       uint32_t k_init, uint32_t k_max,
			       uint32_t cut_records)
{
	return make_as(name, mode, prompts, k_init, k_max, cut_records, false);
}

static uint64_t ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

static uint64_t rejected(struct v05_plugin *p)
{
	uint64_t v[V05_COUNTER_SLOTS], n = 0;

	v05_counters(p, v, V05_COUNTER_SLOTS);
	for (int r = V05_C_REJ_NONFINITE; r <= V05_C_REJ_CORRUPT; r++)
		n += v[r];
	return n;
}

/* The reward of (key, sample): a fixed function, so two runs agree. */
static float reward_of(uint64_t key, uint32_t s)
{
	return ((key >> (s % 61)) ^ s) & 1 ? 1.0f : -1.0f;
}

/* The records a SAMPLE decision asks for; returns how many. */
static uint32_t rewards_for(const struct v05_decision *d, struct v05_reward *out)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < 64; s++)
		if (d->samples >> s & 1)
			out[n++] = (struct v05_reward){ .key = d->key, .gen = d->gen,
							 .sample = s,
							 .reward = reward_of(d->key, s) };
	return n;
}

struct final {
	uint64_t key;
	double baseline;
	float adv[16];
	uint32_t k;
};

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
			uint32_t m = rewards_for(&q[i], recs);

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

static uint32_t submit(struct v05_plugin *p, const char *tag, uint32_t n,
		       struct v05_decision *d)
{
	struct v05_prompt_in in[256];
	static char uids[256][32];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], sizeof(uids[i]), "%s-%u", tag, i);
		in[i] = (struct v05_prompt_in){ .uid = uids[i],
						.uid_len = (uint32_t)strlen(uids[i]),
						.prior = -0.6 + 1.2 * i / n };
	}
	assert_int_equal(v05_submit(p, in, n, d, NULL), (int)n);
	return n;
}

/* Records with gens that are not the decisions' (a producer trying gens
 * for live keys): n of them over the decisions' issued samples. */
static void wrong_gens(const struct v05_decision *d, uint32_t nd,
		       struct v05_reward *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct v05_decision *x = &d[i % nd];

		out[i] = (struct v05_reward){ .key = x->key,
					      .gen = x->gen ^ (0x9e3779b9u + i),
					      .sample = (i / nd) % 4,
					      .reward = 1.0f };
	}
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
	rep = kid_do(h->k, OP_FLOOD, NULL, 100000);
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
 * producer's rewards make exactly the finals a run without it makes; the
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
	p = make(name, V05_MODE_V05, PROMPTS, 4, 16, 64);
	ref = make(rname, V05_MODE_V05, PROMPTS, 4, 16, 64);
	assert_int_equal(p->cfg.lane_cut_records, 64);
	assert_int_equal(p->cfg.lane_cut_permille, 900);
	submit(p, "q", PROMPTS, d);
	submit(ref, "q", PROMPTS, dref);

	/* 100 records, every one with a wrong gen for a live key. */
	kid_start(&hk, name);
	lane = (uint32_t)hk.lane;
	wrong_gens(d, PROMPTS, bad, 100);
	rep = kid_do(&hk, OP_PUSH, bad, 100);
	assert_int_equal(rep.ret, 100);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	/* Cut after the first batch of 64 (>= 64 records, all rejected):
	 * the other 36 are in the lane, unread, and nothing is pending. */
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_int_equal(ctr(p, V05_C_REJ_LATE), 64);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), 0);
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
	rep = kid_do(&hk, OP_PUSH, bad, 1);
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
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED),
			 ctr(ref, V05_C_REWARDS_APPLIED));
	assert_int_equal(rejected(p), 64);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);

	/* It closes: its lane is dropped unread and free again once its
	 * uid's backoff is over (at the owner's next look at the lanes,
	 * forced here), not before. */
	rep = kid_do(&hk, OP_CLOSE, NULL, 0);
	assert_int_equal(rep.ret, 0);
	kid_reap(&hk);
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
	assert_int_equal(rejected(p), 64);

	/* The next producer gets a working lane and a window of its own. */
	kid_start(&k2, name);
	{
		struct v05_decision d2[PROMPTS];
		struct v05_reward recs[PROMPTS * 4];
		uint32_t n = 0;

		submit(p, "r", PROMPTS, d2);
		for (uint32_t i = 0; i < PROMPTS; i++)
			n += rewards_for(&d2[i], recs + n);
		kid_push(&k2, p, recs, n);
		assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED),
				 ctr(ref, V05_C_REWARDS_APPLIED) + n);
	}
	rep = kid_do(&k2, OP_CLOSE, NULL, 0);
	assert_int_equal(rep.ret, 0);
	kid_reap(&k2);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);

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
	p = make(name, V05_MODE_V05, PROMPTS, 4, 16, 64);
	submit(p, "q", PROMPTS, d);
	kid_start(&hk, name);
	lane = (uint32_t)hk.lane;
	wrong_gens(d, PROMPTS, bad, 100);
	assert_int_equal(kid_do(&hk, OP_PUSH, bad, 100).ret, 100);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);

	/* A takeover: the new owner does not read the lane either. */
	assert_int_equal(v05_plugin_close(p, 0), 0);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	assert_int_equal(v05_pending(p), 0);
	assert_int_equal(v05_poll(p, NULL, 0) >= 0, 1);
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	assert_int_not_equal(p->seg.lane_own[lane].cut_owner, 0);
	assert_int_equal(p->seg.lane_own[lane].consumed, 64);
	rep = kid_do(&hk, OP_PUSH, bad, 1);
	assert_int_equal(rep.ret, -ECONNABORTED);

	/* It dies without closing: freed at the next look. */
	{
		struct kid_cmd cmd = { OP_EXIT, 0 };

		full_write(hk.to, &cmd, sizeof(cmd));
	}
	kid_reap(&hk);
	p->seg.lane_own[lane].cut_until_ns = 0; /* the backoff is over */
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	assert_int_equal(p->seg.lane_own[lane].cut_owner, 0);
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->owner), 0);
	assert_int_equal(p->seg.lane_own[lane].discarded, 36);
	assert_int_equal(v05_pending(p), 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* A batch of prompts, cancelled before any reward: all n x k rewards the
 * kid then pushes are late (unknown keys). */
static uint32_t cancelled_batch(struct v05_plugin *p, struct kid *k,
				const char *tag, uint32_t n)
{
	static struct v05_decision d[256];
	static struct v05_reward recs[256 * 16];
	uint32_t m = 0;

	submit(p, tag, n, d);
	assert_int_equal(v05_cancel(p, d[0].batch), (int)n);
	for (uint32_t i = 0; i < n; i++)
		m += rewards_for(&d[i], recs + m);
	kid_push(k, p, recs, m);
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

	submit(p, tag, n, d);
	for (uint32_t i = 0; i < n; i++)
		m += rewards_for(&d[i], recs + m);
	kid_push(k, p, recs, m);
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
 * by cancels are rejected, yet it is not cut off, neither by three whole
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
	p = make(name, V05_MODE_V05_FIXED, n, k, k, 0);
	/* The default: 4 x max_prompts x k_max records, 90%. */
	assert_int_equal(p->cfg.lane_cut_records, 4 * n * k);
	assert_int_equal(p->cfg.lane_cut_permille, 900);
	kid_start(&hk, name);
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
	assert_int_equal(ctr(p, V05_C_REJ_UNKNOWN), late);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), landed);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 0);
	assert_int_equal(p->seg.lane_own[hk.lane].cut_owner, 0);
	assert_int_equal(p->seg.lane_own[hk.lane].applied, landed);
	assert_int_equal(p->seg.lane_own[hk.lane].rejected, late);
	assert_int_equal(kid_do(&hk, OP_CLOSE, NULL, 0).ret, 0);
	kid_reap(&hk);
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
 * The window (minimum 100 records here): exactly 90% rejected is not cut,
 * more is; and the counts are halved at twice the minimum, so a claim's
 * long honest past (1,000 records applied) does not cover a flood for
 * long: it is cut within 2,000 rejected records, where the whole claim's
 * fraction would pass 90% only after more than 9,000.
 */
static void test_window(void **state)
{
	struct v05_decision d[PROMPTS];
	struct v05_reward good[PROMPTS * 4], bad[LANE_CAP];
	struct v05_plugin *p;
	struct kid hk;
	char name[64], tag[32];
	uint32_t ng = 0, flood = 0;
	uint64_t landed = 0;

	(void)state;
	test_name(name, sizeof(name), "window");
	p = make(name, V05_MODE_V05_FIXED, PROMPTS, 4, 4, 100);
	kid_start(&hk, name);
	/* 10 applied, then 90 rejected: 100 records, 90% exactly: kept. */
	submit(p, "a", PROMPTS, d);
	for (uint32_t i = 0; i < PROMPTS; i++)
		ng += rewards_for(&d[i], good + ng);
	kid_push(&hk, p, good, 10);
	wrong_gens(d, PROMPTS, bad, 90);
	kid_push(&hk, p, bad, 90);
	assert_int_equal(ctr(p, V05_C_REJ_LATE), 90);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 0);
	kid_push(&hk, p, good + 10, ng - 10);
	release_all(p);
	/* A long honest past: 31 more batches land. */
	for (int i = 0; i < 31; i++) {
		snprintf(tag, sizeof(tag), "b%d", i);
		landed += landed_batch(p, &hk, tag, PROMPTS);
	}
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), ng + landed);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 0);
	/* Then a flood of rejected records, 64 at a time, until cut. */
	wrong_gens(d, PROMPTS, bad, 64);
	while (!ctr(p, V05_C_LANES_CUT_OFF) && flood < 20000) {
		kid_push(&hk, p, bad, 64);
		flood += 64;
	}
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_true(flood < 2000);
	/* Cut on the first batch past 90% of a window of >= 100. */
	assert_true(p->seg.lane_own[hk.lane].cut_records >= 100);
	assert_true(p->seg.lane_own[hk.lane].cut_rejected * 10ull >
		    p->seg.lane_own[hk.lane].cut_records * 9ull);
	assert_int_equal(kid_do(&hk, OP_CLOSE, NULL, 0).ret, 0);
	kid_reap(&hk);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* ---- evasions: nothing the producer writes decides the cut ---------------- */

/* A file lane's ring, mapped from its file, as a process of the
 * segment's uid ignoring the library would. */
static struct v05_ring_hdr *map_lane_file(const char *name, uint32_t lane,
					  void **m)
{
	char seg[PATH_MAX], path[PATH_MAX + 32];
	uint64_t len = v05__lane_stride(LANE_CAP);
	int fd;

	assert_int_equal(v05__segment_path(name, seg, sizeof(seg)), 0);
	snprintf(path, sizeof(path), "%s:side/lane.%u", seg, lane);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	*m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(*m != MAP_FAILED);
	return V05_AT(struct v05_ring_hdr, *m, v05__lane_skew(lane));
}

/*
 * A producer that never claims its lane (its owner word stays 0), or that
 * writes a new word before every batch (each would have started a new
 * window when the window was the claim's), is cut off all the same after
 * lane_cut_records records: the window is the lane's. Its flood is then
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
		p = make(name, V05_MODE_V05, PROMPTS, 4, 16, 64);
		submit(p, "q", PROMPTS, d);
		r = map_lane_file(name, 2, &m);
		for (uint32_t round = 0; round < 8 && !ctr(p, V05_C_LANES_CUT_OFF);
		     round++) {
			/* 0, or a new word (a pid that does not exist) each
			 * batch. */
			v05_store_release(&r->owner,
					  variant ? ((uint64_t)(0x7fff0000u + round) << 32) : 0);
			raw_publish(r, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 32);
			assert_true(v05_poll(p, NULL, 0) >= 0);
		}
		assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);
		assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), 0);
		assert_int_equal(p->seg.lane_own[2].cut, 1);
		assert_int_equal(v05_load_relaxed(&r->owner), V05_OWNER_CUT);
		/* Whatever it writes now (its word back, a flood) is unread. */
		v05_store_release(&r->owner, 0);
		raw_publish(r, LANE_CAP, d[0].key, d[0].gen ^ 1, 200);
		assert_int_equal(v05_pending(p), 0);
		assert_int_equal(v05_poll(p, NULL, 0), 0);
		assert_int_equal(ctr(p, V05_C_REJ_LATE), 64);
		munmap(m, v05__lane_stride(LANE_CAP));
		v05_plugin_close(p, V05_CLOSE_UNLINK);
	}
}

/*
 * A brokered producer that never claims its grant (its lane's owner word
 * stays the broker's token, the owner's own word) is cut off after
 * lane_cut_records records all the same: its lane goes back to its file
 * at once. Reconnecting gets no new lane until its uid's backoff is over
 * (-EAGAIN, a message, counted), and the backoff doubles with each cut:
 * a reconnect loop gets one window per backoff, not one per connection.
 */
static void test_cut_brokered_and_backoff(void **state)
{
	struct v05_decision d[PROMPTS];
	struct raw_grant g;
	struct v05_plugin *p;
	uint64_t until1, until2, now;
	uint32_t lane, tries = 0;
	char name[64];
	int ret;

	(void)state;
	test_name(name, sizeof(name), "cutbrk");
	p = make_as(name, V05_MODE_V05, PROMPTS, 4, 16, 64, true);
	submit(p, "q", PROMPTS, d);
	assert_int_equal(raw_grant(name, &g), 0);
	assert_int_equal(raw_grant_map(&g), 0);
	lane = g.g.lane;
	assert_int_equal(v05_load_relaxed(&g.lane->owner), g.g.token);
	for (int round = 0; round < 8 && !ctr(p, V05_C_LANES_CUT_OFF); round++) {
		raw_publish(g.lane, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 32);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_int_equal(ctr(p, V05_C_REJ_LATE), 64);
	/* Back to its file at once, free for the next claim; what the
	 * memfd holds is nobody's concern. */
	assert_false(v05__lane_granted(&p->seg.lane_own[lane]));
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->owner), 0);
	assert_int_equal(v05_load_relaxed(&g.lane->owner), V05_OWNER_CUT);
	raw_publish(g.lane, LANE_CAP, d[0].key, d[0].gen ^ 1, 200);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_int_equal(ctr(p, V05_C_REJ_LATE), 64);
	raw_grant_close(&g);
	/* The reconnect loop: refused for the backoff, counted. */
	now = v05__now_ns();
	until1 = p->st->backoff[0].until_ns;
	assert_int_equal(p->st->backoff[0].uid, geteuid());
	assert_int_equal(p->st->backoff[0].cuts, 1);
	assert_true(until1 > now + 500000000ull && until1 <= now + 1000000000ull);
	for (int i = 0; i < 20; i++) {
		ret = raw_grant(name, &g);
		assert_int_equal(ret, -EAGAIN);
		assert_non_null(strstr(g.g.msg, "cut off"));
		tries++;
	}
	assert_int_equal(ctr(p, V05_C_BROKER_BACKOFF), tries);
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);
	/* Its backoff over (as time would make it): one more window, cut
	 * again; the next backoff twice as long. */
	p->st->backoff[0].until_ns = 0;
	assert_int_equal(raw_grant(name, &g), 0);
	assert_int_equal(raw_grant_map(&g), 0);
	for (int round = 0; round < 8 && ctr(p, V05_C_LANES_CUT_OFF) < 2; round++) {
		raw_publish(g.lane, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 32);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 2);
	now = v05__now_ns();
	until2 = p->st->backoff[0].until_ns;
	assert_int_equal(p->st->backoff[0].cuts, 2);
	assert_true(until2 > now + 1500000000ull && until2 <= now + 2000000000ull);
	assert_int_equal(raw_grant(name, &g), -EAGAIN);
	raw_grant_close(&g);
	/* The backoff survives a takeover: it is in the segment. */
	assert_int_equal(v05_plugin_close(p, 0), 0);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	assert_int_equal(raw_grant(name, &g), -EAGAIN);
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
	p = make(name, V05_MODE_V05, PROMPTS, 4, 16, 3000000000u);
	own = &p->seg.lane_own[0];
	/* A window just below the minimum, mostly rejected: one more
	 * rejected batch of 64 crosses it. */
	own->win_records = 3000000000ull - 10;
	own->win_rejected = 3000000000ull - 20;
	own->win_grant = own->grant;
	{
		struct v05_decision d[PROMPTS];
		struct v05_ring_hdr *r;
		void *m;

		submit(p, "q", PROMPTS, d);
		r = map_lane_file(name, 0, &m);
		raw_publish(r, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 64);
		assert_true(v05_poll(p, NULL, 0) >= 0);
		munmap(m, v05__lane_stride(LANE_CAP));
	}
	assert_int_equal(ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_int_equal(own->cut_records, 3000000054u);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unclaimed_and_word_changing_cut),
		cmocka_unit_test(test_cut_brokered_and_backoff),
		cmocka_unit_test(test_big_window),
		cmocka_unit_test(test_wrong_gens_cut_off),
		cmocka_unit_test(test_cut_kept_then_freed_at_death),
		cmocka_unit_test(test_honest_late_rewards_not_cut),
		cmocka_unit_test(test_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
