/* SPDX-License-Identifier: MIT */
/*
 * The lane broker: how a producer gets a lane without holding anything of
 * the segment's that it could use against the owner. A thread of the
 * owner's process listens on a unix socket in the segment's side
 * directory (v05-NAME:side/broker, a directory only the owner's uid can
 * write); a producer connects, the broker checks it (v05__broker_admit:
 * the owner's allow-list over the peer's credentials as the kernel took
 * them at connect, the overflow ids, its pid namespace, its uid's backoff
 * after a cut-off) and grants it a lane: a memfd the owner creates, sizes
 * and seals (shrink, grow, seal: memfd.h) and maps over the lane's pages
 * in place of the lane's file, plus the brokered producers' doorbell,
 * sealed the same way. No file of the segment reaches the producer, and
 * nothing it holds can change the size of memory the owner maps.
 *
 * A grant lasts as long as the producer's connection: the broker keeps it
 * open and, when the producer closes it (its close, its death), says so
 * and rings the owner's doorbell; the consumer, at its next poll, drains
 * what the lane holds and maps the lane's file back (lanes_reclaim.c). A
 * lane the consumer has drained is free at once all the same: if a
 * producer asks before the consumer took it back, the broker grants it
 * again, as a new memfd (broker_grant.c; one CAS decides which of the two
 * has the lane, lanes.h). Each grant is a new memfd, so what a producer's
 * processes do with an old one afterwards reaches nothing the owner maps.
 * When the owner dies, the producer sees its connection end, connects to
 * the next owner's broker and pushes again what the next owner had not
 * drained (producer.c).
 */
#ifndef V05_SHM_BROKER_H
#define V05_SHM_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segment.h"
#include "v05/plugin.h"
#include "v05/shm.h"

#define V05_BROKER_MAGIC 0x314b5242353076ull /* "v05BRK1" little-endian */

/* How long a granted lane waits for its producer's claim before the grant
 * ends (a client that connected and never took its lane). */
#define V05_BROKER_HOLD_NS 5000000000ull

/*
 * The broker's one message: sent on accept, before the broker reads
 * anything (it never reads from a client: a client that sends garbage or
 * nothing cannot hold it). With error 0, SCM_RIGHTS carries the lane's
 * memfd and the doorbell's, in that order.
 */
struct v05_broker_grant {
	uint64_t magic;         /* V05_BROKER_MAGIC                         */
	uint32_t abi;           /* V05_SHM_ABI                              */
	int32_t error;          /* 0, or a negative errno (no descriptors)  */
	uint32_t lane;          /* the lane's index                         */
	uint32_t lane_count;
	uint32_t lane_capacity;
	uint32_t flags;         /* the header's (the doorbell mode)         */
	uint64_t token;         /* the lane's owner word while unclaimed:
				 * the producer claims with CAS token -> me */
	char msg[216];          /* why, with an error                       */
};
static_assert(sizeof(struct v05_broker_grant) == 256, "grant ABI");
static_assert(offsetof(struct v05_broker_grant, error) == 12, "grant ABI");

/* A peer as the kernel recorded it at connect (SO_PEERCRED, SO_PEERGROUPS):
 * pid 0 when it is in a pid namespace the owner cannot see. */
struct v05_peer {
	int32_t pid;
	uint32_t uid, gid;
	const uint32_t *groups; /* its supplementary groups */
	uint32_t ngroups;
};

/*
 * Whom the broker admits besides the segment's own uid (the plugin's
 * config, stored in the segment): a peer whose uid is in uids, or whose
 * effective gid or one of whose supplementary groups is in gids.
 */
struct v05_broker_allow {
	uint32_t uids[V05_BROKER_ALLOW_MAX];
	uint32_t gids[V05_BROKER_ALLOW_MAX];
	uint32_t n_uids, n_gids;
	/* The kernel's overflow ids (v05__overflow_ids): what a uid or gid
	 * this user namespace does not map looks like. A peer with one is
	 * refused unless overflow_ok (V05_CONFIG_BROKER_OVERFLOW_IDS): every
	 * unmapped user of the host would look the same. */
	uint32_t overflow_uid, overflow_gid;
	bool overflow_ok;
	/* Called by the broker thread for each peer refused: err -EPERM
	 * (not admitted), -EXDEV (another pid namespace) or -EAGAIN (its
	 * uid's backoff after a cut-off). That thread is the caller's
	 * counters' only writer. Optional. */
	void (*refused)(void *ctx, int err, uint32_t uid, uint32_t gid);
	/* Until when uid gets no grant (CLOCK_MONOTONIC ns; 0: none) and
	 * how many of its grants or claims were cut off (the plugin's
	 * backoff, guard.c). Optional. */
	uint64_t (*backoff_until)(void *ctx, uint32_t uid, uint32_t *cuts);
	void *ctx;
};

/*
 * The admission rule, a pure function of the list and the peer: 0 if the
 * broker of a segment of owner_uid admits peer; else -EPERM (not listed,
 * or an overflow id the owner did not opt into) or -EXDEV (admitted, but
 * in another pid namespace: owner words name pids), with why (len bytes)
 * saying so, naming the peer's uid and gid and the way in.
 */
int v05__broker_admit(const struct v05_broker_allow *a, uint32_t owner_uid,
		      const struct v05_peer *peer, char *why, size_t len);

/* The kernel's overflow uid and gid (/proc/sys/kernel/overflow{u,g}id;
 * 65534 where unreadable). */
void v05__overflow_ids(uint32_t *uid, uint32_t *gid);

struct v05_broker;

/*
 * Start the broker of an owned segment (the owner's view, with its side
 * directory open) admitting the peers allow names (copied), handing out
 * bell_fd (the brokered producers' doorbell, a sealed memfd) with each
 * lane. The socket is made anew: whatever held the name before (a dead
 * owner's socket, one a forked child still holds) is unlinked first, and
 * only the owner's uid can write the directory. The thread reserves,
 * grants and ends grants of lanes, and does nothing else with the segment.
 */
int v05__broker_start(struct v05_segment *seg,
		      const struct v05_broker_allow *allow, int bell_fd,
		      struct v05_broker **out);

/* Stop and join the thread; close every connection (their grants end
 * with the next owner, which maps the lanes' files back). */
void v05__broker_stop(struct v05_broker *b);

/* What a producer got from a broker. */
struct v05_broker_lane {
	struct v05_ring_hdr *lane; /* in its own mapping of the memfd      */
	void *lane_map;
	size_t lane_len;
	uint32_t index;
	uint64_t token;            /* claim with CAS token -> me           */
	int conn;                  /* the connection: the grant lives while
				    * it is open; ends when the owner goes */
};

/*
 * A producer's side: ask segment name's broker for a lane. Fills seg as a
 * producer's attach would (the doorbell mapped, the geometry) and *out.
 * -ECONNREFUSED when the segment has no broker (or its owner is gone and
 * no other has come), -EACCES when the socket's peer is not the segment's
 * owner uid, the broker's refusal otherwise.
 */
int v05__broker_request(const char *name, struct v05_segment *seg,
			struct v05_broker_lane *out);

/* v05_producer_open through the broker whatever the segment's uid (tests:
 * the broker's protocol without a second uid). */
int v05__producer_open_brokered(const char *name, unsigned flags,
				struct v05_producer **out);

#endif
