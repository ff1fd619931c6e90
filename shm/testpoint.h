/* SPDX-License-Identifier: MIT */
/*
 * Test points: named places between two steps of a multi-step change of a
 * segment's names (create, replace, takeover, reclaim) where a test makes
 * the process die or wait, to show that every state in between is one the
 * next process recovers from. Compiled into builds with debug info only
 * (meson's debug option, as V05_CHECK_THREADS: the test and sanitizer
 * builds); release builds (the wheel, the benchmarks) have none.
 *
 * A point acts when V05_TEST_POINT names it, as V05_TEST_POINT_ACTION
 * says:
 *   kill        SIGKILL the process there (the default);
 *   fd:W:R      write one byte to descriptor W, then read one byte from
 *               descriptor R before going on: the test knows the process
 *               stands there and chooses when it goes on (no sleep).
 * V05_TEST_POINT_SKIP=n lets the point pass n times before it acts.
 */
#ifndef V05_SHM_TESTPOINT_H
#define V05_SHM_TESTPOINT_H

#ifdef V05_TEST_POINTS
void v05__test_point(const char *where);
#else
static inline void v05__test_point(const char *where)
{
	(void)where;
}
#endif

#endif
