/* SPDX-License-Identifier: MIT */
/*
 * Test helper: a broker client that ignores the library, as a hostile
 * producer would: it takes the grant's descriptors and does with them
 * what it likes (tests/test_hostile.c, test_cutoff.c).
 */
#ifndef V05_TEST_RAWGRANT_H
#define V05_TEST_RAWGRANT_H

#include <stdint.h>

#include "v05-internal/shm.h"

struct raw_grant {
	struct v05_broker_grant g;
	int lane_fd, bell_fd, conn;
	struct v05_ring_hdr *lane; /* mapped, or NULL (raw_grant_map) */
	void *map;
	size_t len;
};

/* Connect to segment name's broker and take its grant: 0, or the refusal
 * (a negative errno; g.msg says why). */
int raw_grant(const char *name, struct raw_grant *r);

/* Map the lane's memfd (its ring header at r->lane). */
int raw_grant_map(struct raw_grant *r);

/* Publish n records (key, gen, sample 0.., reward 0.5, the right seq) past
 * the lane's tail with one store, as the library would, without claiming
 * the lane: its owner word is left as owner (0, or the token). */
void raw_publish(struct v05_ring_hdr *lane, uint32_t capacity, uint64_t key,
		 uint32_t gen, uint32_t n);

/* Close everything: its grant ends. */
void raw_grant_close(struct raw_grant *r);

#endif
