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
	int fd;         /* pollable                              */
	bool armed;
	char why[160];
	/* io_uring path */
	struct io_uring ring;
	bool ring_ok;
	unsigned outstanding; /* our SQEs without a CQE yet */
	struct __kernel_timespec ts;
	/* thread path */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool thread_ok;
	int tstate; /* see waiter.c */
	uint32_t texpected;
	int64_t ttimeout_ns;
};

/* force: 0 auto, V05_WAIT_IO_URING or V05_WAIT_THREAD. $V05_WAIT
 * ("io_uring" or "thread") overrides auto. */
int v05__waiter_init(struct v05_waiter *w, uint32_t *word, int force);
void v05__waiter_fini(struct v05_waiter *w);

/* Start a wait for *word != expected, ending by itself after timeout_ms
 * (-1: never); the fd turns readable when it ends. */
int v05__waiter_arm(struct v05_waiter *w, uint32_t expected, int timeout_ms);

/* Block until the armed wait ends. 0, or -EINTR (a signal; still armed). */
int v05__waiter_block(struct v05_waiter *w);

/* End the armed wait if it still runs and consume its completion, so the fd
 * is no longer readable. Idempotent. */
void v05__waiter_disarm(struct v05_waiter *w);

const char *v05__wait_path_name(int path);

#endif
