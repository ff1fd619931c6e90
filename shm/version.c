/* SPDX-License-Identifier: MIT */
/* The library's version (v05/common.h), and its check against the version
 * of the headers a program was built with. */
#include <errno.h>
#include <stdint.h>

#include "error.h"
#include "v05/common.h"

V05_API const char *v05_version(void)
{
	return V05_VERSION_STRING;
}

/* major.minor as one ordered number. */
static uint64_t ordinal(uint32_t major, uint32_t minor)
{
	return (uint64_t)major << 32 | minor;
}

V05_API int v05_check_version(uint32_t major, uint32_t minor)
{
	v05__clear_error();
	if (ordinal(V05_VERSION_MAJOR, V05_VERSION_MINOR) >= ordinal(major, minor))
		return 0;
	return v05__fail(-ENOTSUP,
			 "libv05 %s is older than %u.%u, the version this program's headers need: install libv05 %u.%u or later, or build against the headers of %s",
			 V05_VERSION_STRING, major, minor, major, minor,
			 V05_VERSION_STRING);
}
