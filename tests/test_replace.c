/* SPDX-License-Identifier: MIT */
/*
 * v05_plugin_replace is crash-consistent (issue 45, defects 1 to 3): a
 * replace killed at any step between its exchanges leaves the name with
 * the old segment whole (its lanes' undrained records included) or the
 * new one, never a mix; the next takeover, replace or reclaim finds what
 * the dead replace left and finishes or cleans it, and counts what it
 * did; and no name another user can create blocks the replace.
 *
 * Every step runs in a process of its own (the owner that dies with
 * records in its lanes, the replace killed at a test point, the process
 * that comes next), as root and as an unprivileged owner (CI runs as
 * root and becomes uid 4343; the stranger planting names is uid 4545).
 * The kills come from test points (shm/testpoint.h): the process stops
 * exactly there, no timing involved.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
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
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

/* Where a replace can be killed, in the order it passes them. */
static const char *const points[] = {
	"replace.staged",   /* its temporary directory made            */
	"create.file",      /* the new segment's file claimed          */
	"create.side",      /* ... and its side directory               */
	"replace.created",  /* the new segment whole, nothing swapped   */
	"replace.sides",    /* the side directories exchanged          */
	"replace.files",    /* the segment files exchanged: committed  */
	"replace.cleaning", /* the old one half removed                */
};
#define NPOINTS (sizeof(points) / sizeof(points[0]))
/* The first point past the commit. */
#define COMMITTED 5u

struct step {
	char name[64];
	const char *point; /* kill there (replace), or NULL */
	pid_t replacer;    /* the replace's process */
};

/* A replace, killed at s->point if it gets there. */
static int replacer(void *arg, int in, int out)
{
	struct step *s = arg;
	struct v05_plugin *p;
	struct v05_config c;
	struct rs_rep r;

	(void)in;
	memset(&r, 0, sizeof(r));
	if (s->point)
		setenv("V05_TEST_POINT", s->point, 1);
	rs_config(&c);
	r.ret = v05_plugin_replace(s->name, &c, &p);
	if (!r.ret) {
		rs_fill(&r, p);
		/* Dies owning it, as the killed ones do. */
	}
	rs_reply(out, &r);
	_exit(0);
}

/* The next process: a takeover that drains what the lanes hold, or a
 * replace, or a reclaim; 'x' then dies owning it, 'q' removes it. */
struct next_args {
	struct step s;
	char how; /* 't' takeover, 'r' replace, 'c' reclaim */
};

static int next_step(void *arg, int in, int out)
{
	struct next_args *a = arg;
	struct v05_decision d[64];
	struct v05_plugin *p = NULL;
	struct v05_config c;
	struct rs_rep r;
	char op;

	memset(&r, 0, sizeof(r));
	rs_config(&c);
	if (a->how == 't') {
		r.ret = v05_plugin_attach(a->s.name, 0, &p);
		if (!r.ret)
			r.ret = v05_recover(p, d, 64) < 0 ? -EIO : 0;
		/* Everything is published: two polls drain it all. */
		for (int i = 0; !r.ret && i < 2; i++)
			while ((r.ret = v05_poll(p, d, 64)) > 0)
				;
	} else if (a->how == 'r') {
		r.ret = v05_plugin_replace(a->s.name, &c, &p);
	} else {
		r.ret = v05_segment_reclaim(a->s.name, 0);
	}
	if (p)
		rs_fill(&r, p);
	rs_reply(out, &r);
	actor_recv(in, &op, 1);
	if (p)
		v05_plugin_close(p, op == 'q' ? V05_CLOSE_UNLINK : 0);
	return 0;
}

static struct rs_rep run_step(uint32_t uid, actor_fn fn, void *arg, int *status,
			      pid_t *pid)
{
	struct actor a;
	struct rs_rep r;

	actor_start(&a, uid, uid, 0, fn, arg);
	*pid = a.pid;
	r = rs_read(a.from);
	*status = actor_wait(&a);
	return r;
}

/* V05_TEST_ONLY_POINT=name: that point alone (to look at one). */
static int skip_point(size_t i)
{
	const char *only = getenv("V05_TEST_ONLY_POINT");

	return only && strcmp(only, points[i]);
}

/* A replace killed at points[i] (killed: status 128 + SIGKILL). */
static void replace_killed(uint32_t uid, struct step *s, size_t i)
{
	int status;
	struct rs_rep r;

	s->point = points[i];
	r = run_step(uid, replacer, s, &status, &s->replacer);
	if (status != 128 + SIGKILL)
		fail_msg("%s: the replace was not killed there (status %d, %d: %s)",
			 points[i], status, r.ret, r.msg);
}

/*
 * Defects 1 and 2: a replace killed at each step, then a takeover. Before
 * the commit the takeover has the old segment whole: every record that
 * waited in its lanes is applied (RS_PROMPTS open, RS_REWARDED x RS_K rewards);
 * after it, the new segment (nothing open, nothing applied). Either way
 * the takeover leaves no temporary behind and counts what it did.
 */
static void test_killed_then_takeover(void **state)
{
	uint32_t uids[2];
	int n = rs_owners(uids, "replace");

	(void)state;
	for (int o = 0; o < n; o++) {
		for (size_t i = 0; i < NPOINTS; i++) {
			struct next_args na;
			struct actor a;
			struct rs_rep r;
			char op = 'q';

			if (skip_point(i))
				continue;
			memset(&na, 0, sizeof(na));
			test_name(na.s.name, sizeof(na.s.name), "rkill");
			rs_dying_owner(uids[o], na.s.name);
			replace_killed(uids[o], &na.s, i);
			na.how = 't';
			actor_start(&a, uids[o], uids[o], 0, next_step, &na);
			actor_recv(a.from, &r, sizeof(r));
			if (r.ret)
				fail_msg("owner %s, killed at %s: takeover: %s",
					 rs_who(uids[o]), points[i], r.msg);
			if (i < COMMITTED) {
				if (r.applied != RS_REWARDED * RS_K || r.open + r.final != RS_PROMPTS)
					fail_msg("owner %s, killed at %s: the old segment is not whole: %llu of %u rewards applied, %llu + %llu of %u prompts",
						 rs_who(uids[o]), points[i],
						 (unsigned long long)r.applied, RS_REWARDED * RS_K,
						 (unsigned long long)r.open,
						 (unsigned long long)r.final, RS_PROMPTS);
			} else if (r.applied || r.open || r.final) {
				fail_msg("owner %s, killed at %s: the new segment is not new: %llu rewards, %llu open",
					 rs_who(uids[o]), points[i], (unsigned long long)r.applied,
					 (unsigned long long)r.open);
			}
			if (rs_temporaries(na.s.name, na.s.replacer))
				fail_msg("owner %s, killed at %s: a temporary of the replace is left after the takeover",
					 rs_who(uids[o]), points[i]);
			if (!r.have_counters)
				fail_msg("no counters replaces_undone / replaces_cleaned");
			/* What the takeover did is counted: a swap undone
			 * where it found one, a temporary removed where one
			 * was left. */
			assert_int_equal(r.undone, i == COMMITTED - 1 ? 1 : 0);
			assert_int_equal(r.cleaned, 1);
			assert_int_equal(r.files_replaced, 0);
			actor_send(a.to, &op, 1);
			assert_int_equal(actor_wait(&a), 0);
			assert_false(rs_exists(na.s.name, ""));
			assert_false(rs_exists(na.s.name, ":side"));
		}
	}
}

/* Defect 2: after a killed replace, the next replace (on_stale="remove")
 * or reclaim works and leaves nothing of the dead one. */
static void test_killed_then_replace_or_reclaim(void **state)
{
	uint32_t uids[2];
	int n = rs_owners(uids, "replace");

	(void)state;
	for (int o = 0; o < n; o++) {
		for (size_t i = 0; i < NPOINTS; i++) {
			if (skip_point(i))
				continue;
			for (int how = 0; how < 2; how++) {
				struct next_args na;
				struct actor a;
				struct rs_rep r;
				char op = 'q';

				memset(&na, 0, sizeof(na));
				test_name(na.s.name, sizeof(na.s.name), "rnext");
				rs_dying_owner(uids[o], na.s.name);
				replace_killed(uids[o], &na.s, i);
				na.how = how ? 'c' : 'r';
				actor_start(&a, uids[o], uids[o], 0, next_step, &na);
				actor_recv(a.from, &r, sizeof(r));
				if (r.ret)
					fail_msg("owner %s, killed at %s: %s: %s",
						 rs_who(uids[o]), points[i],
						 how ? "reclaim" : "replace", r.msg);
				if (rs_temporaries(na.s.name, na.s.replacer))
					fail_msg("owner %s, killed at %s: %s left a temporary",
						 rs_who(uids[o]), points[i],
						 how ? "reclaim" : "replace");
				if (how) {
					assert_false(rs_exists(na.s.name, ""));
					assert_false(rs_exists(na.s.name, ":side"));
				} else {
					assert_int_equal(r.open + r.applied, 0);
				}
				actor_send(a.to, &op, 1);
				assert_int_equal(actor_wait(&a), 0);
				assert_false(rs_exists(na.s.name, ""));
				assert_false(rs_exists(na.s.name, ":side"));
			}
		}
	}
}

/* ---- defect 3: names another user plants --------------------------------- */

struct plant {
	char name[64];
	pid_t replacer; /* its pid: the old temporary's name */
};

/* The stranger plants, as a directory of its own, every temporary name a
 * replace of NAME by that pid could have used: the old layout's
 * v05-v05-replace-<pid>-<n> and names in the new one's pattern. */
static int planter(void *arg, int in, int out)
{
	struct plant *pl = arg;
	char p[PATH_MAX];
	int bad = 0;

	(void)in;
	for (int k = 0; k < 4; k++) {
		snprintf(p, sizeof(p), "%s/v05-v05-replace-%d-%d", v05__shm_dir(),
			 (int)pl->replacer, k);
		bad |= mkdir(p, 0777) && errno != EEXIST;
		chmod(p, 0777);
	}
	snprintf(p, sizeof(p), "%s/v05-%s:replace.0", v05__shm_dir(), pl->name);
	bad |= mkdir(p, 0777) != 0;
	snprintf(p, sizeof(p), "%s/v05-%s:replace.%016llx.0000000000000000",
		 v05__shm_dir(), pl->name, 0ull);
	bad |= mkdir(p, 0777) != 0;
	actor_send(out, &bad, sizeof(bad));
	return 0;
}

static int planted(const struct plant *pl)
{
	char p[PATH_MAX];
	struct stat st;
	int n = 0;

	for (int k = 0; k < 4; k++) {
		snprintf(p, sizeof(p), "%s/v05-v05-replace-%d-%d", v05__shm_dir(),
			 (int)pl->replacer, k);
		n += !lstat(p, &st) && st.st_uid == ACTOR_STRANGER_UID;
	}
	snprintf(p, sizeof(p), "%s/v05-%s:replace.0", v05__shm_dir(), pl->name);
	n += !lstat(p, &st) && st.st_uid == ACTOR_STRANGER_UID;
	snprintf(p, sizeof(p), "%s/v05-%s:replace.%016llx.0000000000000000",
		 v05__shm_dir(), pl->name, 0ull);
	n += !lstat(p, &st) && st.st_uid == ACTOR_STRANGER_UID;
	return n;
}

static void unplant(const struct plant *pl)
{
	char p[PATH_MAX];

	for (int k = 0; k < 4; k++) {
		snprintf(p, sizeof(p), "%s/v05-v05-replace-%d-%d", v05__shm_dir(),
			 (int)pl->replacer, k);
		rmdir(p);
	}
	snprintf(p, sizeof(p), "%s/v05-%s:replace.0", v05__shm_dir(), pl->name);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/v05-%s:replace.%016llx.0000000000000000",
		 v05__shm_dir(), pl->name, 0ull);
	rmdir(p);
}

/* A replacer that waits for 'g' before it replaces. */
static int replacer_on_cue(void *arg, int in, int out)
{
	struct step *s = arg;
	struct v05_plugin *p;
	struct v05_config c;
	struct rs_rep r;
	char go;

	memset(&r, 0, sizeof(r));
	actor_recv(in, &go, 1);
	rs_config(&c);
	r.ret = v05_plugin_replace(s->name, &c, &p);
	rs_reply(out, &r);
	actor_recv(in, &go, 1);
	if (!r.ret)
		v05_plugin_close(p, V05_CLOSE_UNLINK);
	return 0;
}

static void test_planted_temporaries(void **state)
{
	uint32_t uids[2];
	int n = rs_owners(uids, "replace");

	(void)state;
	if (!actor_can_switch()) {
		fprintf(stderr, "replace: names planted by another user need root; skipped\n");
		skip();
		return;
	}
	for (int o = 0; o < n; o++) {
		struct plant pl;
		struct step s;
		struct actor a, st;
		struct rs_rep r;
		char go = 'g';
		int bad;

		memset(&s, 0, sizeof(s));
		test_name(s.name, sizeof(s.name), "rplant");
		rs_dying_owner(uids[o], s.name);
		actor_start(&a, uids[o], uids[o], 0, replacer_on_cue, &s);
		snprintf(pl.name, sizeof(pl.name), "%s", s.name);
		pl.replacer = a.pid;
		actor_start(&st, ACTOR_STRANGER_UID, ACTOR_STRANGER_UID, 0, planter,
			    &pl);
		actor_recv(st.from, &bad, sizeof(bad));
		assert_int_equal(actor_wait(&st), 0);
		assert_int_equal(bad, 0);
		actor_send(a.to, &go, 1);
		actor_recv(a.from, &r, sizeof(r));
		if (r.ret)
			fail_msg("owner %s: a replace blocked by names a stranger planted: %s",
				 rs_who(uids[o]), r.msg);
		/* The stranger's names are left alone. */
		assert_int_equal(planted(&pl), 6);
		actor_send(a.to, &go, 1);
		assert_int_equal(actor_wait(&a), 0);
		unplant(&pl);
		assert_int_equal(rs_temporaries(s.name, 0), 0);
		assert_false(rs_exists(s.name, ""));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_killed_then_takeover),
		cmocka_unit_test(test_killed_then_replace_or_reclaim),
		cmocka_unit_test(test_planted_temporaries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
