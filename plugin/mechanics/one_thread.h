/* SPDX-License-Identifier: MIT */
/*
 * A plugin handle is used by one thread at a time (include/v05/plugin.h).
 * Builds with debug info (meson's debug option: the default
 * debugoptimized, the sanitizer and test builds; V05_CHECK_THREADS) check
 * it where it is cheap: a call that reads or writes the
 * plugin's state takes the handle with a CAS of its in_call word from 0 to
 * the calling thread's token and gives it back when it returns; a call
 * that finds another thread's token answers -EBUSY, naming the call, and
 * does nothing. Release builds (the wheel, the benchmarks) compile it out.
 *
 * The word orders nothing (relaxed): it detects two calls at once, it does
 * not make a second thread's call safe, so TSan still reports the data
 * race of callers that do not serialise their calls.
 */
#ifndef V05_PLUGIN_ONE_THREAD_H
#define V05_PLUGIN_ONE_THREAD_H

#include <errno.h>
#include <stdint.h>

#include "internal.h"
#include "../../shm/atomics.h"
#include "../../shm/error.h"

#ifdef V05_CHECK_THREADS
struct v05__call {
	struct v05_plugin *p; /* the handle taken, NULL if none */
	int ok;               /* taken, or already this thread's */
};

/* An address unique to each live thread. */
static inline uintptr_t v05__thread_token(void)
{
	static _Thread_local char token;

	return (uintptr_t)&token;
}

/* A call made from inside another on the same thread (v05_wait arms)
 * finds its own token: it goes on and gives nothing back. */
static inline struct v05__call v05__call_enter(struct v05_plugin *p)
{
	struct v05__call c = { NULL, 1 };
	uintptr_t seen = 0, me = v05__thread_token();

	/* Relaxed: detection only (above). */
	if (p && v05_cas_relaxed(&p->in_call, &seen, me))
		c.p = p;
	else if (p)
		c.ok = seen == me;
	return c;
}

static inline void v05__call_leave(struct v05__call *c)
{
	if (c->p)
		v05_store_relaxed(&c->p->in_call, (uintptr_t)0);
}

/* First in a call on p (a NULL p takes nothing: the call's own check
 * refuses it). */
#define V05_ONE_THREAD(p, what)                                              \
	struct v05__call v05__call __attribute__((cleanup(v05__call_leave))) = \
		v05__call_enter(p);                                          \
	if (!v05__call.ok)                                                   \
		return v05__fail(-EBUSY,                                     \
				 "%s: another thread is in a call on plugin %s; a plugin handle is used by one thread at a time (v05/plugin.h)", \
				 (what), (p)->seg.name)
#else
#define V05_ONE_THREAD(p, what) ((void)0)
#endif

#endif
