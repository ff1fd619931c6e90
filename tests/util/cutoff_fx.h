/* SPDX-License-Identifier: MIT */
/*
 * The cut-off tests' fixture (test_cutoff*.c): a producer in a forked child
 * driven over two pipes (push, a raw flood through its own mapping of its
 * lane's file, close, exit without closing), a plugin of a mode with
 * PROMPTS prompts, counters, and a driver that answers decisions with
 * rewards that are a function of (key, sample).
 */
#ifndef V05_TESTS_CUTOFF_FX_H
#define V05_TESTS_CUTOFF_FX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define LANE_CAP 256u
#define PROMPTS 8u

enum kid_op {
	OP_PUSH = 1,  /* push the n records that follow (push_wait)         */
	OP_FLOOD = 2, /* publish n more records raw, as a hostile process
		       * would: through its own mapping of its lane's file  */
	OP_CLOSE = 3, /* v05_producer_close                                  */
	OP_EXIT = 4,  /* die without closing                                 */
};


struct kid_cmd {
	uint32_t op, n;
};


struct kid_reply {
	int32_t ret;
	int32_t lane;
	char msg[512];
};


struct kid {
	pid_t pid;
	int to, from;
	int lane;
};

void cut_full_read(int fd, void *buf, size_t len);
void cut_full_write(int fd, const void *buf, size_t len);
int cut_flood(const char *name, int lane, uint32_t n);
void cut_kid_main(const char *name, int in, int out);
void cut_kid_start(struct kid *k, const char *name);
struct kid_reply cut_kid_do(struct kid *k, uint32_t op,
			    const struct v05_reward *recs, uint32_t n);
void cut_kid_push(struct kid *k, struct v05_plugin *p,
		  const struct v05_reward *recs, uint32_t n);
void cut_kid_reap(struct kid *k);
struct v05_plugin *cut_make_as(const char *name, uint32_t mode,
			       uint32_t prompts, uint32_t k_init,
			       uint32_t k_max, uint32_t cut_records,
			       bool broker);
struct v05_plugin *cut_make(const char *name, uint32_t mode, uint32_t prompts,
			    uint32_t k_init, uint32_t k_max,
			    uint32_t cut_records);
uint64_t cut_ctr(struct v05_plugin *p, int c);
uint64_t cut_rejected(struct v05_plugin *p);
float cut_reward_of(uint64_t key, uint32_t s);
uint32_t cut_rewards_for(const struct v05_decision *d, struct v05_reward *out);

struct final {
	uint64_t key;
	double baseline;
	float adv[16];
	uint32_t k;
};

uint32_t cut_submit(struct v05_plugin *p, const char *tag, uint32_t n,
		    struct v05_decision *d);
void cut_wrong_gens(const struct v05_decision *d, uint32_t nd,
		    struct v05_reward *out, uint32_t n);
struct v05_ring_hdr *cut_map_lane_file(const char *name, uint32_t lane,
				       void **m);

#endif
