/* SPDX-License-Identifier: MIT */
/* Test helper: a child process as another user (actor.h). */
#include "actor.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

bool actor_can_switch(void)
{
	return geteuid() == 0;
}

const char *actor_whoami(void)
{
	static char buf[32];

	snprintf(buf, sizeof(buf), geteuid() ? "(as uid %u)" : "(as root)",
		 (unsigned)geteuid());
	return buf;
}

void actor_send(int fd, const void *buf, size_t len)
{
	const char *b = buf;

	while (len) {
		ssize_t n = write(fd, b, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(93);
		b += n;
		len -= (size_t)n;
	}
}

void actor_recv(int fd, void *buf, size_t len)
{
	char *b = buf;

	while (len) {
		ssize_t n = read(fd, b, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "actor: the other side is gone (it died)\n");
			_exit(94);
		}
		b += n;
		len -= (size_t)n;
	}
}

void actor_start(struct actor *a, uint32_t uid, uint32_t gid, uint32_t group,
		 actor_fn fn, void *arg)
{
	int down[2], up[2];

	if (pipe(down) || pipe(up))
		abort();
	a->pid = fork();
	if (a->pid < 0)
		abort();
	if (a->pid == 0) {
		gid_t g = group;

		close(down[1]);
		close(up[0]);
		if (uid != (uint32_t)-1 &&
		    (setgroups(group ? 1 : 0, &g) || setgid(gid) || setuid(uid) ||
		     getuid() != uid || geteuid() != uid))
			_exit(95);
		_exit(fn(arg, down[0], up[1]));
	}
	close(down[0]);
	close(up[1]);
	a->to = down[1];
	a->from = up[0];
}

int actor_wait(struct actor *a)
{
	int st;

	close(a->to);
	close(a->from);
	if (waitpid(a->pid, &st, 0) != a->pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void actor_kill(struct actor *a)
{
	kill(a->pid, SIGKILL);
	actor_wait(a);
}
