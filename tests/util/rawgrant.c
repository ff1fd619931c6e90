/* SPDX-License-Identifier: MIT */
/* Test helper: a broker client ignoring the library (rawgrant.h). */
#include "rawgrant.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int raw_grant(const char *name, struct raw_grant *r)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { &r->g, sizeof(r->g) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct sockaddr_un sa;
	struct cmsghdr *cm;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memset(r, 0, sizeof(*r));
	r->lane_fd = r->bell_fd = r->conn = -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/v05-%.64s:side/broker",
		 v05__shm_dir(), name);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    recvmsg(fd, &mh, 0) != (ssize_t)sizeof(r->g)) {
		int err = -errno;

		if (fd >= 0)
			close(fd);
		return err ? err : -EPROTO;
	}
	if (r->g.error) {
		close(fd);
		return r->g.error;
	}
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_len != CMSG_LEN(2 * sizeof(int))) {
		close(fd);
		return -EPROTO;
	}
	memcpy(&r->lane_fd, CMSG_DATA(cm), sizeof(int));
	memcpy(&r->bell_fd, CMSG_DATA(cm) + sizeof(int), sizeof(int));
	r->conn = fd;
	return 0;
}

int raw_grant_map(struct raw_grant *r)
{
	r->len = v05__lane_stride(r->g.lane_capacity);
	r->map = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED,
		      r->lane_fd, 0);
	if (r->map == MAP_FAILED)
		return -errno;
	r->lane = V05_AT(struct v05_ring_hdr, r->map, v05__lane_skew(r->g.lane));
	return 0;
}

void raw_publish(struct v05_ring_hdr *lane, uint32_t capacity, uint64_t key,
		 uint32_t gen, uint32_t n)
{
	struct v05_record *recs = v05__lane_records(lane);
	uint32_t tail = v05_load_relaxed(&lane->tail);

	for (uint32_t i = 0; i < n; i++) {
		struct v05_record *rec = &recs[(tail + i) & (capacity - 1)];

		rec->key = key;
		rec->gen = gen;
		rec->sample = i % 64;
		rec->reward = 0.5f;
		rec->flags = 0;
		rec->seq = tail + i;
		rec->zero = 0;
	}
	v05_store_release(&lane->tail, tail + n);
}

void raw_grant_close(struct raw_grant *r)
{
	if (r->map && r->map != MAP_FAILED)
		munmap(r->map, r->len);
	if (r->lane_fd >= 0)
		close(r->lane_fd);
	if (r->bell_fd >= 0)
		close(r->bell_fd);
	if (r->conn >= 0)
		close(r->conn);
	r->lane_fd = r->bell_fd = r->conn = -1;
	r->map = NULL;
}
