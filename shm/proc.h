/* SPDX-License-Identifier: MIT */
/*
 * Owner words: who holds a segment or a lane, in one u64 that a CAS can
 * claim. High 32 bits: the pid; low 32 bits: the low half of the process's
 * start time in clock ticks since boot (/proc/PID/stat field 22). The pair
 * tells a live owner from a dead one whose pid was reused; a false "alive"
 * needs the same pid to come back exactly 2^32 ticks (497 days at 100 Hz)
 * after the first start. 0 means "no owner". All processes sharing a
 * segment must share a pid namespace (as they share /dev/shm).
 */
#ifndef V05_SHM_PROC_H
#define V05_SHM_PROC_H

#include <stdint.h>
#include <sys/types.h>

/* The calling process's owner word, or 0 if /proc is unreadable. */
uint64_t v05__owner_self(void);

static inline uint32_t v05__owner_pid(uint64_t owner)
{
	return (uint32_t)(owner >> 32);
}

/* 1 if the process named by the owner word runs (not a zombie), else 0. */
int v05__owner_alive(uint64_t owner);

/* Start time of pid in clock ticks since boot, and its state letter. */
int v05__proc_stat(pid_t pid, uint64_t *start_ticks, char *state);

/* CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds. */
uint64_t v05__now_ns(void);
uint64_t v05__wall_ns(void);
/* CLOCK_MONOTONIC_COARSE: the time of the last kernel tick, at most a tick
 * (1 to 4 ms) behind v05__now_ns and never ahead of it; a few loads from
 * the vDSO page, no time-stamp counter. For intervals of milliseconds. */
uint64_t v05__coarse_ns(void);

#endif
