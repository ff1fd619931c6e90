/* SPDX-License-Identifier: MIT */
/*
 * The only atomic operations v05 uses, by name. Every call site of a release
 * store names the acquire load it pairs with (R<n>/A<n> in the comments, as
 * DPDK's rte_ring does), and every relaxed access says why relaxed is enough.
 *
 * The fields are plain fixed-width integers in shared memory; the GCC/Clang
 * __atomic builtins are lock-free and address-free for 4- and 8-byte aligned
 * words on every target v05 builds for, so they work across processes.
 */
#ifndef V05_SHM_ATOMICS_H
#define V05_SHM_ATOMICS_H

#include <stdbool.h>
#include <stdint.h>

/*
 * V05_TSAN: built with ThreadSanitizer, which does not see the vector moves
 * a compiler makes of a 32-byte copy. The lanes then copy records field by
 * field on both sides (lanes.c, producer.c), so that the thread stress test
 * checks the ring's publication order.
 */
#if defined(__SANITIZE_THREAD__)
#define V05_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define V05_TSAN 1
#endif
#endif

#define v05_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define v05_load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define v05_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define v05_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define v05_fetch_add_relaxed(p, v) \
	__atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define v05_fetch_add_release(p, v) \
	__atomic_fetch_add((p), (v), __ATOMIC_RELEASE)
#define v05_exchange_acq_rel(p, v) __atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
/* Strong CAS; on failure *expected receives the current value. */
#define v05_cas_acq_rel(p, expected, desired)                              \
	__atomic_compare_exchange_n((p), (expected), (desired), false,     \
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* Strong CAS that orders nothing: for a word that only detects overlap
 * (plugin/mechanics/one_thread.h), never one that hands data over. */
#define v05_cas_relaxed(p, expected, desired)                              \
	__atomic_compare_exchange_n((p), (expected), (desired), false,     \
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED)

/*
 * Full fence. Used only where a store must be ordered before a later load of
 * another location (Dekker's StoreLoad): the doorbell's sleeping flag. The
 * two fences of that protocol pair with each other (see doorbell.c).
 */
/* TSan does not model fences (gcc says so with -Wtsan, silenced in TSan
 * builds): the words ordered by this fence are all atomics, so TSan has no
 * race to report on them either way. */
#define v05_fence_seq_cst() __atomic_thread_fence(__ATOMIC_SEQ_CST)

/* Orders nothing at run time; keeps the compiler from moving accesses
 * across it (the light side of the asymmetric doorbell, doorbell.h). */
#define v05_compiler_barrier() __asm__ __volatile__("" ::: "memory")

static inline void v05_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif
