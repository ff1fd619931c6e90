/* SPDX-License-Identifier: MIT */
/* The lane broker (broker.h), the owner's side: its thread, its socket,
 * each producer served a lane or refused. Which lane, the grant and its
 * end are broker_grant.c's, admission broker_admit.c's, a producer's
 * request broker_request.c's. */
#include "broker_owner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "atomics.h"
#include "broker_addr.h"
#include "error.h"
#include "lanes.h"
#include "proc.h"

/*
 * A forked child must not keep the broker alive: it would hold the
 * listening socket (connections would queue there after the owner died)
 * and every grant's connection (a producer's grant would outlive the
 * owner, and the producer would never learn it must go to the next one).
 * Descriptors survive fork whatever close-on-exec says, so the child
 * closes them, in an atfork handler. The list of the process's brokers
 * is guarded by a mutex held across fork.
 */
static pthread_mutex_t brokers_mu = PTHREAD_MUTEX_INITIALIZER;
static struct v05_broker *brokers;
static pthread_once_t brokers_once = PTHREAD_ONCE_INIT;

static void brokers_prepare(void)
{
	pthread_mutex_lock(&brokers_mu);
}

static void brokers_parent(void)
{
	pthread_mutex_unlock(&brokers_mu);
}

static void unmap_files(struct v05_broker *b);

static void brokers_child(void)
{
	for (struct v05_broker *b = brokers; b; b = b->next) {
		b->forked = true;
		close(b->lfd);
		close(b->stop_fd);
		for (uint32_t i = 0; i < V05_LANES_MAX; i++)
			if (b->conn[i] >= 0)
				close(b->conn[i]);
		/* Nor its mappings of the lanes' files. */
		unmap_files(b);
	}
	pthread_mutex_unlock(&brokers_mu);
}

static void brokers_atfork(void)
{
	pthread_atfork(brokers_prepare, brokers_parent, brokers_child);
}

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

/* The peer on cfd as the kernel recorded it at connect; groups (n of
 * them) in *groups, from SO_PEERGROUPS where the list needs them. */
static int peer_of(const struct v05_broker *b, int cfd, struct v05_peer *peer,
		   uint32_t *small, uint32_t nsmall, uint32_t **groups)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
	    len != sizeof(cred))
		return -1;
	memset(peer, 0, sizeof(*peer));
	peer->pid = cred.pid;
	peer->uid = (uint32_t)cred.uid;
	peer->gid = (uint32_t)cred.gid;
	*groups = small;
	if (!b->allow.n_gids)
		return 0;
	len = nsmall * sizeof(gid_t);
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERGROUPS, small, &len)) {
		if (errno != ERANGE)
			return 0; /* no SO_PEERGROUPS: the gid alone counts */
		/* More groups than fit: len now says how many bytes. */
		*groups = malloc(len);
		if (!*groups ||
		    getsockopt(cfd, SOL_SOCKET, SO_PEERGROUPS, *groups, &len)) {
			free(*groups);
			*groups = small;
			return 0;
		}
	}
	peer->groups = *groups;
	peer->ngroups = (uint32_t)(len / sizeof(gid_t));
	return 0;
}

/* A producer that closed its connection (closed its lane, or died): the
 * grant ends. We never read from a client, so only a hang-up shows in
 * the connections' revents. Returns the grants ended. */
static int ended(struct v05_broker *b, const struct pollfd *pf, int n)
{
	int k = 0;

	for (int j = 0; j < n; j++) {
		if (!pf[j].revents)
			continue;
		for (uint32_t i = 0; i < b->seg->hdr.geo.lane_count; i++)
			if (b->conn[i] == pf[j].fd) {
				v05__broker_end(b, i);
				k++;
			}
	}
	return k;
}

/* The connections that hung up by now, looked at without waiting. */
static int ends_seen(struct v05_broker *b)
{
	struct pollfd pf[V05_LANES_MAX];
	int n = 0;

	for (uint32_t i = 0; i < b->seg->hdr.geo.lane_count; i++)
		if (b->conn[i] >= 0)
			pf[n++] = (struct pollfd){ b->conn[i], POLLRDHUP, 0 };
	if (!n || poll(pf, (nfds_t)n, 0) <= 0)
		return 0;
	return ended(b, pf, n);
}

/* Answer one connection; true if it now carries a grant (keep it). */
static bool serve(struct v05_broker *b, int cfd)
{
	const struct v05_segment *seg = b->seg;
	static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t");
	uint32_t small[64], *groups, cuts = 0;
	struct v05_broker_grant g;
	struct v05_peer peer;
	char why[sizeof(g.msg)];
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { &g, sizeof(g) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	struct v05_broker_pick pick;
	int lane, ret, fds[2];

	if (peer_of(b, cfd, &peer, small, 64, &groups))
		return false;
	ret = v05__broker_admit(&b->allow, b->uid, &peer, why, sizeof(why));
	if (groups != small)
		free(groups);
	if (ret) {
		if (b->allow.refused)
			b->allow.refused(b->allow.ctx, ret, peer.uid, peer.gid);
		refuse(cfd, ret, why);
		return false;
	}
	if (b->allow.backoff_until) {
		uint64_t until = b->allow.backoff_until(b->allow.ctx, peer.uid,
							&cuts), now = v05__now_ns();

		if (until > now) {
			snprintf(why, sizeof(why),
				 "uid %u: %u of its lanes were cut off (their records were mostly rejected); no lane for it for another %llu ms (the wait doubles with each cut-off)",
				 peer.uid, cuts,
				 (unsigned long long)((until - now + 999999) / 1000000));
			if (b->allow.refused)
				b->allow.refused(b->allow.ctx, -EAGAIN, peer.uid,
						 peer.gid);
			refuse(cfd, -EAGAIN, why);
			return false;
		}
	}
	pick = v05__broker_reserve(b, why, sizeof(why));
	if (pick.lane < 0) {
		/* A producer that closed just before this one connected: its
		 * hang-up may have come after the poll that saw this one. */
		if (ends_seen(b))
			pick = v05__broker_reserve(b, why, sizeof(why));
		if (pick.lane < 0) {
			refuse(cfd, -EBUSY, why);
			return false;
		}
	}
	lane = pick.lane;
	fds[0] = v05__broker_grant(b, pick, &peer);
	if (fds[0] < 0) {
		refuse(cfd, fds[0], v05_errmsg());
		return false;
	}
	b->conn[lane] = cfd;
	memset(&g, 0, sizeof(g));
	g.magic = V05_BROKER_MAGIC;
	g.abi = V05_SHM_ABI;
	g.lane = (uint32_t)lane;
	g.lane_count = seg->hdr.geo.lane_count;
	g.lane_capacity = seg->hdr.geo.lane_capacity;
	g.flags = seg->hdr.flags;
	g.token = b->me;
	fds[1] = b->bell_fd;
	memset(u.buf, 0, sizeof(u.buf));
	cm = CMSG_FIRSTHDR(&mh);
	if (cm) { /* always: the buffer is there */
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(fds));
		memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	}
	ret = cm && sendmsg(cfd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) ==
			    (ssize_t)sizeof(g);
	close(fds[0]); /* the producer's and the mapping's now */
	if (!ret)
		v05__broker_end(b, (uint32_t)lane); /* closes cfd */
	return true;
}

static void *broker_main(void *arg)
{
	struct v05_broker *b = arg;
	uint32_t n = b->seg->hdr.geo.lane_count;
	struct pollfd *pf = calloc(2 + n, sizeof(*pf));

	/* Below the poll thread and the producers: a local user may make
	 * this thread answer connections as fast as it opens them; at nice
	 * 10 that costs the engine's own threads little. Best effort. */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	for (; pf;) {
		int nfd = 2, k;

		pf[0] = (struct pollfd){ b->lfd, POLLIN, 0 };
		pf[1] = (struct pollfd){ b->stop_fd, POLLIN, 0 };
		for (uint32_t i = 0; i < n; i++)
			if (b->conn[i] >= 0)
				pf[nfd++] = (struct pollfd){ b->conn[i], POLLRDHUP, 0 };
		k = poll(pf, (nfds_t)nfd, 1000);
		if (k < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		ended(b, pf + 2, nfd - 2);
		v05__broker_expire(b, false);
		if (!(pf[0].revents & POLLIN))
			continue;
		/* Every pending connection, each answered at once without
		 * reading from it: no client can make another wait. */
		for (;;) {
			int cfd = accept4(b->lfd, NULL, NULL,
					  SOCK_NONBLOCK | SOCK_CLOEXEC);

			if (cfd < 0)
				break;
			if (!serve(b, cfd))
				close(cfd);
		}
	}
	free(pf);
	v05__broker_expire(b, true);
	return NULL;
}

static void unmap_files(struct v05_broker *b)
{
	for (uint32_t i = 0; i < V05_LANES_MAX; i++) {
		if (b->file[i])
			munmap((void *)((uintptr_t)b->file[i] &
					~(uintptr_t)(V05_PAGE - 1)), b->stride);
		if (b->mem[i])
			munmap((void *)((uintptr_t)b->mem[i] &
					~(uintptr_t)(V05_PAGE - 1)), b->stride);
		b->file[i] = b->mem[i] = NULL;
	}
}

int v05__broker_start(struct v05_segment *seg,
		      const struct v05_broker_allow *allow, int bell_fd,
		      struct v05_broker **out)
{
	struct v05_broker *b = calloc(1, sizeof(*b));
	struct sockaddr_un sa;
	socklen_t sl;
	char path[PATH_MAX];
	int ret;

	if (!b)
		return v05__fail(-ENOMEM, "broker: out of memory");
	pthread_once(&brokers_once, brokers_atfork);
	b->seg = seg;
	b->allow = *allow;
	b->bell_fd = bell_fd;
	b->me = v05_load_relaxed(&seg->ctl->owner);
	b->uid = seg->st_uid;
	b->stride = v05__lane_stride(seg->hdr.geo.lane_capacity);
	b->lfd = b->stop_fd = -1;
	for (uint32_t i = 0; i < V05_LANES_MAX; i++)
		b->conn[i] = -1;
	for (uint32_t i = 0; i < seg->nlane_fd; i++) {
		void *m = mmap(NULL, b->stride, PROT_READ | PROT_WRITE, MAP_SHARED,
			       seg->lane_fd[i], 0);

		if (m == MAP_FAILED) {
			ret = v05__fail(-errno, "broker: map lane %u: %s", i,
					v05__errstr(errno));
			goto fail;
		}
		b->file[i] = V05_AT(struct v05_ring_hdr, m, v05__lane_skew(i));
	}
	sl = broker_addr(seg->dir_fd, &sa);
	v05__segment_file(seg, V05_FILE_BROKER, 0, path, sizeof(path));
	b->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (b->lfd < 0 || b->stop_fd < 0) {
		ret = v05__fail(-errno, "broker socket: %s", v05__errstr(errno));
		goto fail;
	}
	/* Producers of other uids may search the directory (to reach the
	 * socket), never list or write it. */
	if (fchmod(seg->dir_fd, 0711)) {
		ret = v05__fail(-errno, "chmod %s: %s", path, v05__errstr(errno));
		goto fail;
	}
	/* Whatever has the name (a dead owner's socket, still held by a
	 * child it forked) goes: only this uid can have put it there, and
	 * a socket no longer named reaches no producer. */
	if (unlinkat(seg->dir_fd, "broker", 0) && errno != ENOENT) {
		ret = v05__fail(-errno, "remove %s: %s", path, v05__errstr(errno));
		goto fail;
	}
	if (bind(b->lfd, (struct sockaddr *)&sa, sl) ||
	    fchmodat(seg->dir_fd, "broker", 0666, 0) || listen(b->lfd, 64)) {
		ret = v05__fail(-errno, "broker of %s: bind %s: %s", seg->name,
				path, v05__errstr(errno));
		goto fail;
	}
	pthread_mutex_lock(&brokers_mu);
	ret = -pthread_create(&b->thread, NULL, broker_main, b);
	if (!ret) {
		b->next = brokers;
		brokers = b;
	}
	pthread_mutex_unlock(&brokers_mu);
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
	unmap_files(b);
	free(b);
	return ret;
}

void v05__broker_stop(struct v05_broker *b)
{
	uint64_t one = 1;

	if (!b)
		return;
	pthread_mutex_lock(&brokers_mu);
	for (struct v05_broker **q = &brokers; *q; q = &(*q)->next) {
		if (*q == b) {
			*q = b->next;
			break;
		}
	}
	pthread_mutex_unlock(&brokers_mu);
	if (b->forked) { /* the thread is the parent's; the fds are closed */
		free(b);
		return;
	}
	if (write(b->stop_fd, &one, sizeof(one)) != sizeof(one))
		abort(); /* an eventfd below its limit always takes it */
	pthread_join(b->thread, NULL);
	/* The name goes with the socket: a producer asking now is told at
	 * once that there is no broker. */
	unlinkat(b->seg->dir_fd, "broker", 0);
	close(b->lfd);
	close(b->stop_fd);
	unmap_files(b);
	free(b);
}
