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

/*
 * Release and acquire fences: the two sides of a sequence word (a
 * seqlock) that lets a reader in another process copy what the owner
 * moves with plain stores (the prompt table's moves, the running fit's
 * folds). The writer stores the word odd, then the release fence, then
 * its changes, then the word even with release; the reader loads the
 * word with acquire, copies, then the acquire fence, then loads the word
 * again: a copy that saw any of the changes sees the odd word or a later
 * one (the fences pair), so equal even words mean a whole copy. The
 * owner's plain stores and the reader's copy race in the C memory
 * model's terms; across processes, with these fences, each word read is
 * one the owner wrote and the sequence word decides what is kept. TSan
 * does not model fences: no test runs such a reader in a thread of the
 * writer's process.
 */
#define v05_fence_release() __atomic_thread_fence(__ATOMIC_RELEASE)
#define v05_fence_acquire() __atomic_thread_fence(__ATOMIC_ACQUIRE)

/*
 * The writer's side (its only writer): odd before the first store of a
 * change, even after the last. A word left odd by a writer killed inside
 * a change stays odd through the next one and changes value, so a reader
 * never takes a copy across either. NULL: no reader to tell.
 */
static inline uint32_t v05_seq_begin(uint32_t *seq)
{
	uint32_t s;

	if (!seq)
		return 0;
	s = (v05_load_relaxed(seq) + 1) | 1;
	v05_store_relaxed(seq, s);
	v05_fence_release(); /* pairs with v05_seq_retry's acquire fence */
	return s;
}

static inline void v05_seq_end(uint32_t *seq, uint32_t s)
{
	if (seq) /* pairs with v05_seq_read's acquire load */
		v05_store_release(seq, s + 1);
}

/* The reader's side: v05_seq_read before the copy (odd: a change is
 * under way, try again), v05_seq_retry after it (true: the copy may be
 * torn, try again). */
static inline uint32_t v05_seq_read(const uint32_t *seq)
{
	return v05_load_acquire(seq);
}

static inline bool v05_seq_retry(const uint32_t *seq, uint32_t s)
{
	v05_fence_acquire(); /* pairs with v05_seq_begin's release fence */
	return (s & 1) || v05_load_relaxed(seq) != s;
}

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
