/* SPDX-License-Identifier: MIT */
/* The plugin tests' fixture: one plugin and one producer in this process,
 * prompts "u<i>", counters by index. */
#ifndef V05_TESTS_PLUGIN_FX_H
#define V05_TESTS_PLUGIN_FX_H

#include <stdint.h>

#include "v05-internal/plugin.h"

#define MAXD 1024

struct fx {
	char name[64];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[MAXD];
};

void fx_config(struct fx *f);
void fx_open(struct fx *f);
void fx_close(struct fx *f);
uint64_t ctr(struct fx *f, int c);
int submit(struct fx *f, const double *priors, uint32_t n,
		  uint64_t *keys);
void push_samples(struct fx *f, uint64_t key, uint64_t samples,
			 const float *r);
int find(const uint64_t *keys, uint32_t n, uint64_t key);
/* The gen of key's current instance (what its decisions carry); 0 if the
 * key is not in the table. */
uint32_t fx_gen(struct fx *f, uint64_t key);

#endif
