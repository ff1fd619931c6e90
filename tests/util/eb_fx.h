/* SPDX-License-Identifier: MIT */
/*
 * v05-eb under the stream schedule, the fixture of test_eb_stream.c and
 * test_eb_merge.c: one plugin and one producer, N prompts per batch whose
 * priors and rewards are a function of the batch (the same for every
 * plugin), their first waves and second waves pushed by hand.
 */
#ifndef V05_TESTS_EB_FX_H
#define V05_TESTS_EB_FX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/seg.h"
#include "v05-internal/plugin.h" /* V05_C_SAMPLES_PADDED */
#include "v05.h"

#define N 32
#define MAXD (4 * N)

struct fx {
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
	double prior[N];
	uint64_t key[N];
	uint32_t gen[N];
	float r[N][16];
};

uint64_t ebfx_lcg(uint64_t *s);
double ebfx_u01(uint64_t *s);
void ebfx_world(struct fx *f, uint64_t batch);
void ebfx_config(struct fx *f, uint32_t cold, uint32_t pad);
void ebfx_open_fx(struct fx *f, const char *tag);
void ebfx_close_fx(struct fx *f);
void ebfx_submit(struct fx *f, uint64_t batch);
int ebfx_idx_of(const struct fx *f, uint64_t key);
double ebfx_first_successes(const struct fx *f, int i);
void ebfx_push_range(struct fx *f, int i, uint32_t from, uint32_t to);
void ebfx_settle(struct fx *f, int m);

#endif
