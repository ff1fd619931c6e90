/* SPDX-License-Identifier: MIT */
/* The lane broker, the producer's side (broker.h): connect to the owner's
 * broker, receive the grant and its descriptors, check them, and map the
 * lane and the doorbell. */
#include "broker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker_addr.h"
#include "error.h"
#include "lanes.h"
#include "memfd.h"
#include "proc.h"

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* The grant and its descriptors, checked; fds[] = lane, doorbell. */
static int receive(int sfd, const char *name, struct v05_broker_grant *g,
		   int fds[2])
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { g, sizeof(*g) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int got[4], ngot = 0;
	ssize_t n;

	do
		n = recvmsg(sfd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);

	/* Reset, or closed before a word: the socket went away under the
	 * connection (its owner died; a child it had just forked still held
	 * it for an instant, until the child closed it). */
	if ((n < 0 && errno == ECONNRESET) || n == 0)
		return v05__fail(-ECONNREFUSED,
				 "segment %s has no producer broker (its owner is gone, and no other took it over yet)",
				 name);
	if (n < 0)
		return v05__fail(errno == EAGAIN ? -ETIMEDOUT : -errno,
				 "broker of %s: %s", name,
				 errno == EAGAIN ? "no answer in 5 s" :
				 v05__errstr(errno));
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t j = 0; j < k && ngot < 4; j++)
			memcpy(&got[ngot++], CMSG_DATA(cm) + j * sizeof(int),
			       sizeof(int));
	}
	/* Another ABI's grant may differ in size: its version first. */
	if (n >= 16 && g->magic == V05_BROKER_MAGIC && g->abi != V05_SHM_ABI) {
		close_fds(got, ngot);
		return v05__fail(-EPROTONOSUPPORT,
				 "broker of %s speaks segment ABI %u; this library ABI %u",
				 name, g->abi, V05_SHM_ABI);
	}
	if (n != (ssize_t)sizeof(*g) || g->magic != V05_BROKER_MAGIC ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		close_fds(got, ngot);
		return v05__fail(-EPROTO, "broker of %s: malformed answer", name);
	}
	if (g->error) {
		close_fds(got, ngot);
		g->msg[sizeof(g->msg) - 1] = '\0';
		return v05__fail(g->error < 0 && g->error > -4096 ? g->error : -EPROTO,
				 "the broker of segment %s refused this process: %s",
				 name, g->msg);
	}
	if (ngot != 2 || g->lane_count < 1 || g->lane_count > V05_LANES_MAX ||
	    g->lane >= g->lane_count || g->lane_capacity < V05_LANE_CAP_MIN ||
	    g->lane_capacity > V05_LANE_CAP_MAX ||
	    (g->lane_capacity & (g->lane_capacity - 1)) ||
	    (g->flags & ~V05_SHM_F_ALL)) {
		close_fds(got, ngot);
		return v05__fail(-EPROTO, "broker of %s: malformed grant", name);
	}
	fds[0] = got[0];
	fds[1] = got[1];
	return 0;
}

/* Connect to segment path's broker (owned by uid); the socket or a
 * negative errno. */
static int broker_connect(const char *name, const char *path, uint32_t uid)
{
	struct sockaddr_un sa;
	struct ucred cred;
	socklen_t sl, cl = sizeof(cred);
	int dfd, sfd, ret;

	/* The side directory, checked to be the owner's and writable by no
	 * one else: the socket in it can only be the owner's. */
	dfd = v05__side_dir_open(path, uid, false);
	if (dfd == -ENOENT)
		return v05__fail(-ECONNREFUSED,
				 "segment %s belongs to uid %u and has no producer broker (its side directory is gone)",
				 name, (unsigned)uid);
	if (dfd < 0)
		return dfd;
	sl = broker_addr(dfd, &sa);
	sfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sfd < 0) {
		ret = v05__fail(-errno, "socket: %s", v05__errstr(errno));
		close(dfd);
		return ret;
	}
	ret = connect(sfd, (struct sockaddr *)&sa, sl) ? -errno : 0;
	close(dfd);
	if (ret) {
		close(sfd);
		/* EACCES: a side directory closed to other users is one whose
		 * owner runs no broker (a broker opens it for searching). */
		if (ret == -ECONNREFUSED || ret == -ENOENT ||
		    (ret == -EACCES && uid != geteuid()))
			return v05__fail(-ECONNREFUSED,
					 "segment %s belongs to uid %u and has no producer broker (its plugin's config needs V05_CONFIG_PRODUCER_BROKER, or its owner is gone and no other took it over yet)",
					 name, (unsigned)uid);
		return v05__fail(ret, "connect to the broker of %s: %s", name,
				 v05__errstr(-ret));
	}
	/* The directory is the owner's; believe only the owner all the
	 * same (root could have put anything there). */
	if (getsockopt(sfd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) ||
	    cred.uid != uid) {
		close(sfd);
		return v05__fail(-EACCES,
				 "the broker socket of %s is not served by the segment's owner (uid %u)",
				 name, (unsigned)uid);
	}
	return sfd;
}

int v05__broker_request(const char *name, struct v05_segment *seg,
			struct v05_broker_lane *out)
{
	struct v05_broker_grant g;
	struct timeval tv = { 5, 0 };
	struct stat st;
	int sfd, ret, fds[2] = { -1, -1 };
	size_t len;
	void *bell, *m;

	v05__segment_blank(seg);
	memset(out, 0, sizeof(*out));
	out->conn = -1;
	ret = v05__segment_path(name, seg->path, sizeof(seg->path));
	if (ret)
		return ret;
	/* Whose segment: stat needs no right on the file itself. */
	if (lstat(seg->path, &st))
		return v05__fail(-errno, "stat %s: %s", seg->path, v05__errstr(errno));
	if (!S_ISREG(st.st_mode))
		return v05__fail(-EBADMSG, "%s is not a regular file", seg->path);
	sfd = broker_connect(name, seg->path, (uint32_t)st.st_uid);
	if (sfd < 0)
		return sfd;
	setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ret = receive(sfd, name, &g, fds);
	if (ret) {
		close(sfd);
		return ret;
	}
	len = v05__lane_stride(g.lane_capacity);
	ret = v05__memfd_check(fds[0], len, "the broker's lane");
	if (!ret)
		ret = v05__memfd_check(fds[1], V05_PAGE, "the broker's doorbell");
	if (ret) {
		close_fds(fds, 2);
		close(sfd);
		return ret;
	}
	bell = mmap(NULL, V05_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	ret = -errno;
	close_fds(fds, 2);
	if (bell == MAP_FAILED || m == MAP_FAILED) {
		if (bell != MAP_FAILED)
			munmap(bell, V05_PAGE);
		if (m != MAP_FAILED)
			munmap(m, len);
		close(sfd);
		return v05__fail(ret, "mmap the broker's memfds of %s: %s", name,
				 v05__errstr(-ret));
	}
	/* What a producer's attach would know: the doorbell, the geometry
	 * of its lane, the doorbell mode. */
	seg->role = V05_ROLE_PRODUCER;
	seg->st_uid = (uint32_t)st.st_uid;
	seg->st_dev = (uint64_t)st.st_dev;
	seg->st_ino = (uint64_t)st.st_ino;
	snprintf(seg->name, sizeof(seg->name), "%s", name);
	seg->hdr.flags = g.flags;
	seg->hdr.geo.lane_count = g.lane_count;
	seg->hdr.geo.lane_capacity = g.lane_capacity;
	seg->hdr.regions[V05_REGION_DOORBELL].size = V05_PAGE;
	seg->bell_map = bell;
	seg->bell = bell;
	out->lane = V05_AT(struct v05_ring_hdr, m, v05__lane_skew(g.lane));
	out->lane_map = m;
	out->lane_len = len;
	out->index = g.lane;
	out->token = g.token;
	/* Blocking again (no read ever waits on it: only a hang-up is
	 * looked for, with poll). */
	tv.tv_sec = 0;
	setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	out->conn = sfd;
	return 0;
}
