/* SPDX-License-Identifier: MIT */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int v05__proc_stat(pid_t pid, uint64_t *start_ticks, char *state)
{
	char path[64], buf[1024];
	char *p, *end;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	/* comm (field 2) may hold spaces and ')': the fields resume after
	 * the last ')'. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -EIO;
	p += 2;
	if (state)
		*state = *p;
	/* p is field 3 (state); starttime is field 22, 19 fields further. */
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -EIO;
		p++;
	}
	errno = 0;
	*start_ticks = strtoull(p, &end, 10);
	if (end == p || errno)
		return -EIO;
	return 0;
}

uint64_t v05__owner_self(void)
{
	uint64_t ticks;
	pid_t pid = getpid();

	if (v05__proc_stat(pid, &ticks, NULL))
		return 0;
	return ((uint64_t)(uint32_t)pid << 32) | (uint32_t)ticks;
}

int v05__owner_alive(uint64_t owner)
{
	pid_t pid = (pid_t)v05__owner_pid(owner);
	uint64_t ticks;
	char state;

	if (owner == 0 || pid <= 0)
		return 0;
	/* EPERM means "exists, another user's": /proc still tells. */
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return 0;
	if (v05__proc_stat(pid, &ticks, &state))
		return 0;
	/* A zombie has exited: its lanes and segments are free to reclaim. */
	if (state == 'Z' || state == 'X')
		return 0;
	return (uint32_t)ticks == (uint32_t)owner;
}

uint64_t v05__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t v05__coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t v05__wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
