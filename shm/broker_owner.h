/* SPDX-License-Identifier: MIT */
/*
 * The broker's owner side, shared by its two files: broker.c (the thread,
 * its socket, each connection served, fork) and broker_grant.c (which lane
 * a producer gets, the grant made or made again, its end). Not installed.
 */
#ifndef V05_SHM_BROKER_OWNER_H
#define V05_SHM_BROKER_OWNER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker.h"
#include "layout.h"

struct v05_broker {
	struct v05_segment *seg;
	pthread_t thread;
	int lfd;     /* the listening socket          */
	int stop_fd; /* an eventfd: written at stop   */
	int bell_fd; /* the brokered producers' doorbell (the caller's) */
	uint64_t me; /* the owner's word: the unclaimed grant's token */
	uint32_t uid;
	bool forked; /* a copy in a forked child: no thread, no descriptor */
	struct v05_broker_allow allow;
	/* Per lane, the broker thread's alone: the connection of its
	 * current grant (-1: none), that grant's number (kept after the
	 * grant ends), and when it was made (an unclaimed one ends after
	 * V05_BROKER_HOLD_NS). */
	int conn[V05_LANES_MAX];
	uint32_t conn_grant[V05_LANES_MAX];
	uint32_t start[V05_LANES_MAX]; /* the index its ring started at */
	uint64_t granted_ns[V05_LANES_MAX];
	/* The broker's own mappings: each lane's file (its owner word and
	 * tail), and the last grant's memfd (its owner word and tail), kept
	 * after the grant ends until the consumer gives the lane back or the
	 * broker grants it again. The view is the consumer's to remap; the
	 * broker never reads through it. */
	struct v05_ring_hdr *file[V05_LANES_MAX];
	struct v05_ring_hdr *mem[V05_LANES_MAX];
	size_t stride;
	struct v05_broker *next; /* the process's list (fork, broker.c) */
};

/* What reserve_lane found. */
struct v05_broker_pick {
	int lane;   /* -1: none free; why in msg */
	bool again; /* an ended grant's lane, granted again */
};

/*
 * A lane for a producer: a free drained file, or else the lane of an
 * ended grant the consumer has drained and not yet taken back. Reserved
 * (the file's owner word ours, or the ended grant claimed: lanes.h). No
 * lane: pick.lane -1 and msg (len bytes) saying what holds each lane.
 */
struct v05_broker_pick v05__broker_reserve(struct v05_broker *b, char *msg,
					   size_t len);

/* Grant the lane reserved for peer: the memfd (ours to send and close),
 * or a negative errno with the reservation given back. */
int v05__broker_grant(struct v05_broker *b, struct v05_broker_pick pick,
		      const struct v05_peer *peer);

/* Lane i's grant is over (its connection closed, never claimed, or not
 * sent): say so to the consumer, and wake it. */
void v05__broker_end(struct v05_broker *b, uint32_t i);

/* Grants never claimed within V05_BROKER_HOLD_NS, or given back by the
 * consumer itself (a cut-off), end; every one if all. The memfds of
 * grants given back are unmapped. */
void v05__broker_expire(struct v05_broker *b, bool all);

#endif
