/* SPDX-License-Identifier: MIT */
/*
 * Test helper: a child process, maybe running as another user, driven over
 * two pipes. The security tests play the owner and the attacker as real,
 * distinct users this way (CI runs as root: it becomes them with setuid;
 * no user needs to exist for a uid to be used).
 */
#ifndef V05_TEST_ACTOR_H
#define V05_TEST_ACTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Uids the tests become: none needs a passwd entry. */
#define ACTOR_OWNER_UID 4343u   /* an unprivileged owner               */
#define ACTOR_LISTED_UID 4242u  /* a user the owner lists              */
#define ACTOR_STRANGER_UID 4545u /* a local user nobody listed          */

/* Can this process become other users (it is root)? */
bool actor_can_switch(void);

/* "(as root)" or "(as uid N)": who the test ran as, for messages. */
const char *actor_whoami(void);

struct actor {
	pid_t pid;
	int to, from; /* our ends: commands down, replies up */
};

/* The child's body: reads commands from in, writes replies to out; its
 * return value is its exit status. */
typedef int (*actor_fn)(void *arg, int in, int out);

/*
 * Fork a child that drops to uid (and gid; no supplementary groups, or the
 * one given) when uid is not (uint32_t)-1, then runs fn. The parent's
 * mappings are the child's too: fn must detach what it must not use.
 */
void actor_start(struct actor *a, uint32_t uid, uint32_t gid, uint32_t group,
		 actor_fn fn, void *arg);
/* Whole writes and reads (the child _exits on a broken pipe). */
void actor_send(int fd, const void *buf, size_t len);
void actor_recv(int fd, void *buf, size_t len);
/* Close our ends and wait: its exit status, or 128 + signal. */
int actor_wait(struct actor *a);
/* Kill it (SIGKILL) and wait. */
void actor_kill(struct actor *a);

#endif
