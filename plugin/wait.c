/* SPDX-License-Identifier: MIT */
/*
 * The wait API: a pollable fd for an event loop (v05_fd, v05_arm), a
 * blocking wait, whether there is work, and, for a caller that knows when
 * its own rewards arrive, when work comes without one (v05_next_deadline).
 * Arming follows the doorbell's protocol (shm/doorbell.h): announce
 * sleeping, check the lanes again, then wait, so no producer's publish is
 * missed.
 */
#include <errno.h>
#include <string.h>

#include "top.h"
#include "../shm/doorbell.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "mechanics/one_thread.h"

/* Awake: sleeping off on both doorbells. */
static void bells_done(struct v05_plugin *p)
{
	v05__doorbell_done(p->seg.bell);
	if (p->bell2)
		v05__doorbell_done(p->bell2);
}

void v05__disarm(struct v05_plugin *p)
{
	if (!p->armed)
		return;
	v05__waiter_disarm(&p->waiter);
	bells_done(p);
	p->armed = false;
}

V05_API int v05_fd(struct v05_plugin *p)
{
	return p ? p->waiter.fd : v05__fail(-EINVAL, "fd: NULL plugin");
}

V05_API int v05_arm(struct v05_plugin *p, int timeout_ms)
{
	V05_ONE_THREAD(p, "arm");
	int64_t dl;
	uint32_t word, word2 = 0;
	int ret;

	if (!p)
		return v05__fail(-EINVAL, "arm: NULL plugin");
	v05__disarm(p);
	if (p->qlen || p->journal_error_pending || p->queue_error)
		return 1;
	dl = v05__schedule_next_deadline_ns(p, v05__now_ns());
	if (dl == 0)
		return 1;
	if (dl > 0) {
		int ms = (int)((dl + 999999) / 1000000);

		if (timeout_ms < 0 || ms < timeout_ms)
			timeout_ms = ms;
	}
	/* Both doorbells (the segment's, and the brokered producers'
	 * memfd): sleeping announced on each before F2 and the re-check. */
	if (p->bell2)
		word2 = v05__doorbell_prepare2(p->seg.bell, p->bell2,
					       v05__segment_asym(&p->seg), &word);
	else
		word = v05__doorbell_prepare(p->seg.bell,
					     v05__segment_asym(&p->seg));
	if (v05__lanes_pending(&p->lanes)) {
		bells_done(p);
		return 1;
	}
	ret = v05__waiter_arm(&p->waiter, word, word2, timeout_ms);
	if (ret) {
		bells_done(p);
		return v05__fail(ret, "arm the doorbell wait: %s", v05__errstr(ret));
	}
	p->armed = true;
	v05__count(p, V05_C_WAITS, 1);
	return 0;
}

V05_API int v05_wait(struct v05_plugin *p, int timeout_ms)
{
	V05_ONE_THREAD(p, "wait");
	int ret = v05_arm(p, timeout_ms);

	if (ret != 0)
		return ret;
	ret = v05__waiter_block(&p->waiter);
	v05__disarm(p);
	if (ret == -EINTR)
		return v05__fail(-EINTR, "wait interrupted by a signal");
	if (v05__lanes_pending(&p->lanes) ||
	    v05__schedule_next_deadline_ns(p, v05__now_ns()) == 0) {
		v05__count(p, V05_C_WAKEUPS, 1);
		return 1;
	}
	return 0;
}

V05_API int v05_pending(struct v05_plugin *p)
{
	V05_ONE_THREAD(p, "pending");
	if (!p)
		return v05__fail(-EINVAL, "pending: NULL plugin");
	return p->qlen || p->journal_error_pending || p->queue_error ||
	       v05__lanes_pending(&p->lanes) ||
	       v05__schedule_next_deadline_ns(p, v05__now_ns()) == 0;
}

V05_API int v05_next_deadline(struct v05_plugin *p, int64_t *ns)
{
	V05_ONE_THREAD(p, "next_deadline");
	if (!p || !ns)
		return v05__fail(-EINVAL, "next_deadline: NULL argument");
	/* The same conditions as v05_pending but the lanes: the caller
	 * knows its own pushes. */
	if (p->qlen || p->journal_error_pending || p->queue_error)
		*ns = 0;
	else
		*ns = v05__schedule_next_deadline_ns(p, v05__now_ns());
	return 0;
}

V05_API const char *v05_wait_path(const struct v05_plugin *p)
{
	return p ? v05__wait_path_name(p->waiter.path) : "none";
}

V05_API const char *v05_wait_reason(const struct v05_plugin *p)
{
	return p ? p->waiter.why : "";
}
