/* SPDX-License-Identifier: MIT */
/*
 * Reclaim acts only on the instance it checked (issue 45, defect 8): a
 * reclaim (a reaper, v05.reclaim, v05ctl reclaim: all v05_segment_reclaim)
 * that finds a segment's owner dead and is held up before it removes it
 * never removes what an owner restarted meanwhile holds, whether that
 * owner took the segment over (the same file, a new owner) or replaced it
 * (a new file under the name). The race is made deterministic with test
 * points (shm/testpoint.h): the reclaim stops right after its check and
 * goes on when the test says so; no sleep.
 *
 * As root and as an unprivileged owner (CI runs as root and becomes uid
 * 4343 for the second).
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/actor.h"
#include "util/restart.h"
#include "util/seg.h"
#include "v05-internal/shm.h"
#include "v05.h"

struct reaper_args {
	char name[64];
	const char *point;
	int w, r; /* the test point's descriptors (this process's) */
};

/* v05_segment_reclaim, stopped at the test point until told. */
static int reaper(void *arg, int in, int out)
{
	struct reaper_args *a = arg;
	char act[32];
	struct rs_rep r;

	(void)in;
	memset(&r, 0, sizeof(r));
	snprintf(act, sizeof(act), "fd:%d:%d", a->w, a->r);
	setenv("V05_TEST_POINT", a->point, 1);
	setenv("V05_TEST_POINT_ACTION", act, 1);
	r.ret = v05_segment_reclaim(a->name, 0);
	rs_reply(out, &r);
	return 0;
}

/* The restarted owner: takes the segment over ('t') or replaces it
 * ('r'), says how it went, then on 'p' gets a reward through a producer
 * of its own and answers how many rewards it applied; 'q' closes. */
struct owner_args {
	char name[64];
	char how;
};

static int restarted(void *arg, int in, int out)
{
	struct owner_args *a = arg;
	struct v05_decision d[64];
	struct v05_producer *w;
	struct v05_plugin *p = NULL;
	struct v05_config c;
	struct rs_rep r;
	char op;
	int n = 0;

	memset(&r, 0, sizeof(r));
	rs_config(&c);
	if (a->how == 't') {
		r.ret = v05_plugin_attach(a->name, 0, &p);
		/* What waited in the lanes first, then the state: its
		 * SAMPLE decisions are the samples no reward came for. */
		while (!r.ret && v05_poll(p, d, 64) > 0)
			;
		if (!r.ret)
			n = v05_recover(p, d, 64);
	} else {
		r.ret = v05_plugin_replace(a->name, &c, &p);
		if (!r.ret) {
			struct v05_prompt_in pin = { .uid = "new", .uid_len = 3,
						     .prior = 0.0 };

			n = v05_submit(p, &pin, 1, d, NULL);
		}
	}
	rs_reply(out, &r);
	if (r.ret)
		return 0;
	actor_recv(in, &op, 1);
	/* A sample issued and not rewarded: its reward. */
	r.ret = -ENOENT;
	for (int i = 0; i < n; i++) {
		if (d[i].kind != V05_DECISION_SAMPLE)
			continue;
		r.ret = v05_producer_open(a->name, 0, &w);
		if (!r.ret) {
			r.ret = v05_producer_push(w, d[i].key, d[i].gen,
						  (uint32_t)__builtin_ctzll(d[i].samples),
						  1.0f);
			v05_producer_flush(w);
		}
		break;
	}
	if (!r.ret) {
		while (v05_poll(p, d, 64) > 0)
			;
		rs_fill(&r, p);
	} else {
		snprintf(r.msg, sizeof(r.msg), "its producer: %s", v05_errmsg());
	}
	actor_send(out, &r, sizeof(r));
	actor_recv(in, &op, 1);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	return 0;
}

/* The reaper started and stopped at its point: its actor and its two
 * pipes (the test's ends). */
struct stopped {
	struct actor a;
	int at, go;
	struct reaper_args ra;
};

static int stop_reaper(struct stopped *s, uint32_t uid, const char *name,
		       const char *point)
{
	int up[2], down[2];
	char b;

	if (pipe(up) || pipe(down))
		abort();
	memset(&s->ra, 0, sizeof(s->ra));
	snprintf(s->ra.name, sizeof(s->ra.name), "%s", name);
	s->ra.point = point;
	s->ra.w = up[1];
	s->ra.r = down[0];
	actor_start(&s->a, uid, uid, 0, reaper, &s->ra);
	close(up[1]);
	close(down[0]);
	s->at = up[0];
	s->go = down[1];
	/* There, or it ran through (then its end closes: 0). */
	return read(s->at, &b, 1) == 1;
}

static struct rs_rep release_reaper(struct stopped *s)
{
	struct rs_rep r;
	char b = 'g';

	if (write(s->go, &b, 1) != 1)
		abort();
	r = rs_read(s->a.from);
	assert_int_equal(actor_wait(&s->a), 0);
	close(s->at);
	close(s->go);
	return r;
}

/*
 * The reaper found the owner dead and stops right after that check;
 * meanwhile an owner restarts and takes the segment over or replaces it;
 * then the reaper goes on. The restarted owner's segment must still be
 * there: its producers find it and its rewards are applied. The reaper
 * answers -EBUSY naming what it found.
 */
static void test_reaper_meets_a_restart(void **state)
{
	uint32_t uids[2];
	int n = rs_owners(uids, "reclaim");

	(void)state;
	for (int o = 0; o < n; o++) {
		for (int how = 0; how < 2; how++) {
			struct owner_args oa;
			struct stopped s;
			struct actor b;
			struct rs_rep r, rr;
			char op = 'p';

			memset(&oa, 0, sizeof(oa));
			test_name(oa.name, sizeof(oa.name), "reap");
			oa.how = how ? 'r' : 't';
			rs_dying_owner(uids[o], oa.name);
			if (!stop_reaper(&s, uids[o], oa.name, "reclaim.checked"))
				fail_msg("the reaper did not stop after its check");
			actor_start(&b, uids[o], uids[o], 0, restarted, &oa);
			r = rs_read(b.from);
			if (r.ret)
				fail_msg("%s: the restart (%s) failed while the reaper stood after its check: %s",
					 rs_who(uids[o]), how ? "replace" : "takeover",
					 r.msg);
			rr = release_reaper(&s);
			actor_send(b.to, &op, 1);
			r = rs_read(b.from);
			if (r.ret || !rs_exists(oa.name, ""))
				fail_msg("%s: the reaper removed the segment the restarted owner (%s) holds: its producer %d: %s; reaper %d",
					 rs_who(uids[o]), how ? "replace" : "takeover",
					 r.ret, r.msg, rr.ret);
			assert_int_equal(r.applied,
					 (how ? 0 : RS_REWARDED * RS_K) + 1);
			assert_int_equal(rr.ret, -EBUSY);
			assert_non_null(strstr(rr.msg, "left alone"));
			op = 'q';
			actor_send(b.to, &op, 1);
			assert_int_equal(actor_wait(&b), 0);
			assert_false(rs_exists(oa.name, ""));
			assert_int_equal(rs_temporaries(oa.name, b.pid), 0);
		}
	}
}

/*
 * The other order: the reaper has claimed the segment (stopped after its
 * claim) when the owner restarts. The restart is refused with a message
 * that names the reclaim, and nothing of the segment changes until the
 * reaper goes on; then it is gone, and a create of the name works.
 */
static int create_once(void *arg, int in, int out)
{
	struct v05_plugin *p = NULL;
	struct v05_config c;
	struct rs_rep r;

	(void)in;
	memset(&r, 0, sizeof(r));
	rs_config(&c);
	r.ret = v05_plugin_create(arg, &c, &p);
	if (r.ret == -EEXIST)
		r.ret = v05_plugin_attach(arg, 0, &p);
	rs_reply(out, &r);
	if (p)
		v05_plugin_close(p, V05_CLOSE_UNLINK);
	return 0;
}

static void test_restart_meets_a_reclaim(void **state)
{
	uint32_t uids[2];
	int n = rs_owners(uids, "reclaim");

	(void)state;
	for (int o = 0; o < n; o++) {
		struct stopped s;
		struct actor b;
		struct rs_rep r, rr;
		char name[64];

		test_name(name, sizeof(name), "reapc");
		rs_dying_owner(uids[o], name);
		if (!stop_reaper(&s, uids[o], name, "reclaim.claimed"))
			fail_msg("the reaper did not stop after its claim");
		actor_start(&b, uids[o], uids[o], 0, create_once, name);
		r = rs_read(b.from);
		assert_int_equal(actor_wait(&b), 0);
		assert_int_equal(r.ret, -EBUSY);
		if (!strstr(r.msg, "reclaim"))
			fail_msg("the refusal does not name the reclaim: %s", r.msg);
		assert_true(rs_exists(name, ""));
		rr = release_reaper(&s);
		if (rr.ret)
			fail_msg("reclaim: %s", rr.msg);
		assert_false(rs_exists(name, ""));
		assert_false(rs_exists(name, ":side"));
		actor_start(&b, uids[o], uids[o], 0, create_once, name);
		r = rs_read(b.from);
		assert_int_equal(actor_wait(&b), 0);
		if (r.ret)
			fail_msg("create after the reclaim: %s", r.msg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reaper_meets_a_restart),
		cmocka_unit_test(test_restart_meets_a_reclaim),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
