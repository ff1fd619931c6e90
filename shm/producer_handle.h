/* SPDX-License-Identifier: MIT */
/*
 * The producer handle and what the producer's files share: producer.c
 * (the push path, flush, close), producer_claim.c (a lane claimed, by
 * name or through the broker, re-granted when a brokered lane's owner is
 * gone; the open calls), producer_procs.c (this process's producers: the
 * fork generation, the brokered ones a forked child disconnects, the
 * segments a plugin of this process owns). Not installed.
 */
#ifndef V05_SHM_PRODUCER_HANDLE_H
#define V05_SHM_PRODUCER_HANDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "segment.h"

struct v05_producer {
	struct v05_ring_prod ring;
	struct v05_segment *seg; /* &own, or a mapping the caller keeps */
	struct v05_segment own;
	struct v05_ring_hdr *lane;
	void *lane_map;  /* this producer's own mapping of its lane, or NULL */
	size_t lane_len;
	uint64_t owner;
	uint32_t lane_index;
	unsigned flags;
	unsigned fork_gen;
	bool light; /* asymmetric doorbell: no fence on publish */
	bool mapped; /* on the owner's own mapping (v05__producer_open_mapped) */
	/* Through the broker: the grant's connection (-1 once the owner is
	 * gone and no other granted a lane yet), and when to look at it
	 * next (CLOCK_MONOTONIC_COARSE ns). */
	bool brokered;
	int conn;
	uint64_t next_check_ns;
	struct v05_producer *next; /* brokered producers, for fork */
};

/* How often a brokered producer looks whether its owner is still there
 * (one poll() of its connection; in the publish path a coarse clock read
 * decides, and only a brokered producer pays it). */
#define CHECK_NS 20000000ull

/* producer_procs.c: a handle belongs to the process that opened it (its
 * fork generation); the atfork handlers, registered once; the brokered
 * producers' list (add, or remove); a producer of this process claiming
 * (on) or leaving its lane of a segment this process's plugin owns. */
/* Hidden at its declaration too: the push path's check_handle reads it,
 * and an extern of default visibility is reached through the GOT (one
 * more load per push, callgrind). */
extern unsigned v05__producer_fork_gen __attribute__((visibility("hidden")));
void v05__producer_atfork(void);
void v05__producer_list(struct v05_producer *p, bool add);
void v05__producer_mark_inproc(const struct v05_producer *p, bool on);

/* producer_claim.c: a brokered producer's look at its owner (at most every
 * CHECK_NS), and a new grant with what the dead owner's lane held when the
 * owner is gone. */
void v05__producer_owner_check(struct v05_producer *p);

#endif
