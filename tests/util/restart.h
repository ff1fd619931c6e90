/* SPDX-License-Identifier: MIT */
/*
 * Test helper for restarts (tests/test_replace.c, tests/test_reclaim.c):
 * an owner that dies with records waiting in its lanes, steps run in
 * processes of their own (maybe as another user), what is left next to
 * a segment's name.
 */
#ifndef V05_TEST_RESTART_H
#define V05_TEST_RESTART_H

#include <stdint.h>
#include <sys/types.h>

#include "actor.h"
#include "v05.h"

#define RS_PROMPTS 16u
#define RS_K 4u
#define RS_REWARDED 12u /* prompts whose every sample waits in a lane */

/* The config every step uses: v05-fixed, k 4, RS_PROMPTS slots. */
void rs_config(struct v05_config *c);

/* Who plays the owner: root then uid ACTOR_OWNER_UID as root, else this
 * uid alone ((uint32_t)-1: no switch); how many. */
int rs_owners(uint32_t *out, const char *test);
/* "root", "uid 4343" or "this uid", for messages. */
const char *rs_who(uint32_t uid);

/* A step's report. */
struct rs_rep {
	int ret;
	char msg[512];
	uint64_t applied, open, final, files_replaced, undone, cleaned;
	int have_counters; /* replaces_undone and replaces_cleaned exist */
	int extra;         /* a step's own number */
};

/* The counters above from p, by name. */
void rs_fill(struct rs_rep *r, struct v05_plugin *p);
/* Send r (its message from v05_errmsg() if r->ret). */
void rs_reply(int out, struct rs_rep *r);
/* Read a report; -EPIPE in ret if the child died before it sent one. */
struct rs_rep rs_read(int from);

/* In a process of uid: create segment `name`, submit RS_PROMPTS prompts,
 * push every sample of RS_REWARDED of them into a lane, die without
 * polling. Fails the test if any step failed. */
void rs_dying_owner(uint32_t uid, const char *name);

/* Names in the shm directory starting with prefix. */
int rs_count_names(const char *prefix);
/* Temporaries a replace of `name` by process pid may leave
 * (v05-NAME:replace.*, and the old layout's v05-v05-replace-<pid>-*;
 * pid 0: not those). */
int rs_temporaries(const char *name, pid_t pid);
/* Does v05-NAME<suffix> exist (lstat)? */
int rs_exists(const char *name, const char *suffix);

#endif
