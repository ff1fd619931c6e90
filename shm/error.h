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

/* Clear the calling thread's explanation (at the start of public calls). */
void v05__clear_error(void);

#endif
