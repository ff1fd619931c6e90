/* SPDX-License-Identifier: MIT */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "v05/common.h"

/* Thread-local so concurrent callers never see each other's messages. */
static _Thread_local char errbuf[512];

int v05__fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
	va_end(ap);
	return err;
}

int v05__fail_str(int err, const char *msg)
{
	size_t i = 0;

	for (; msg[i] && i < sizeof(errbuf) - 1; i++)
		errbuf[i] = msg[i];
	errbuf[i] = '\0';
	return err;
}

const char *v05__errstr(int err)
{
	/* strerror's buffer may be shared between threads; this one is a
	 * constant table (glibc >= 2.32). */
	const char *s = strerrordesc_np(err < 0 ? -err : err);

	return s ? s : "unknown error";
}

void v05__clear_error(void)
{
	errbuf[0] = '\0';
}

V05_API const char *v05_errmsg(void)
{
	return errbuf;
}
