/* SPDX-License-Identifier: MIT */
#include "waiter.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "doorbell.h"
#include "error.h"

/* Not in liburing 2.3's headers (kernel 6.7 uapi). */
#define V05_IORING_OP_FUTEX_WAIT 51
#define V05_IORING_OP_FUTEX_WAITV 53
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#define V05_FUTEX2_SIZE_U32 0x02u
#define V05_FUTEX_BITSET_ANY 0xffffffffull

enum { TAG_WAIT = 1, TAG_TIMEOUT = 2, TAG_CANCEL = 3 };
enum { T_IDLE, T_ARMED, T_WAITING, T_STOP };

const char *v05__wait_path_name(int path)
{
	switch (path) {
	case V05_WAIT_IO_URING:
		return "io_uring";
	case V05_WAIT_THREAD:
		return "thread";
	}
	return "none";
}

/* ---- io_uring path ------------------------------------------------------ */

static void prep_futex_wait(struct io_uring_sqe *sqe, uint32_t *word,
			    uint32_t expected)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = V05_IORING_OP_FUTEX_WAIT;
	/* Shared futex (no FUTEX2_PRIVATE): producers are other processes. */
	sqe->fd = (int)V05_FUTEX2_SIZE_U32;
	sqe->addr = (uint64_t)(uintptr_t)word;
	sqe->addr2 = expected;
	sqe->addr3 = V05_FUTEX_BITSET_ANY;
	sqe->user_data = TAG_WAIT;
}

/* struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 reserved; } for
 * both words: shared futexes of 32 bits. */
static void fill_waitv(struct v05_waiter *w, uint32_t e1, uint32_t e2)
{
	w->waitv[0][0] = e1;
	w->waitv[0][1] = (uint64_t)(uintptr_t)w->word;
	w->waitv[0][2] = V05_FUTEX2_SIZE_U32;
	w->waitv[1][0] = e2;
	w->waitv[1][1] = (uint64_t)(uintptr_t)w->word2;
	w->waitv[1][2] = V05_FUTEX2_SIZE_U32;
}

static void prep_futex_waitv(struct v05_waiter *w, struct io_uring_sqe *sqe)
{
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = V05_IORING_OP_FUTEX_WAITV;
	sqe->addr = (uint64_t)(uintptr_t)w->waitv;
	sqe->len = 2;
	sqe->user_data = TAG_WAIT;
}

/* Consume available CQEs (or wait for one). Returns 0 or -errno. */
static int reap(struct v05_waiter *w, bool wait)
{
	struct io_uring_cqe *cqe;
	int ret;

	for (;;) {
		ret = wait ? io_uring_wait_cqe(&w->ring, &cqe) :
			     io_uring_peek_cqe(&w->ring, &cqe);
		if (ret < 0)
			return ret == -EAGAIN && !wait ? 0 : ret;
		if ((cqe->user_data == TAG_WAIT || cqe->user_data == TAG_TIMEOUT) &&
		    w->outstanding)
			w->outstanding--;
		io_uring_cqe_seen(&w->ring, cqe);
		wait = false;
	}
}

/* Does this kernel run FUTEX_WAIT through io_uring? A wait on a private
 * word holding 0 for the value 1 must fail at once with EAGAIN. */
static int uring_trial(struct v05_waiter *w)
{
	static uint32_t trial_word;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	struct io_uring_cqe *cqe;
	int ret, res;

	if (!sqe)
		return -EBUSY;
	prep_futex_wait(sqe, &trial_word, 1);
	ret = io_uring_submit(&w->ring);
	if (ret < 0)
		return ret;
	ret = io_uring_wait_cqe(&w->ring, &cqe);
	if (ret < 0)
		return ret;
	res = cqe->res;
	io_uring_cqe_seen(&w->ring, cqe);
	return res == -EAGAIN ? 0 : (res < 0 ? res : -EPROTO);
}

static int uring_init(struct v05_waiter *w)
{
	struct io_uring_probe *probe;
	bool ok;
	int ret;

	ret = io_uring_queue_init(8, &w->ring, 0);
	if (ret < 0) {
		snprintf(w->why, sizeof(w->why), "io_uring_setup refused: %s",
			 v05__errstr(ret));
		return ret;
	}
	probe = io_uring_get_probe_ring(&w->ring);
	ok = probe && io_uring_opcode_supported(probe, V05_IORING_OP_FUTEX_WAIT) &&
	     io_uring_opcode_supported(probe, V05_IORING_OP_FUTEX_WAITV);
	if (probe)
		io_uring_free_probe(probe);
	if (!ok) {
		snprintf(w->why, sizeof(w->why),
			 "kernel lacks IORING_OP_FUTEX_WAIT(V) (needs Linux 6.7)");
		io_uring_queue_exit(&w->ring);
		return -EOPNOTSUPP;
	}
	ret = uring_trial(w);
	if (ret) {
		snprintf(w->why, sizeof(w->why), "IORING_OP_FUTEX_WAIT fails: %s",
			 v05__errstr(ret));
		io_uring_queue_exit(&w->ring);
		return ret;
	}
	w->ring_ok = true;
	w->fd = w->ring.ring_fd;
	snprintf(w->why, sizeof(w->why), "IORING_OP_FUTEX_WAIT available");
	return 0;
}

static int uring_arm(struct v05_waiter *w, uint32_t expected,
		     uint32_t expected2, int timeout_ms)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
	int ret;

	if (!sqe)
		return -EBUSY;
	if (w->word2) {
		fill_waitv(w, expected, expected2);
		prep_futex_waitv(w, sqe);
	} else {
		prep_futex_wait(sqe, w->word, expected);
	}
	w->outstanding = 1;
	if (timeout_ms >= 0) {
		struct io_uring_sqe *tsqe;

		sqe->flags |= IOSQE_IO_LINK;
		tsqe = io_uring_get_sqe(&w->ring);
		if (!tsqe) {
			/* 8 entries, 3 at most in use: cannot happen; but an
			 * unlinked wait would never end by itself. */
			sqe->opcode = IORING_OP_NOP;
			sqe->flags = 0;
			io_uring_submit(&w->ring);
			reap(w, true);
			w->outstanding = 0;
			return -EBUSY;
		}
		w->ts.tv_sec = timeout_ms / 1000;
		w->ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
		io_uring_prep_link_timeout(tsqe, &w->ts, 0);
		tsqe->user_data = TAG_TIMEOUT;
		w->outstanding = 2;
	}
	ret = io_uring_submit(&w->ring);
	if (ret < 0) {
		w->outstanding = 0;
		return ret;
	}
	return 0;
}

static void uring_disarm(struct v05_waiter *w)
{
	struct io_uring_sqe *sqe;

	reap(w, false);
	if (w->outstanding == 0)
		return;
	/* Still waiting: cancel it; the wait and its linked timeout each
	 * complete with -ECANCELED, the cancel itself with its own CQE. */
	sqe = io_uring_get_sqe(&w->ring);
	if (sqe) {
		io_uring_prep_cancel64(sqe, TAG_WAIT, 0);
		sqe->user_data = TAG_CANCEL;
		io_uring_submit(&w->ring);
	}
	while (w->outstanding) {
		int ret = reap(w, true);

		if (ret < 0 && ret != -EINTR)
			break;
	}
	reap(w, false); /* the cancel's own CQE, if it came last */
}

/* ---- thread path -------------------------------------------------------- */

/* The thread's wait: on one word, or either of two (futex_waitv, whose
 * timeout is absolute; on a kernel without it, the first word in slices
 * of 5 ms, so a ring of the second costs at most that). */
static void thread_wait(struct v05_waiter *w, uint32_t e1, uint32_t e2,
			int64_t timeout_ns)
{
	struct timespec ts;

	if (w->word2) {
		struct timespec *tsp = NULL;

		fill_waitv(w, e1, e2);
		if (timeout_ns >= 0) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += timeout_ns / 1000000000;
			ts.tv_nsec += timeout_ns % 1000000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			tsp = &ts;
		}
		if (syscall(SYS_futex_waitv, w->waitv, 2u, 0u, tsp,
			    CLOCK_MONOTONIC) >= 0 || errno != ENOSYS)
			return;
		if (timeout_ns < 0 || timeout_ns > 5000000)
			timeout_ns = 5000000;
	}
	v05__futex_wait(w->word, e1, timeout_ns);
}

static void *thread_main(void *arg)
{
	struct v05_waiter *w = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		uint32_t expected, expected2;
		int64_t timeout;

		while (w->tstate != T_ARMED && w->tstate != T_STOP)
			pthread_cond_wait(&w->cv, &w->mu);
		if (w->tstate == T_STOP)
			break;
		w->tstate = T_WAITING;
		expected = w->texpected;
		expected2 = w->texpected2;
		timeout = w->ttimeout_ns;
		pthread_mutex_unlock(&w->mu);
		thread_wait(w, expected, expected2, timeout);
		pthread_mutex_lock(&w->mu);
		if (w->tstate == T_WAITING)
			w->tstate = T_IDLE;
		/* Signal the event loop, then anyone blocked in disarm. */
		if (write(w->fd, &one, sizeof(one)) < 0) {
			/* EAGAIN at counter overflow only: still readable. */
		}
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static int thread_init(struct v05_waiter *w)
{
	int ret;

	w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->fd < 0)
		return -errno;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->tstate = T_IDLE;
	ret = pthread_create(&w->thread, NULL, thread_main, w);
	if (ret) {
		close(w->fd);
		w->fd = -1;
		return -ret;
	}
	w->thread_ok = true;
	return 0;
}

static void thread_drain_fd(struct v05_waiter *w)
{
	uint64_t v;

	while (read(w->fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		;
}

static void thread_disarm(struct v05_waiter *w)
{
	pthread_mutex_lock(&w->mu);
	if (w->tstate == T_ARMED)
		w->tstate = T_IDLE; /* never started */
	while (w->tstate == T_WAITING) {
		/* Bumping the word makes a wait that has not reached the
		 * kernel yet return at once; the wake ends one that has.
		 * Harmless to the protocol: every sleeper re-reads the word. */
		v05_fetch_add_release(w->word, 1u);
		v05__futex_wake(w->word);
		pthread_cond_wait(&w->cv, &w->mu);
	}
	thread_drain_fd(w);
	pthread_mutex_unlock(&w->mu);
}

/* ---- public (internal) API ---------------------------------------------- */

int v05__waiter_init(struct v05_waiter *w, uint32_t *word, int force)
{
	const char *env = getenv("V05_WAIT");
	int ret;

	memset(w, 0, sizeof(*w));
	w->word = word;
	w->fd = -1;
	if (force == 0 && env && !strcmp(env, "thread"))
		force = V05_WAIT_THREAD;
	if (force == 0 && env && !strcmp(env, "io_uring"))
		force = V05_WAIT_IO_URING;
	if (force != V05_WAIT_THREAD) {
		ret = uring_init(w);
		if (ret == 0) {
			w->path = V05_WAIT_IO_URING;
			return 0;
		}
		if (force == V05_WAIT_IO_URING)
			return v05__fail(ret, "io_uring wait path: %s", w->why);
	} else {
		snprintf(w->why, sizeof(w->why), "thread path requested");
	}
	ret = thread_init(w);
	if (ret)
		return v05__fail(ret, "wait thread: %s", v05__errstr(ret));
	w->path = V05_WAIT_THREAD;
	return 0;
}

void v05__waiter_fini(struct v05_waiter *w)
{
	v05__waiter_disarm(w);
	if (w->ring_ok) {
		io_uring_queue_exit(&w->ring);
		w->ring_ok = false;
	}
	if (w->thread_ok) {
		pthread_mutex_lock(&w->mu);
		w->tstate = T_STOP;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->thread, NULL);
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		close(w->fd);
		w->thread_ok = false;
	}
	w->fd = -1;
}

void v05__waiter_set_word2(struct v05_waiter *w, uint32_t *word2)
{
	v05__waiter_disarm(w);
	if (w->thread_ok)
		pthread_mutex_lock(&w->mu);
	w->word2 = word2;
	if (w->thread_ok)
		pthread_mutex_unlock(&w->mu);
}

int v05__waiter_arm(struct v05_waiter *w, uint32_t expected,
		    uint32_t expected2, int timeout_ms)
{
	int ret = 0;

	v05__waiter_disarm(w);
	if (w->path == V05_WAIT_IO_URING) {
		ret = uring_arm(w, expected, expected2, timeout_ms);
	} else {
		pthread_mutex_lock(&w->mu);
		w->texpected = expected;
		w->texpected2 = expected2;
		w->ttimeout_ns = timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000000;
		w->tstate = T_ARMED;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
	if (ret == 0)
		w->armed = true;
	return ret;
}

int v05__waiter_block(struct v05_waiter *w)
{
	if (!w->armed)
		return 0;
	if (w->path == V05_WAIT_IO_URING) {
		struct io_uring_cqe *cqe;
		/* Wait for the first CQE without consuming it: disarm reaps. */
		int ret = io_uring_wait_cqe(&w->ring, &cqe);

		return ret == -EINTR ? -EINTR : 0;
	} else {
		struct pollfd pfd = { .fd = w->fd, .events = POLLIN };

		if (poll(&pfd, 1, -1) < 0 && errno == EINTR)
			return -EINTR;
		return 0;
	}
}

void v05__waiter_disarm(struct v05_waiter *w)
{
	if (!w->armed)
		return;
	if (w->path == V05_WAIT_IO_URING)
		uring_disarm(w);
	else
		thread_disarm(w);
	w->armed = false;
}
