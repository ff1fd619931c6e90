/* SPDX-License-Identifier: MIT */
/*
 * The doorbell: producers make no syscall unless the consumer sleeps.
 *
 *   consumer (about to sleep)           producer (after publishing)
 *   w = load(doorbell)                  store-release(tail)        (R2)
 *   store(sleeping, 1)                  F1: fence seq_cst
 *   F2: fence seq_cst                   if load(sleeping) == 1 and
 *   if any lane has data: do not sleep     CAS(sleeping, 1 -> 0):
 *   futex_wait(doorbell, w)                fetch_add(doorbell, 1)
 *   store(sleeping, 0)                     futex_wake(doorbell)
 *
 * F1 and F2 pair: of "the producer's load sees sleeping = 1" and "the
 * consumer's re-check sees the new tail", at least one holds, so a record
 * is never left behind a sleeping consumer. The consumer reads w before it
 * sets sleeping, so a ring after that makes futex_wait return at once (the
 * word differs). The CAS lets one producer ring per sleep, not all of them.
 * The protocol is model-checked in tests/doorbell.pml.
 *
 * Asymmetric fence. A full fence on every publish stalls the producer on
 * the ownership transfer of the tail line, which the consumer reads all
 * the time: it cost a third of single-record throughput. So when the
 * segment's creator found membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)
 * usable (V05_SHM_F_ASYM_DOORBELL in the header) and the producer's process registered for it, F1 is
 * only a compiler barrier, and the consumer, about to sleep (the rare
 * path), adds F2': membarrier(GLOBAL_EXPEDITED), which runs a full barrier
 * on every CPU running a registered process. Either F1 really is a fence,
 * or F2' put one on the producer's CPU between its tail store and its load
 * of `sleeping`: the pairing above holds in both cases (the asymmetric
 * Dekker of liburcu and folly). A producer that cannot register keeps the
 * full fence; V05_DOORBELL=fence at create turns the scheme off.
 */
#ifndef V05_SHM_DOORBELL_H
#define V05_SHM_DOORBELL_H

#include <stdbool.h>
#include <stdint.h>

#include "atomics.h"
#include "layout.h"

void v05__doorbell_ring(struct v05_shm_doorbell *bell);

/* membarrier(GLOBAL_EXPEDITED) works here (creator), and registration
 * for it (producers). 1/0, and 0 on success for register. */
int v05__membarrier_usable(void);
int v05__membarrier_register(void);
/* F2': a full barrier on every CPU running a registered process. */
int v05__membarrier_global(void);

/* Producer: call after every publish. light: this process is registered
 * and the segment's consumer issues F2' (see above). */
static inline void v05__doorbell_after_publish(struct v05_shm_doorbell *bell,
					       bool light)
{
	if (light)
		v05_compiler_barrier(); /* F1 (light), pairs with F2' */
	else
		v05_fence_seq_cst(); /* F1, pairs with F2 */
	/* Relaxed: ordered by F1; a stale 0 is impossible when it matters
	 * (see above), a stale 1 only costs a failed CAS. */
	if (v05_load_relaxed(&bell->sleeping))
		v05__doorbell_ring(bell);
}

/* Consumer: announce the sleep; returns the word to wait on. The caller
 * must then re-check every lane before waiting. */
static inline uint32_t v05__doorbell_prepare(struct v05_shm_doorbell *bell,
					     bool asym)
{
	/* Acquire: a ring's release increment orders its publish before. */
	uint32_t w = v05_load_acquire(&bell->doorbell);

	/* Relaxed: F2 orders it before the lane re-check. */
	v05_store_relaxed(&bell->sleeping, 1u);
	v05_fence_seq_cst(); /* F2, pairs with F1 */
	/* asym: the header's flag (fixed at create, checksummed; no producer
	 * can change it under us). If F2' fails (it passed at create, so it
	 * should not), the caller's re-check below may race a light
	 * producer: ring ourselves so the wait cannot block for good. */
	if (asym && v05__membarrier_global())
		v05_fetch_add_release(&bell->doorbell, 1u);
	return w;
}

/*
 * The same for two doorbells at once (the segment's, and the brokered
 * producers'): both words read, sleeping set on both, then one F2 (and
 * F2') for both, which a producer ringing either pairs with. Returns the
 * second word; *w1 the first.
 */
static inline uint32_t v05__doorbell_prepare2(struct v05_shm_doorbell *b1,
					      struct v05_shm_doorbell *b2,
					      bool asym, uint32_t *w1)
{
	/* Acquire: a ring's release increment orders its publish before. */
	uint32_t w2 = v05_load_acquire(&b2->doorbell);

	*w1 = v05_load_acquire(&b1->doorbell);
	/* Relaxed: F2 orders them before the lane re-check. */
	v05_store_relaxed(&b2->sleeping, 1u);
	v05_store_relaxed(&b1->sleeping, 1u);
	v05_fence_seq_cst(); /* F2, pairs with F1 of either doorbell */
	/* As in v05__doorbell_prepare: F2' failing, ring ourselves. */
	if (asym && v05__membarrier_global())
		v05_fetch_add_release(&b1->doorbell, 1u);
	return w2;
}

/* Consumer: awake again. Relaxed: a producer seeing a stale 1 rings once
 * needlessly; nothing depends on it. */
static inline void v05__doorbell_done(struct v05_shm_doorbell *bell)
{
	v05_store_relaxed(&bell->sleeping, 0u);
}

/* futex(2) on a shared word (no FUTEX_PRIVATE_FLAG: several processes). */
int v05__futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns);
int v05__futex_wake(uint32_t *word);

#endif
