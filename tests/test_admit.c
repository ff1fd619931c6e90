/* SPDX-License-Identifier: MIT */
/*
 * Who the broker admits (docs/SHM.md, "The broker").
 *
 * The rule itself (v05__broker_admit, a pure function of the owner's list
 * and the peer's credentials): always run, as any user. The owner's uid,
 * a listed uid, a listed effective gid or supplementary group are
 * admitted; anyone else is refused (-EPERM, a message naming its uid and
 * gid and the way in); the kernel's overflow ids (what every unmapped
 * user of another user namespace looks like) are refused, listed or not,
 * unless the owner opts in, and the config refuses listing them without
 * the flag; a peer in another pid namespace is -EXDEV, after the list.
 *
 * Then with real users (root needed to become them; CI runs as root, so
 * these run there; as another user they are reported skipped): children
 * dropped to other uids ask a root-owned segment's broker, and an
 * unprivileged owner's. One not on the list (the hostile local user) gets
 * no lane and no grant, and a refusal naming its uid, the segment and how
 * the owner admits it; the refusal is counted and its uid kept for v05ctl
 * stat. A listed uid gets its lane and its rewards are applied; so does an
 * unlisted uid whose effective gid or supplementary group is listed, and
 * the list survives a takeover. A peer the owner cannot see (another pid
 * namespace) is refused -EXDEV and counted.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
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

#include "util/actor.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define ALLOWED_UID ACTOR_LISTED_UID /* setuid needs no passwd entry */
#define ALLOWED_GID 4343u

/* The hostile local user: nobody listed it. */
static const uint32_t nobody_uid = ACTOR_STRANGER_UID;
static const uint32_t nobody_gid = ACTOR_STRANGER_UID;

/* ---- the rule, as a pure function ---------------------------------------- */

static int admit(const struct v05_broker_allow *a, int32_t pid, uint32_t uid,
		 uint32_t gid, const uint32_t *groups, uint32_t ng, char *why)
{
	struct v05_peer peer = { pid, uid, gid, groups, ng };

	why[0] = '\0';
	return v05__broker_admit(a, 1000, &peer, why, 512);
}

static void test_rule(void **state)
{
	struct v05_broker_allow a;
	const uint32_t g_listed[] = { 7, 300, 9 }, g_none[] = { 7, 9 };
	const uint32_t g_ovf[] = { 65534 };
	char why[512];

	(void)state;
	memset(&a, 0, sizeof(a));
	a.uids[0] = 2000;
	a.n_uids = 1;
	a.gids[0] = 300;
	a.n_gids = 1;
	a.overflow_uid = 65534;
	a.overflow_gid = 65534;
	/* In: the owner's uid, a listed uid, a listed gid or group. */
	assert_int_equal(admit(&a, 10, 1000, 1000, NULL, 0, why), 0);
	assert_int_equal(admit(&a, 10, 2000, 5, NULL, 0, why), 0);
	assert_int_equal(admit(&a, 10, 3000, 300, NULL, 0, why), 0);
	assert_int_equal(admit(&a, 10, 3000, 5, g_listed, 3, why), 0);
	/* Out: none of them, with a message naming it and the way in. */
	assert_int_equal(admit(&a, 10, 3000, 5, g_none, 2, why), -EPERM);
	assert_non_null(strstr(why, "uid 3000 (gid 5)"));
	assert_non_null(strstr(why, "broker_uids"));
	assert_non_null(strstr(why, "broker_allow_uids"));
	/* A listed id is no wildcard: nothing with another. */
	assert_int_equal(admit(&a, 10, 2001, 301, NULL, 0, why), -EPERM);
	/* The overflow ids: refused, even listed or with a listed group,
	 * unless the owner opts in. */
	a.uids[1] = 65534;
	a.n_uids = 2;
	a.gids[1] = 65534;
	a.n_gids = 2;
	assert_int_equal(admit(&a, 10, 65534, 65534, NULL, 0, why), -EPERM);
	assert_non_null(strstr(why, "overflow"));
	assert_non_null(strstr(why, "V05_CONFIG_BROKER_OVERFLOW_IDS"));
	assert_int_equal(admit(&a, 10, 2000, 65534, NULL, 0, why), -EPERM);
	assert_int_equal(admit(&a, 10, 65534, 300, NULL, 0, why), -EPERM);
	assert_int_equal(admit(&a, 10, 3000, 5, g_ovf, 1, why), -EPERM);
	a.overflow_ok = true;
	assert_int_equal(admit(&a, 10, 65534, 65534, NULL, 0, why), 0);
	assert_int_equal(admit(&a, 10, 3000, 5, g_ovf, 1, why), 0);
	/* Opted in, the overflow id is an id like any other: unlisted, out. */
	a.n_uids = 1;
	a.n_gids = 1;
	assert_int_equal(admit(&a, 10, 65534, 65534, NULL, 0, why), -EPERM);
	assert_non_null(strstr(why, "allow-list"));
	/* Another pid namespace (pid 0): refused after the list, -EXDEV for
	 * the admitted, -EPERM for the rest. */
	a.overflow_ok = false;
	assert_int_equal(admit(&a, 0, 2000, 5, NULL, 0, why), -EXDEV);
	assert_non_null(strstr(why, "pid namespace"));
	assert_int_equal(admit(&a, 0, 3000, 5, NULL, 0, why), -EPERM);
	/* Where the kernel's overflow ids are others, those count. */
	a.overflow_uid = 70000;
	a.overflow_gid = 70001;
	assert_int_equal(admit(&a, 10, 70000, 5, NULL, 0, why), -EPERM);
	assert_int_equal(admit(&a, 10, 2000, 70001, NULL, 0, why), -EPERM);
	assert_int_equal(admit(&a, 10, 2000, 65534, NULL, 0, why), 0);
}

/* The config may list the overflow ids only with the flag. */
static void test_overflow_config(void **state)
{
	struct v05_config c;

	(void)state;
	v05_config_default(&c);
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	c.broker_uids[0] = 65534;
	c.n_broker_uids = 1;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "overflow uid"));
	assert_non_null(strstr(v05_errmsg(), "V05_CONFIG_BROKER_OVERFLOW_IDS"));
	c.broker_uids[0] = 4242;
	c.broker_gids[0] = 65534;
	c.n_broker_gids = 1;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "overflow gid"));
	c.flags |= V05_CONFIG_BROKER_OVERFLOW_IDS;
	assert_int_equal(v05_config_check(&c), 0);
	c.flags = V05_CONFIG_BROKER_OVERFLOW_IDS;
	c.n_broker_uids = c.n_broker_gids = 0;
	assert_int_equal(v05_config_check(&c), -EINVAL);
	assert_non_null(strstr(v05_errmsg(), "without V05_CONFIG_PRODUCER_BROKER"));
}

/* ---- as real users --------------------------------------------------------- */

static bool need_users(void)
{
	if (actor_can_switch())
		return true;
	/* Visible: cmocka prints it as skipped, and the reason here. */
	fprintf(stderr, "admit: this test becomes other users, which needs root %s; skipped (CI runs it as root)\n",
		actor_whoami());
	skip();
	return false;
}

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
		assert_int_equal(v05_load_relaxed(&p->seg.lane_own[i].grant), 0);
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
	if (!need_users())
		return;
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

	/* The listed uid: a lane granted to it, its rewards applied. */
	job(p, "friend's", &friend);
	r = as_user(p, name, &friend);
	if (r.ret)
		fail_msg("listed uid refused: %d %s", r.ret, r.msg);
	assert_true(r.pushed > 0);
	assert_true(v05_poll(p, NULL, 0) >= 0);
	assert_int_equal(ctr(p, V05_C_REWARDS_APPLIED), (uint64_t)r.pushed);
	for (uint32_t i = 0; i < p->seg.hdr.geo.lane_count; i++)
		if (v05_load_relaxed(&p->seg.lane_own[i].grant)) {
			assert_int_equal(v05_load_relaxed(&p->seg.lane_own[i].grant_uid),
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
	if (!need_users())
		return;
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

/* ---- an unprivileged owner; an owner in another pid namespace ----------- */

struct owner_args {
	char name[64];
	bool new_pidns; /* create the segment from a new pid namespace */
};

/* What the owner actor reports: its first decision, then its counts. */
struct owner_report {
	struct v05_decision d;
	uint64_t refused, applied;
	int ret;
};

static int owner_body(struct owner_args *o, int in, int out)
{
	const uint32_t uids[] = { ALLOWED_UID };
	struct v05_prompt_in pin = { .uid = "job", .uid_len = 3, .prior = 0.1 };
	struct owner_report rep;
	struct v05_plugin *p;
	struct v05_config c;
	char cmd;

	memset(&rep, 0, sizeof(rep));
	v05_config_default(&c);
	c.max_prompts = 8;
	c.max_producers = 4;
	c.lane_capacity = 64;
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	memcpy(c.broker_uids, uids, sizeof(uids));
	c.n_broker_uids = 1;
	rep.ret = v05_plugin_create(o->name, &c, &p);
	if (!rep.ret && v05_submit(p, &pin, 1, &rep.d, NULL) != 1)
		rep.ret = -EIO;
	actor_send(out, &rep, sizeof(rep));
	if (rep.ret)
		return 1;
	for (;;) {
		actor_recv(in, &cmd, 1);
		if (cmd == 'q')
			break;
		(void)v05_poll(p, NULL, 0);
		rep.refused = ctr(p, V05_C_BROKER_REFUSED);
		rep.applied = ctr(p, V05_C_REWARDS_APPLIED);
		actor_send(out, &rep, sizeof(rep));
	}
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	return 0;
}

static int owner_actor(void *arg, int in, int out)
{
	struct owner_args *o = arg;
	pid_t pid;
	int st;

	if (!o->new_pidns)
		return owner_body(o, in, out);
	/* The owner is pid 1 of a new pid namespace: a producer outside it
	 * is one the owner cannot see (SO_PEERCRED pid 0). */
	if (unshare(CLONE_NEWPID))
		return 96;
	pid = fork();
	if (pid == 0)
		_exit(owner_body(o, in, out));
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 97;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 98;
}

/* A producer actor: opens, pushes its job's samples, reports. */
struct producer_args {
	char name[64];
	struct v05_decision d;
};

static int producer_actor(void *arg, int in, int out)
{
	struct producer_args *a = arg;
	struct v05_producer *w;
	struct outcome r;

	(void)in;
	memset(&r, 0, sizeof(r));
	r.ret = v05_producer_open(a->name, V05_PRODUCER_ANY_UID, &w);
	snprintf(r.msg, sizeof(r.msg), "%s", v05_errmsg());
	r.lane = r.ret ? -1 : v05_producer_lane(w);
	if (!r.ret) {
		for (uint32_t s = 0; s < 64; s++)
			if (a->d.samples >> s & 1 &&
			    !v05_producer_push(w, a->d.key, a->d.gen, s, 0.5f))
				r.pushed++;
		v05_producer_close(w);
	}
	actor_send(out, &r, sizeof(r));
	return 0;
}

static struct outcome produce_as(uint32_t uid, const struct producer_args *pa)
{
	struct outcome r;
	struct actor a;

	actor_start(&a, uid, uid, 0, producer_actor, (void *)pa);
	actor_recv(a.from, &r, sizeof(r));
	assert_int_equal(actor_wait(&a), 0);
	return r;
}

/* The owner actor started (as uid, or ourselves with -1), its segment
 * made; *pa set to its job for producers. */
static void owner_start(struct actor *o, struct owner_args *oa,
			const char *tag, uint32_t uid, bool new_pidns,
			struct producer_args *pa)
{
	struct owner_report rep;

	memset(oa, 0, sizeof(*oa));
	test_name(oa->name, sizeof(oa->name), tag);
	oa->new_pidns = new_pidns;
	actor_start(o, uid, uid, 0, owner_actor, oa);
	actor_recv(o->from, &rep, sizeof(rep));
	assert_int_equal(rep.ret, 0);
	memset(pa, 0, sizeof(*pa));
	snprintf(pa->name, sizeof(pa->name), "%s", oa->name);
	pa->d = rep.d;
}

static struct owner_report owner_ask(struct actor *o)
{
	struct owner_report rep;
	char cmd = 'c';

	actor_send(o->to, &cmd, 1);
	actor_recv(o->from, &rep, sizeof(rep));
	return rep;
}

/*
 * An owner that is itself an unprivileged user: the stranger (another
 * unprivileged user, unlisted) is refused and counted; the listed user
 * gets a lane and its rewards are applied.
 */
static void test_unprivileged_owner(void **state)
{
	struct owner_args oa;
	struct producer_args pa;
	struct owner_report rep;
	struct outcome r;
	struct actor o;
	char cmd = 'q';

	(void)state;
	if (!need_users())
		return;
	owner_start(&o, &oa, "admitown", ACTOR_OWNER_UID, false, &pa);
	r = produce_as(ACTOR_STRANGER_UID, &pa);
	assert_int_equal(r.ret, -EPERM);
	assert_non_null(strstr(r.msg, "is not on the owner's allow-list"));
	r = produce_as(ALLOWED_UID, &pa);
	if (r.ret)
		fail_msg("listed uid refused by an unprivileged owner: %s", r.msg);
	rep = owner_ask(&o);
	assert_int_equal(rep.refused, 1);
	assert_int_equal(rep.applied, (uint64_t)r.pushed);
	actor_send(o.to, &cmd, 1);
	assert_int_equal(actor_wait(&o), 0);
}

/*
 * A listed producer the owner cannot see (the owner in a pid namespace of
 * its own): refused -EXDEV with its reason, and counted.
 */
static void test_other_pid_namespace(void **state)
{
	struct owner_args oa;
	struct producer_args pa;
	struct owner_report rep;
	struct outcome r;
	struct actor o;
	char cmd = 'q';

	(void)state;
	if (!need_users())
		return;
	owner_start(&o, &oa, "admitns", (uint32_t)-1, true, &pa);
	r = produce_as(ALLOWED_UID, &pa);
	assert_int_equal(r.ret, -EXDEV);
	assert_non_null(strstr(r.msg, "pid namespace"));
	rep = owner_ask(&o);
	assert_int_equal(rep.refused, 1);
	assert_int_equal(rep.applied, 0);
	actor_send(o.to, &cmd, 1);
	assert_int_equal(actor_wait(&o), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rule),
		cmocka_unit_test(test_overflow_config),
		cmocka_unit_test(test_unlisted_refused_listed_admitted),
		cmocka_unit_test(test_groups_and_takeover),
		cmocka_unit_test(test_unprivileged_owner),
		cmocka_unit_test(test_other_pid_namespace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
