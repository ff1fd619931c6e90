/* SPDX-License-Identifier: MIT */
/* The decision queue: decisions made during a poll wait here until the
 * caller takes them (v05_poll's max may be smaller than a round). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "probes.h"
#include "../../shm/error.h"

void *(*v05__queue_malloc)(size_t n) = malloc;

int v05__enqueue(struct v05_plugin *p, const struct v05_decision *d)
{
	V05_PROBE4(decision, d->key, d->kind, d->k, d->latency_ns);
	if (p->queue_error)
		return p->queue_error; /* the queue is re-derived as a whole */
	if (p->qlen == p->qcap) {
		uint32_t cap = p->qcap ? 2 * p->qcap : 1024;
		struct v05_decision *n = cap > p->qcap ?
			v05__queue_malloc((size_t)cap * sizeof(*n)) : NULL;

		if (!n) {
			/* The decision is not lost for good: the state it
			 * came from is in the segment. Sticky until
			 * v05_recover re-derives every decision from it. */
			p->queue_error = -ENOMEM;
			return v05__fail(-ENOMEM, "decision queue: out of memory");
		}
		/* Unwrap the ring into the new array. */
		for (uint32_t i = 0; i < p->qlen; i++)
			n[i] = p->q[(p->qhead + i) % p->qcap];
		free(p->q);
		p->q = n;
		p->qcap = cap;
		p->qhead = 0;
	}
	p->q[(p->qhead + p->qlen) % p->qcap] = *d;
	p->qlen++;
	return 0;
}

uint32_t v05__dequeue(struct v05_plugin *p, struct v05_decision *out,
		      uint32_t max)
{
	uint32_t n = p->qlen < max ? p->qlen : max;

	for (uint32_t i = 0; i < n; i++)
		out[i] = p->q[(p->qhead + i) % p->qcap];
	if (n) {
		p->qhead = (p->qhead + n) % p->qcap;
		p->qlen -= n;
	}
	return n;
}
