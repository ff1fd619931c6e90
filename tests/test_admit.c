/* SPDX-License-Identifier: MIT */
/*
 * Who the broker admits (docs/SHM.md, "The broker"): forked children
 * dropped to other uids ask a root-owned segment's broker for a lane. One
 * not on the owner's allow-list ("nobody", the hostile local user) gets no
 * lane, no reservation and no binding, and a refusal naming its uid, the
 * segment and how the owner admits it; the refusal is counted and its uid
 * kept for v05ctl stat. A listed uid gets its lane and its rewards are
 * applied; so does an unlisted uid whose effective gid or supplementary
 * group is listed, and the list survives a takeover. Dropping privileges
 * needs root: skipped (77) otherwise.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
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

#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define ALLOWED_UID 4242u /* any uid: setuid needs no passwd entry */
#define ALLOWED_GID 4343u

static uint32_t nobody_uid, nobody_gid;

static struct v05_plugin *make(const char *name, const uint32_t *uids,
			       uint32_t nu, const uint32_t *gids, uint32_t ng)
{
	struct v05_plugin *p;
	struct v05_config c;

	v05_config_default(&c);
	c.max_prompts = 8;
	c.max_producers = 4;
	c.lane_capacity = 64;
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	for (uint32_t i = 0; i < nu; i++)
		c.broker_uids[i] = uids[i];
	for (uint32_t i = 0; i < ng; i++)
		c.broker_gids[i] = gids[i];
	c.n_broker_uids = nu;
	c.n_broker_gids = ng;
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

/* What a child became and what it was to push. */
struct who {
	uint32_t uid, gid;
	uint32_t group;   /* a supplementary group, or 0 for none */
	uint64_t key;     /* with a lane: push these samples' rewards */
	uint64_t samples;
	uint32_t gen;
};

struct outcome {
	int ret;       /* v05_producer_open's answer             */
	int lane;
	int pushed;    /* rewards pushed                          */
	char msg[512]; /* v05_errmsg() after the open             */
};

static struct outcome as_user(struct v05_plugin *p, const char *name,
			      const struct who *w)
{
	struct outcome out;
	int fds[2], st;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct v05_producer *prod;
		gid_t g = w->group;

		close(fds[0]);
		/* Only what the library gives it: not the owner's view. */
		v05__segment_detach(&p->seg);
		if (setgroups(w->group ? 1 : 0, &g) || setgid(w->gid) ||
		    setuid(w->uid) || getuid() != w->uid)
			_exit(255);
		memset(&out, 0, sizeof(out));
		out.ret = v05_producer_open(name, V05_PRODUCER_ANY_UID, &prod);
		snprintf(out.msg, sizeof(out.msg), "%s", v05_errmsg());
		out.lane = out.ret ? -1 : v05_producer_lane(prod);
		if (!out.ret) {
			for (uint32_t s = 0; s < 64; s++)
				if (w->samples >> s & 1 &&
				    !v05_producer_push(prod, w->key, w->gen, s, 0.5f))
					out.pushed++;
			v05_producer_close(prod);
		}
		if (write(fds[1], &out, sizeof(out)) != sizeof(out))
			_exit(254);
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &out, sizeof(out)), (ssize_t)sizeof(out));
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return out;
}

static uint64_t ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

/* No lane reserved, held or bound: the refused peer left nothing. */
static void no_lane_touched(struct v05_plugin *p)
{
	for (uint32_t i = 0; i < p->seg.hdr.geo.lane_count; i++) {
		assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, i)->owner), 0);
		assert_int_equal(v05_load_relaxed(&p->seg.lane_own[i].bound), 0);
	}
}

/* A submitted prompt's first samples, for a child to push. */
static void job(struct v05_plugin *p, const char *uid, struct who *w)
{
	struct v05_prompt_in in = { .uid = uid, .uid_len = (uint32_t)strlen(uid),
				    .prior = 0.1 };
	struct v05_decision d;

	assert_int_equal(v05_submit(p, &in, 1, &d, NULL), 1);
	w->key = d.key;
	w->samples = d.samples;
	w->gen = d.gen;
}

/*
 * The hostile local user (nobody) is refused, three times over: no lane,
 * a message naming its uid, the segment and the way in, the count and its
 * uid in the owner's statistics. A listed uid, asking next, gets its lane
 * and its rewards are applied.
 */
static void test_unlisted_refused_listed_admitted(void **state)
{
	const uint32_t uids[] = { ALLOWED_UID };
	struct who hostile = { nobody_uid, nobody_gid, 0, 0, 0, 0 };
	struct who friend = { ALLOWED_UID, ALLOWED_UID, 0, 0, 0, 0 };
	struct v05_observer_info info;
	struct v05_observer *o;
	struct v05_plugin *p;
	struct outcome r;
	char name[64], want[64];
	int lanes_bound = 0;

	(void)state;
	test_name(name, sizeof(name), "admit");
	p = make(name, uids, 1, NULL, 0);
	job(p, "hostile's target", &hostile);
	for (int i = 0; i < 3; i++) {
		r = as_user(p, name, &hostile);
		assert_int_equal(r.ret, -EPERM);
		snprintf(want, sizeof(want), "uid %u ", nobody_uid);
		assert_non_null(strstr(r.msg, want));
		assert_non_null(strstr(r.msg, name));
		assert_non_null(strstr(r.msg, "broker_uids"));
		assert_non_null(strstr(r.msg, "broker_allow_uids"));
		assert_int_equal(r.pushed, 0);
	}
	no_lane_touched(p);
	assert_int_equal(ctr(p, V05_C_BROKER_REFUSED), 3);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), 0);
	assert_int_equal(v05_observer_open(name, 0, &o), 0);
	assert_int_equal(v05_observer_info(o, &info), 0);
	assert_int_equal(info.broker, 1);
	assert_int_equal(info.n_broker_uids, 1);
	assert_int_equal(info.broker_uids[0], ALLOWED_UID);
	assert_int_equal(info.broker_refused_uid, nobody_uid);
	assert_int_equal(info.broker_refused_gid, nobody_gid);
	v05_observer_close(o);

	/* The listed uid: a lane, bound to it, and its rewards applied. */
	job(p, "friend's", &friend);
	r = as_user(p, name, &friend);
	if (r.ret)
		fail_msg("listed uid refused: %d %s", r.ret, r.msg);
	assert_true(r.pushed > 0);
	assert_true(v05_poll(p, NULL, 0) >= 0);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), (uint64_t)r.pushed);
	for (uint32_t i = 0; i < p->seg.hdr.geo.lane_count; i++)
		if (v05_load_relaxed(&p->seg.lane_own[i].bound)) {
			assert_int_equal(v05_load_relaxed(&p->seg.lane_own[i].bound_uid),
					 ALLOWED_UID);
			lanes_bound++;
		}
	assert_int_equal(lanes_bound, 1);
	assert_int_equal(ctr(p, V05_C_BROKER_REFUSED), 3);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/*
 * By group: an unlisted uid whose effective gid is listed, or one of whose
 * supplementary groups is, is admitted; the same uid with neither is not.
 * The list is the segment's: a takeover's broker admits the same.
 */
static void test_groups_and_takeover(void **state)
{
	const uint32_t gids[] = { ALLOWED_GID };
	struct who by_gid = { nobody_uid, ALLOWED_GID, 0, 0, 0, 0 };
	struct who by_group = { nobody_uid, nobody_gid, ALLOWED_GID, 0, 0, 0 };
	struct who neither = { nobody_uid, nobody_gid, 0, 0, 0, 0 };
	struct v05_plugin *p;
	struct outcome r;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "admitgid");
	p = make(name, NULL, 0, gids, 1);
	r = as_user(p, name, &neither);
	assert_int_equal(r.ret, -EPERM);
	no_lane_touched(p);
	r = as_user(p, name, &by_gid);
	if (r.ret)
		fail_msg("listed effective gid refused: %d %s", r.ret, r.msg);
	r = as_user(p, name, &by_group);
	if (r.ret)
		fail_msg("listed supplementary group refused: %d %s", r.ret, r.msg);
	assert_int_equal(ctr(p, V05_C_BROKER_REFUSED), 1);

	/* Taken over: the same list, the same answers. */
	assert_int_equal(v05_plugin_close(p, 0), 0);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	r = as_user(p, name, &neither);
	assert_int_equal(r.ret, -EPERM);
	job(p, "after takeover", &by_group);
	r = as_user(p, name, &by_group);
	if (r.ret)
		fail_msg("listed group refused after takeover: %d %s", r.ret, r.msg);
	assert_true(v05_poll(p, NULL, 0) >= 0);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), (uint64_t)r.pushed);
	assert_int_equal(ctr(p, V05_C_BROKER_REFUSED), 2);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unlisted_refused_listed_admitted),
		cmocka_unit_test(test_groups_and_takeover),
	};
	struct passwd *nobody = getpwnam("nobody");

	if (geteuid() != 0 || !nobody) {
		fprintf(stderr, "admit: needs root (to become other uids) and a \"nobody\" user; skipped\n");
		return 77;
	}
	nobody_uid = nobody->pw_uid;
	nobody_gid = nobody->pw_gid;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
