/* SPDX-License-Identifier: MIT */
/*
 * v05 — common definitions shared by every public header.
 *
 * Conventions (as in liburing): every fallible call returns 0 or a count on
 * success and a negative errno on failure. Every failing call also sets a
 * one-line explanation of that failure for the calling thread in
 * v05_errmsg() (never an earlier failure's).
 */
#ifndef V05_COMMON_H
#define V05_COMMON_H

#include <stdint.h>

#include "v05/version.h" /* V05_VERSION_*: generated from meson.build */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(V05_BUILDING_LIBRARY)
#define V05_API __attribute__((visibility("default")))
#else
#define V05_API
#endif

/* Library version as "MAJOR.MINOR.PATCH" (the library's, which may differ
 * from V05_VERSION_STRING of the headers a program was built with). */
V05_API const char *v05_version(void);

/*
 * Run time: 0 if the library this program runs with is version
 * major.minor or later, else -ENOTSUP with a message naming both
 * versions (v05_errmsg()). The dynamic loader refuses a library of
 * another soname (an incompatible one), not an older one of the same:
 * that may lack what newer headers declare (a call, a constant, a field
 * of a size-tagged struct, a mode). Call it first with the headers'
 * version, V05_CHECK_VERSION() below; a patch release adds nothing, so
 * the patch number is not compared. Example:
 *
 *	if (V05_CHECK_VERSION() < 0) {
 *		fprintf(stderr, "%s\n", v05_errmsg());
 *		return 1;
 *	}
 */
V05_API int v05_check_version(uint32_t major, uint32_t minor);
#define V05_CHECK_VERSION() \
	v05_check_version(V05_VERSION_MAJOR, V05_VERSION_MINOR)

/*
 * The library's public structs as it lays them out, one line each: "V
 * VERSION", then per struct "S NAME SIZE" (" tagged" after it: a
 * size-tagged struct, which may grow at its end) followed by its fields,
 * "F STRUCT FIELD OFFSET SIZE TYPE" (TYPE as C spells it, arrays T[N]).
 * For bindings that mirror the structs: compare at load, refuse a
 * library that differs (the Python package does). A static string.
 */
V05_API const char *v05_abi(void);

/*
 * The explanation of the calling thread's last failed v05 call. Like errno:
 * read it right after a call returned a negative errno; after a call that
 * succeeded its content is unspecified (most calls clear it). Valid until
 * the thread's next v05 call.
 */
V05_API const char *v05_errmsg(void);

/*
 * The integer constant of the public headers named `name` (a flag, a
 * decision kind, a limit: "V05_DF_PADDED", "V05_UID_MAX_BYTES", ...), for
 * bindings that take them from the library rather than copy them.
 * -ENOENT if there is none of that name. Enumerations with names (modes,
 * sigmas, schedules, actions) have their *_name() functions.
 */
V05_API int v05_constant(const char *name, int64_t *value);

#ifdef __cplusplus
}
#endif

#endif /* V05_COMMON_H */
