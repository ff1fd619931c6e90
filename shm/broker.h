/* SPDX-License-Identifier: MIT */
/*
 * The lane broker: how a producer of another uid gets a lane without being
 * able to open any of the segment's files. A thread of the owner's process
 * listens on a unix socket; a producer connects, the broker checks it
 * against the owner's allow-list (SO_PEERCRED, SO_PEERGROUPS), reserves a
 * free lane and sends two descriptors with SCM_RIGHTS: the lane's file and
 * the doorbell's. Nothing else of the segment reaches the producer; a peer
 * not on the list gets a refusal that names its uid (docs/SHM.md, "The
 * broker").
 *
 * A descriptor, once given, cannot be taken back: the producer's processes
 * may keep the lane's file open after it gave the lane up. So a lane handed
 * to uid U is bound to U for the segment's life (its file renamed to
 * v05-NAME:bound.<i>, the binding kept in the owner-only lane statistics):
 * it is handed to U's producers only, and same-uid producers, which claim
 * lanes by name, no longer see it. What a process of U can write there can
 * only harm U's own producers.
 */
#ifndef V05_SHM_BROKER_H
#define V05_SHM_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"
#include "v05/plugin.h"
#include "v05/shm.h"

#define V05_BROKER_MAGIC 0x314b5242353076ull /* "v05BRK1" little-endian */

/* How long a lane stays reserved for a producer that was sent it and has
 * not claimed it (then it is free again, for its uid). */
#define V05_BROKER_HOLD_NS 5000000000ull

/*
 * The broker's one message: sent on accept, before the broker reads
 * anything (it never reads from a client: a client that sends garbage or
 * nothing cannot hold it). With error 0, SCM_RIGHTS carries the lane's
 * file and the doorbell's, in that order.
 */
struct v05_broker_grant {
	uint64_t magic;         /* V05_BROKER_MAGIC                         */
	uint32_t abi;           /* V05_SHM_ABI                              */
	int32_t error;          /* 0, or a negative errno (no descriptors)  */
	uint32_t lane;          /* the lane's index                         */
	uint32_t lane_count;
	uint32_t lane_capacity;
	uint32_t flags;         /* the header's (the doorbell mode)         */
	uint64_t token;         /* the lane's owner word while reserved:
				 * the producer claims with CAS token -> me */
	char msg[216];          /* why, with an error                       */
};
static_assert(sizeof(struct v05_broker_grant) == 256, "grant ABI");
static_assert(offsetof(struct v05_broker_grant, error) == 12, "grant ABI");

/*
 * Whom the broker admits besides the segment's own uid (the plugin's
 * config, stored in the segment): a peer whose uid is in uids, or whose
 * effective gid or one of whose supplementary groups is in gids, all as
 * the kernel recorded them at connect (SO_PEERCRED, SO_PEERGROUPS): no
 * look at /proc, which the peer could change in between.
 */
struct v05_broker_allow {
	uint32_t uids[V05_BROKER_ALLOW_MAX];
	uint32_t gids[V05_BROKER_ALLOW_MAX];
	uint32_t n_uids, n_gids;
	/* Called by the broker thread for each peer refused (the caller
	 * counts it; that thread is the count's only writer). Optional. */
	void (*refused)(void *ctx, uint32_t uid, uint32_t gid);
	void *ctx;
};

struct v05_broker;

/* The broker's socket: "@v05-%016llx" of this hash of the segment file's
 * path (the abstract namespace: no file). */
unsigned long long v05__broker_name_hash(const char *seg_path);

/*
 * Start the broker of an owned segment (the owner's view, with the lanes'
 * and the doorbell's descriptors) admitting the peers allow names (copied):
 * -EADDRINUSE if another process holds the socket's name. The thread reads
 * lane owner words, reserves and binds lanes, and does nothing else with
 * the segment.
 */
int v05__broker_start(struct v05_segment *seg,
		      const struct v05_broker_allow *allow,
		      struct v05_broker **out);

/* Stop and join the thread; give back the reservations not yet claimed. */
void v05__broker_stop(struct v05_broker *b);

/*
 * A producer's side: ask segment name's broker for a lane. Fills seg as a
 * producer's attach would (the doorbell mapped, the geometry), maps the
 * lane's file (*lane: its ring header, *index) and returns the reservation
 * token to claim it with. -ECONNREFUSED when the segment has no broker,
 * -EACCES when the socket's peer is not the segment's owner uid.
 */
int v05__broker_request(const char *name, struct v05_segment *seg,
			struct v05_ring_hdr **lane, uint32_t *index,
			uint64_t *token);

/* v05_producer_open through the broker whatever the segment's uid (tests:
 * the broker's protocol without a second uid). */
int v05__producer_open_brokered(const char *name, unsigned flags,
				struct v05_producer **out);

#endif
