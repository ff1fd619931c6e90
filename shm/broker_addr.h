/* SPDX-License-Identifier: MIT */
/* The broker's socket address, the same for its owner (broker.c) and a
 * producer (broker_request.c). */
#ifndef V05_SHM_BROKER_ADDR_H
#define V05_SHM_BROKER_ADDR_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* "/proc/self/fd/<dirfd>/<name>": a path of at most 40 bytes to a name in
 * the side directory, however long the segment's path (sun_path holds
 * 108), resolved through the directory we opened and checked. */
static inline socklen_t broker_addr(int dirfd, struct sockaddr_un *sa)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/broker",
		     dirfd);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
}

#endif
