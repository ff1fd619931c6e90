/* SPDX-License-Identifier: MIT */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

#include "v05/common.h"

/* Thread-local so concurrent callers never see each other's messages. */
static _Thread_local char errbuf[256];

int v05__fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
	va_end(ap);
	return err;
}

void v05__clear_error(void)
{
	errbuf[0] = '\0';
}

V05_API const char *v05_errmsg(void)
{
	return errbuf;
}

V05_API const char *v05_version(void)
{
	return V05_VERSION_STRING;
}
