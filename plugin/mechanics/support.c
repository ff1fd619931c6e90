/* SPDX-License-Identifier: MIT */
/* Support buffer: the last finalized groups, the value model's context
 * (paper, appendix: capacity 512, 256 sampled per query). */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"
#include "../rules/splitmix.h"
#include "../../shm/error.h"
#include "one_thread.h"

static struct v05_support_hdr *support_hdr(struct v05_plugin *p)
{
	return V05_AT(struct v05_support_hdr, p->seg.region[V05_REGION_SUPPORT], 0);
}

static struct v05_support_entry *support_entries(struct v05_plugin *p)
{
	return (struct v05_support_entry *)(void *)(support_hdr(p) + 1);
}

void v05__support_add(struct v05_plugin *p, uint64_t key, float mean, uint32_t k)
{
	struct v05_support_hdr *h = support_hdr(p);
	uint32_t cap = p->seg.hdr.geo.support_capacity;
	uint64_t w = h->written;
	struct v05_support_entry *e = &support_entries(p)[w % cap];

	e->key = key;
	e->mean = mean;
	e->k = k;
	/* Relaxed: only the owner writes; v05ctl reads a snapshot. */
	v05_store_relaxed(&h->written, w + 1);
}

V05_API int v05_support_sample(struct v05_plugin *p, struct v05_support *out,
			       uint32_t n, uint64_t seed)
{
	V05_ONE_THREAD(p, "support_sample");
	uint32_t cap, have, *idx;
	uint64_t written;

	v05__clear_error();
	if (!p || (!out && n))
		return v05__fail(-EINVAL, "support_sample: NULL argument");
	cap = p->seg.hdr.geo.support_capacity;
	written = support_hdr(p)->written;
	have = written < cap ? (uint32_t)written : cap;
	if (n > have)
		n = have;
	idx = malloc((size_t)(have ? have : 1) * sizeof(*idx));
	if (!idx)
		return v05__fail(-ENOMEM, "support_sample: out of memory");
	for (uint32_t i = 0; i < have; i++)
		idx[i] = i;
	/* Partial Fisher-Yates: the first n of a seeded permutation. */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i + (uint32_t)(v05__splitmix64(&seed) % (have - i));
		uint32_t t = idx[i];
		const struct v05_support_entry *e;

		idx[i] = idx[j];
		idx[j] = t;
		e = &support_entries(p)[idx[i]];
		out[i].key = e->key;
		out[i].mean = e->mean;
		out[i].k = e->k;
	}
	free(idx);
	return (int)n;
}
