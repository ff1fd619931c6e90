/* SPDX-License-Identifier: MIT */
/* The lane broker (broker.h): the owner's thread and the producer's request. */
#include "broker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "atomics.h"
#include "error.h"
#include "proc.h"

struct v05_broker {
	struct v05_segment *seg;
	pthread_t thread;
	int lfd;     /* the listening socket          */
	int stop_fd; /* an eventfd: written at stop   */
	uint64_t me; /* the owner's word: the reservation token */
	uint32_t uid;
	struct v05_broker_allow allow;
	/* When each lane was reserved for a producer (0: not by us). The
	 * broker thread's alone. */
	uint64_t reserved_ns[V05_LANES_MAX];
};

/*
 * The socket's name, in the abstract namespace (no file to create, remove
 * or leave behind): "v05-" and the XXH3 of the segment file's path, so
 * that the same name under another $V05_SHM_DIR is another broker. Anyone
 * may bind a free abstract name, so a producer believes only a broker
 * whose peer uid owns the segment file (v05__broker_request).
 */
unsigned long long v05__broker_name_hash(const char *seg_path)
{
	return (unsigned long long)XXH3_64bits(seg_path, strlen(seg_path));
}

static socklen_t broker_addr(const char *seg_path, struct sockaddr_un *sa)
{
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "v05-%016llx",
		     v05__broker_name_hash(seg_path));
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- the owner's side ---------------------------------------------------- */

static void refuse(int cfd, int err, const char *msg)
{
	struct v05_broker_grant g;

	memset(&g, 0, sizeof(g));
	g.magic = V05_BROKER_MAGIC;
	g.abi = V05_SHM_ABI;
	g.error = err;
	snprintf(g.msg, sizeof(g.msg), "%s", msg);
	/* Nonblocking, on a fresh socket: room for one message, or the
	 * client loses its answer; the broker never waits for it. */
	(void)send(cfd, &g, sizeof(g), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/*
 * A free lane for uid: one bound to it first, else an unbound one, which
 * is then bound to uid (unless uid is the owner's: same-uid processes are
 * no boundary). Reserved with a CAS of its owner word from 0 to the
 * owner's word, which the plugin sees as alive, so that it does not free
 * it, and same-uid producers see as held. Returns the lane or -1.
 */
static int reserve_lane(struct v05_broker *b, uint32_t uid)
{
	struct v05_segment *seg = b->seg;
	uint32_t n = seg->hdr.geo.lane_count;

	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < n; i++) {
			struct v05_lane_own *own = &seg->lane_own[i];
			struct v05_ring_hdr *r = v05__lane(seg, i);
			/* Relaxed: the broker writes the binding alone. */
			bool bound = v05_load_relaxed(&own->bound) != 0;
			uint64_t zero = 0;

			if (pass == 0 && !(bound && v05_load_relaxed(&own->bound_uid) == uid))
				continue;
			if (pass == 1 && bound)
				continue;
			/* Relaxed peek; the CAS decides. */
			if (v05_load_relaxed(&r->owner) != 0)
				continue;
			/* A reservation, not a claim: the producer's CAS
			 * (token -> its word) is the claim (A3 there). */
			if (!v05_cas_acq_rel(&r->owner, &zero, b->me))
				continue;
			if (!bound && uid != b->uid) {
				/* Binding first, rename second: an owner killed
				 * in between is finished by the next
				 * (segment_map.c lane_file_find). A same-uid
				 * producer that opened the old name sees the
				 * lane held. */
				v05_store_relaxed(&own->bound_uid, uid);
				v05_store_relaxed(&own->bound, 1u);
				if (v05__lane_file_bind(seg, i)) {
					/* Its file kept its name, same-uid
					 * producers may claim it: not bound,
					 * not handed out. Release: as
					 * unreserve's CAS, our stores before
					 * the lane is free again. */
					v05_store_relaxed(&own->bound, 0u);
					v05_store_release(&r->owner, 0);
					continue;
				}
			}
			b->reserved_ns[i] = v05__now_ns();
			return (int)i;
		}
	}
	return -1;
}

static void unreserve(struct v05_broker *b, uint32_t i)
{
	uint64_t me = b->me;

	/* Only if still ours: a producer may have claimed it meanwhile. */
	v05_cas_acq_rel(&v05__lane(b->seg, i)->owner, &me, 0);
	b->reserved_ns[i] = 0;
}

/* Give back reservations older than V05_BROKER_HOLD_NS (or all). */
static void expire(struct v05_broker *b, bool all)
{
	uint64_t now = v05__now_ns();

	for (uint32_t i = 0; i < b->seg->hdr.geo.lane_count; i++) {
		if (!b->reserved_ns[i])
			continue;
		/* Relaxed: only compared; unreserve's CAS decides. */
		if (v05_load_relaxed(&v05__lane(b->seg, i)->owner) != b->me)
			b->reserved_ns[i] = 0; /* claimed */
		else if (all || now - b->reserved_ns[i] > V05_BROKER_HOLD_NS)
			unreserve(b, i);
	}
}

static bool listed(const uint32_t *ids, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/*
 * Is the peer on cfd one the owner admits? Its uid and effective gid as
 * the kernel took them at connect (SO_PEERCRED), and its supplementary
 * groups likewise (SO_PEERGROUPS, Linux 4.13): a process can drop groups
 * but not gain them, and nothing is read from /proc, which would race
 * with the peer. Where SO_PEERGROUPS is refused (an older kernel), the
 * effective gid alone counts.
 */
static bool admitted(const struct v05_broker *b, int cfd,
		     const struct ucred *cred)
{
	const struct v05_broker_allow *a = &b->allow;
	gid_t small[64], *groups = small;
	socklen_t len = sizeof(small);
	bool ok = false;

	if ((uint32_t)cred->uid == b->uid || listed(a->uids, a->n_uids, cred->uid) ||
	    listed(a->gids, a->n_gids, cred->gid))
		return true;
	if (!a->n_gids)
		return false;
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
		if (errno != ERANGE)
			return false; /* no SO_PEERGROUPS: the gid above alone */
		/* More groups than fit: len now says how many bytes. */
		groups = malloc(len);
		if (!groups ||
		    getsockopt(cfd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
			free(groups);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t) && !ok; i++)
		ok = listed(a->gids, a->n_gids, groups[i]);
	if (groups != small)
		free(groups);
	return ok;
}

static void serve(struct v05_broker *b, int cfd)
{
	const struct v05_segment *seg = b->seg;
	struct v05_broker_grant g;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { &g, sizeof(g) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int lane, fds[2];

	if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
	    len != sizeof(cred))
		return;
	/* Owner words name pids: a producer must share our pid namespace. */
	if (cred.pid <= 0) {
		refuse(cfd, -EXDEV, "the producer is in another pid namespace");
		return;
	}
	if (!admitted(b, cfd, &cred)) {
		char why[sizeof(g.msg)];

		snprintf(why, sizeof(why),
			 "uid %u (gid %u) is not on the owner's allow-list; the owner admits it by listing the uid or a group of it (struct v05_config broker_uids/broker_gids; Python: broker_allow_uids/broker_allow_gids)",
			 (unsigned)cred.uid, (unsigned)cred.gid);
		if (b->allow.refused)
			b->allow.refused(b->allow.ctx, (uint32_t)cred.uid,
					 (uint32_t)cred.gid);
		refuse(cfd, -EPERM, why);
		return;
	}
	lane = reserve_lane(b, (uint32_t)cred.uid);
	if (lane < 0) {
		refuse(cfd, -EBUSY, "no lane free for this uid (each lane once handed to a uid serves it alone)");
		return;
	}
	memset(&g, 0, sizeof(g));
	g.magic = V05_BROKER_MAGIC;
	g.abi = V05_SHM_ABI;
	g.lane = (uint32_t)lane;
	g.lane_count = seg->hdr.geo.lane_count;
	g.lane_capacity = seg->hdr.geo.lane_capacity;
	g.flags = seg->hdr.flags;
	g.token = b->me;
	fds[0] = seg->lane_fd[lane];
	fds[1] = seg->bell_fd;
	memset(u.buf, 0, sizeof(u.buf));
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm) { /* cannot be: the buffer is there */
		unreserve(b, (uint32_t)lane);
		return;
	}
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	if (sendmsg(cfd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(g))
		unreserve(b, (uint32_t)lane);
}

static void *broker_main(void *arg)
{
	struct v05_broker *b = arg;

	for (;;) {
		struct pollfd pf[2] = { { b->lfd, POLLIN, 0 },
					{ b->stop_fd, POLLIN, 0 } };
		int n = poll(pf, 2, 1000);

		if (n < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		expire(b, false);
		if (!(pf[0].revents & POLLIN))
			continue;
		/* Every pending connection, each answered at once without
		 * reading from it: no client can make another wait. */
		for (;;) {
			int cfd = accept4(b->lfd, NULL, NULL,
					  SOCK_NONBLOCK | SOCK_CLOEXEC);

			if (cfd < 0)
				break;
			serve(b, cfd);
			close(cfd);
		}
	}
	expire(b, true);
	return NULL;
}

int v05__broker_start(struct v05_segment *seg,
		      const struct v05_broker_allow *allow,
		      struct v05_broker **out)
{
	struct v05_broker *b = calloc(1, sizeof(*b));
	struct sockaddr_un sa;
	socklen_t sl = broker_addr(seg->path, &sa);
	int ret;

	if (!b)
		return v05__fail(-ENOMEM, "broker: out of memory");
	b->seg = seg;
	b->allow = *allow;
	b->me = v05_load_relaxed(&seg->ctl->owner);
	b->uid = seg->st_uid;
	b->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (b->lfd < 0 || b->stop_fd < 0) {
		ret = v05__fail(-errno, "broker socket: %s", v05__errstr(errno));
		goto fail;
	}
	if (bind(b->lfd, (struct sockaddr *)&sa, sl) || listen(b->lfd, 64)) {
		ret = v05__fail(-errno,
				"broker of %s: bind @%s: %s (another process holds the name?)",
				seg->name, sa.sun_path + 1, v05__errstr(errno));
		goto fail;
	}
	ret = -pthread_create(&b->thread, NULL, broker_main, b);
	if (ret) {
		ret = v05__fail(ret, "broker thread: %s", v05__errstr(-ret));
		goto fail;
	}
	*out = b;
	return 0;
fail:
	if (b->lfd >= 0)
		close(b->lfd);
	if (b->stop_fd >= 0)
		close(b->stop_fd);
	free(b);
	return ret;
}

void v05__broker_stop(struct v05_broker *b)
{
	uint64_t one = 1;

	if (!b)
		return;
	if (write(b->stop_fd, &one, sizeof(one)) != sizeof(one))
		abort(); /* an eventfd below its limit always takes it */
	pthread_join(b->thread, NULL);
	close(b->lfd);
	close(b->stop_fd);
	free(b);
}

/* ---- the producer's side ------------------------------------------------- */

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

int v05__broker_request(const char *name, struct v05_segment *seg,
			struct v05_ring_hdr **lane, uint32_t *index,
			uint64_t *token)
{
	struct v05_broker_grant g;
	struct timeval tv = { 5, 0 };
	struct sockaddr_un sa;
	struct ucred cred;
	socklen_t sl, cl = sizeof(cred);
	struct stat st;
	int sfd, ret, fds[2] = { -1, -1 };
	size_t len;
	void *bell, *m;

	v05__segment_blank(seg);
	ret = v05__segment_path(name, seg->path, sizeof(seg->path));
	if (ret)
		return ret;
	/* Whose segment: stat needs no right on the file itself. */
	if (lstat(seg->path, &st))
		return v05__fail(-errno, "stat %s: %s", seg->path, v05__errstr(errno));
	if (!S_ISREG(st.st_mode))
		return v05__fail(-EBADMSG, "%s is not a regular file", seg->path);
	sl = broker_addr(seg->path, &sa);
	sfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sfd < 0)
		return v05__fail(-errno, "socket: %s", v05__errstr(errno));
	if (connect(sfd, (struct sockaddr *)&sa, sl)) {
		ret = -errno;
		close(sfd);
		if (ret == -ECONNREFUSED || ret == -ENOENT)
			return v05__fail(-ECONNREFUSED,
					 "segment %s belongs to uid %u and has no producer broker (its plugin's config needs V05_CONFIG_PRODUCER_BROKER)",
					 name, (unsigned)st.st_uid);
		return v05__fail(ret, "connect to the broker of %s: %s", name,
				 v05__errstr(-ret));
	}
	/* Anyone can bind a free abstract name: believe only the owner. */
	if (getsockopt(sfd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) ||
	    cred.uid != st.st_uid) {
		close(sfd);
		return v05__fail(-EACCES,
				 "the broker socket of %s is not served by the segment's owner (uid %u)",
				 name, (unsigned)st.st_uid);
	}
	setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ret = receive(sfd, name, &g, fds);
	close(sfd);
	if (ret)
		return ret;
	len = v05__lane_stride(g.lane_capacity);
	ret = v05__seg_file_check(fds[0], "the broker's lane file", (uint32_t)st.st_uid,
				  len);
	if (!ret)
		ret = v05__seg_file_check(fds[1], "the broker's doorbell file",
					  (uint32_t)st.st_uid, V05_PAGE);
	if (ret) {
		close_fds(fds, 2);
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
		return v05__fail(ret, "mmap the broker's files of %s: %s", name,
				 v05__errstr(-ret));
	}
	/* What a producer's attach would know: the doorbell, the geometry
	 * of its lane, the doorbell mode. */
	seg->role = V05_ROLE_PRODUCER;
	seg->st_uid = (uint32_t)st.st_uid;
	snprintf(seg->name, sizeof(seg->name), "%s", name);
	seg->hdr.flags = g.flags;
	seg->hdr.geo.lane_count = g.lane_count;
	seg->hdr.geo.lane_capacity = g.lane_capacity;
	seg->hdr.regions[V05_REGION_DOORBELL].size = V05_PAGE;
	seg->bell_map = bell;
	seg->bell = bell;
	*lane = V05_AT(struct v05_ring_hdr, m, v05__lane_skew(g.lane));
	*index = g.lane;
	*token = g.token;
	return 0;
}
