/* SPDX-License-Identifier: MIT */
/*
 * The consumer's wait on the doorbell word, pollable by an event loop.
 *
 * io_uring path: an IORING_OP_FUTEX_WAIT (kernel >= 6.7; the SQE is filled
 * by hand, liburing 2.3 has no helper) linked to a timeout; the ring's fd is
 * readable once either completes.
 * Thread path (io_uring or its futex op refused: old kernel, seccomp,
 * kernel.io_uring_disabled): a thread does the futex wait and signals an
 * eventfd. Which path and why: the struct's ->path and ->why.
 *
 * A second word (the brokered producers' doorbell, in a memfd of its own,
 * v05__waiter_set_word2) makes the wait one on either word:
 * IORING_OP_FUTEX_WAITV (Linux 6.7, with FUTEX_WAIT) or futex_waitv(2)
 * (Linux 5.16) on the thread; a thread on an older kernel waits on the
 * first word in slices of at most 5 ms.
 */
#ifndef V05_SHM_WAITER_H
#define V05_SHM_WAITER_H

#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

struct v05_waiter {
	int path;       /* V05_WAIT_IO_URING or V05_WAIT_THREAD */
	uint32_t *word; /* the doorbell word in the segment     */
	uint32_t *word2; /* the brokered producers' doorbell, or NULL */
	int fd;         /* pollable                              */
	bool armed;
	char why[160];
	/* io_uring path */
	struct io_uring ring;
	bool ring_ok;
	unsigned outstanding; /* our SQEs without a CQE yet */
	struct __kernel_timespec ts;
	/* struct futex_waitv x 2 (the kernel copies it at submit). */
	uint64_t waitv[2][3];
	/* thread path */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool thread_ok;
	int tstate; /* see waiter.c */
	uint32_t texpected, texpected2;
	int64_t ttimeout_ns;
};

/* force: 0 auto, V05_WAIT_IO_URING or V05_WAIT_THREAD. $V05_WAIT
 * ("io_uring" or "thread") overrides auto. */
int v05__waiter_init(struct v05_waiter *w, uint32_t *word, int force);
void v05__waiter_fini(struct v05_waiter *w);

/* Wait on word2 too from now on (not while armed). */
void v05__waiter_set_word2(struct v05_waiter *w, uint32_t *word2);

/* Start a wait for *word != expected (or *word2 != expected2), ending by
 * itself after timeout_ms (-1: never); the fd turns readable when it
 * ends. */
int v05__waiter_arm(struct v05_waiter *w, uint32_t expected,
		    uint32_t expected2, int timeout_ms);

/* Block until the armed wait ends. 0, or -EINTR (a signal; still armed). */
int v05__waiter_block(struct v05_waiter *w);

/* End the armed wait if it still runs and consume its completion, so the fd
 * is no longer readable. Idempotent. */
void v05__waiter_disarm(struct v05_waiter *w);

const char *v05__wait_path_name(int path);

#endif
