/* SPDX-License-Identifier: MIT */
/*
 * The hostile producers' tests' fixture (test_hostile*.c): who plays which
 * user (root or not), the owner's configuration, rewards a function of
 * (key, sample).
 */
#ifndef V05_TESTS_HOSTILE_FX_H
#define V05_TESTS_HOSTILE_FX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/actor.h"
#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define PROMPTS 8u
#define K 4u
uint64_t hst_now_ns(void);

/* Who plays whom in one run. */
struct cast {
	uint32_t owner, listed, stranger;
	const char *what;
};

int hst_casts(struct cast *out);
void hst_config(struct v05_config *c, uint32_t listed);

struct owner_cmd {
	char op;          /* 'c' create, 'a' attach, 'p' poll, 'r' reclaim,
			   * 'R' replace, 'x' die, 'q' close and remove */
	uint32_t target;  /* 'p': poll until this many rewards applied */
	char name[64];
	uint32_t listed;
};


struct final_rec {
	uint64_t key;
	double baseline;
	uint32_t k;
};


struct owner_rep {
	int ret;
	char msg[512];
	struct v05_decision d[PROMPTS];
	uint64_t applied, rejected, finals_n, refused;
	struct final_rec finals[PROMPTS];
	uint32_t nfinals;
};

void hst_collect(struct owner_rep *rep, const struct v05_decision *d, int n);
int hst_owner_main(void *arg, int in, int out);
struct owner_rep hst_owner_do(struct actor *o, char op, const char *name,
			      uint32_t target, uint32_t listed);

/* What each attack on a handed descriptor did: 0 if refused as it must
 * be, else a bit per one that went through. */
enum {
	A_SHRINK = 1 << 0, A_GROW = 1 << 1, A_WRITE_PAST = 1 << 2,
	A_FALLOCATE = 1 << 3, A_SEAL = 1 << 4, A_PUNCH = 1 << 5,
	A_NOGRANT = 1 << 6, A_MAP = 1 << 7,
};

int hst_fd_attacks(int fd, size_t size);

struct attack_args {
	char name[64];
};

int hst_attacker_main(void *arg, int in, int out);

#endif
