/* SPDX-License-Identifier: MIT */
/* Per-thread error explanations behind v05_errmsg(). */
#ifndef V05_SHM_ERROR_H
#define V05_SHM_ERROR_H

/*
 * Record a one-line explanation for the calling thread and return err, which
 * must be a negative errno: `return v05__fail(-EINVAL, "cost %g ...", c);`.
 */
int v05__fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The same with a fixed message, for failure paths next to a hot path
 * (a full lane): no formatting. */
int v05__fail_str(int err, const char *msg);

/* Thread-safe strerror: the errno's description ("unknown error" if none). */
const char *v05__errstr(int err);

/* Clear the calling thread's explanation (at the start of public calls). */
void v05__clear_error(void);

#endif
