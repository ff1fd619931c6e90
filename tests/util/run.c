/* SPDX-License-Identifier: MIT */
#include "run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void drain(int fd, char *buf, size_t cap, size_t *len, int *open)
{
	char tmp[4096];
	ssize_t n = read(fd, tmp, sizeof(tmp));

	if (n <= 0) {
		if (n == 0 || errno != EINTR)
			*open = 0;
		return;
	}
	if (*len + (size_t)n >= cap)
		n = (ssize_t)(cap - 1 - *len);
	memcpy(buf + *len, tmp, (size_t)n);
	*len += (size_t)n;
	buf[*len] = '\0';
}

int run_capture(char *const argv[], struct run_result *r)
{
	int po[2], pe[2], st, open_o = 1, open_e = 1;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	if (pipe(po) || pipe(pe))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close(po[0]);
		close(pe[0]);
		close(po[1]);
		close(pe[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	while (open_o || open_e) {
		struct pollfd fds[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };

		fds[0].fd = open_o ? po[0] : -1;
		fds[1].fd = open_e ? pe[0] : -1;
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		if (fds[0].revents)
			drain(po[0], r->out, sizeof(r->out), &r->out_len, &open_o);
		if (fds[1].revents)
			drain(pe[0], r->err, sizeof(r->err), &r->err_len, &open_e);
	}
	close(po[0]);
	close(pe[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return 0;
}

unsigned count_lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

int json_number(const char *json, const char *key, double *out)
{
	char pat[80];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	if (!p)
		return -ENOENT;
	p += strlen(pat);
	*out = strncmp(p, "null", 4) ? strtod(p, NULL) : NAN;
	return 0;
}
