/* SPDX-License-Identifier: MIT */
/*
 * Dispatch, the mechanics every schedule uses: the held list of a batch,
 * holding a prompt and letting it go, padding a release to pad_multiple,
 * issuing the planned samples (SAMPLE decisions), the halt (held prompts
 * finalized). Nothing here decides when: the schedules do (schedule.h).
 *
 * Padding goes one sample at a time to the held prompt with the largest
 * k_target - k (k counting the samples already planned), never past k_max;
 * ties go to the smaller key, so a run is reproducible.
 *
 * Crash consistency of a release: the plan (each prompt's k_planned) is
 * written first, then the batch is marked RELEASING, then the samples are
 * issued. A takeover finding RELEASING issues what is left (schedule.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mechanics.h"
#include "probes.h"
#include "vocab.h"
#include "../../shm/proc.h"

int v05__batch_hold(struct v05_plugin *p, uint32_t b, uint64_t key)
{
	struct batch_local *bl = &p->batches[b];

	if (bl->n_held > bl->held_cap) {
		uint32_t cap = bl->held_cap ? 2 * bl->held_cap : 64;
		uint64_t *n;

		while (cap < bl->n_held)
			cap *= 2;
		n = realloc(bl->held, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		bl->held = n;
		bl->held_cap = cap;
	}
	bl->held[bl->n_held - 1] = key;
	return 0;
}

/* The held prompts of batch b, in hold order. The list is kept as prompts
 * go HELD; if memory ran out while keeping it, rebuild it from the table. */
uint32_t v05__held_keys(struct v05_plugin *p, uint32_t b, uint64_t **keys)
{
	struct batch_local *bl = &p->batches[b];
	uint32_t n = 0;

	if (bl->held_cap >= bl->n_held) {
		uint32_t ok = 1;

		for (uint32_t i = 0; ok && i < bl->n_held; i++) {
			struct v05_prompt *e = v05__table_find(&p->table, bl->held[i]);

			ok = e && e->state == V05_P_HELD && e->batch == b;
		}
		if (ok) {
			*keys = bl->held;
			return bl->n_held;
		}
	}
	for (uint32_t i = 0; i <= p->table.mask; i++) {
		struct v05_prompt *e = &p->table.e[i];

		if (e->key && e->state == V05_P_HELD && e->batch == b) {
			bl->n_held = ++n;
			if (v05__batch_hold(p, b, e->key))
				break;
		}
	}
	bl->n_held = n;
	*keys = bl->held;
	return n;
}

/* "More": the prompt waits for its batch's policy. gap is its padding
 * priority (how far its target is above k); samples, what its plan adds
 * to the batch's held samples (v05-eb's undecided prompts: 0). */
void v05__hold(struct v05_plugin *p, struct v05_prompt *e, float gap,
	       uint32_t samples)
{
	struct batch_local *bl = &p->batches[e->batch];

	e->gap = gap;
	e->state = V05_P_HELD;
	bl->n_collecting--;
	bl->n_held++;
	bl->held_samples += samples;
	v05__gauge(p, V05_C_PROMPTS_HELD, 1);
	/* Without memory for the held list held_keys finds the prompt by a
	 * table scan. The caller runs the schedule afterwards. */
	(void)v05__batch_hold(p, e->batch, e->key);
}

void v05__unhold(struct v05_plugin *p, struct v05_prompt *e)
{
	struct batch_local *bl = &p->batches[e->batch];

	/* Its entry in the held list goes stale: held_keys checks it. */
	e->state = V05_P_COLLECTING;
	bl->n_held--;
	bl->n_collecting++;
	bl->held_samples -= v05__held_share(p, e);
	v05__gauge(p, V05_C_PROMPTS_HELD, -1);
}

void v05__halt(struct v05_plugin *p, uint32_t b, int first)
{
	uint64_t now = v05__now_ns(), *keys;
	uint32_t n = v05__held_keys(p, b, &keys);
	uint64_t id = p->batch_recs[b].id;

	/* Persist the halt first: prompts decided after it stop at once. */
	p->batch_recs[b].state = V05_B_HALTED;
	p->batch_recs[b].hold_since_ns = 0;
	if (first) {
		v05__count(p, V05_C_HALTS, 1);
		V05_PROBE2(halt, id, n);
	}
	for (uint32_t i = 0; i < n && p->batch_recs[b].id == id; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (e && e->state == V05_P_HELD)
			v05__finalize(p, e, V05_DF_HALTED,
				      e->last_ts && now > e->last_ts ?
					      now - e->last_ts : 0);
	}
}

static int pad_before(const struct pad_item *a, const struct pad_item *b)
{
	return a->prio > b->prio || (a->prio == b->prio && a->key < b->key);
}

static void sift_down(struct pad_item *h, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		struct pad_item t;

		if (l < n && pad_before(&h[l], &h[m]))
			m = l;
		if (r < n && pad_before(&h[r], &h[m]))
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

/* Give `extra` samples to the held prompts, greedily by priority. */
static uint32_t distribute_padding(struct v05_plugin *p, struct pad_item *h,
				   uint32_t n, uint32_t extra)
{
	uint32_t given = 0;

	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(h, n, i);
	while (extra && n) {
		struct v05_prompt *e = h[0].e;

		if (e->k_planned >= p->params.k_max) {
			h[0] = h[--n]; /* full: out of the running */
			sift_down(h, n, 0);
			continue;
		}
		e->k_planned++;
		e->pad8 |= V05_PF_PADDED;
		h[0].prio -= 1.0f;
		sift_down(h, n, 0);
		extra--;
		given++;
	}
	return given;
}

/* Issue what the plan says, for every HELD prompt of b not deferred (those
 * stay held, in order, their mark cleared); emits SAMPLEs. */
void v05__issue_plan(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];
	uint64_t now = v05__now_ns(), *keys;
	uint32_t n = v05__held_keys(p, b, &keys);
	uint64_t issued_total = 0;
	uint32_t kept = 0, kept_samples = 0, issued = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);
		uint32_t k, add;
		uint64_t newbits;

		if (!e || e->state != V05_P_HELD)
			continue;
		k = v05__group_k(e);
		if (e->pad8 & V05_PF_DEFER) {
			/* keys is the held list itself when it is valid: kept
			 * entries move to its front, in order (kept <= i). */
			e->pad8 = 0;
			keys[kept++] = e->key;
			kept_samples += v05__held_share(p, e);
			continue;
		}
		issued++;
		if (e->k_planned <= k || e->k_planned > p->params.k_max) {
			/* No plan (cannot happen after RELEASING): the
			 * minimum step, capped. */
			e->k_planned = (uint8_t)(k + p->params.k_step);
		}
		add = e->k_planned - k;
		newbits = (e->k_planned == 64 ? ~0ull :
			   ((1ull << e->k_planned) - 1)) & ~e->issued;
		e->issued |= newbits;
		e->state = V05_P_COLLECTING;
		e->round++;
		bl->n_held--;
		bl->n_collecting++;
		issued_total += add;
		v05__gauge(p, V05_C_PROMPTS_HELD, -1);
		if (!p->silent) {
			struct v05_decision d;

			memset(&d, 0, sizeof(d));
			d.kind = V05_DECISION_SAMPLE;
			d.key = e->key;
			d.slot = e->slot;
			d.gen = v05__slot(&p->seg, e->slot)->gen;
			d.samples = newbits;
			d.k = add;
			d.batch = p->batch_recs[b].id;
			d.flags = e->pad8 & V05_PF_PADDED ? V05_DF_PADDED : 0;
			d.latency_ns = v05__latency_of(e, now);
			v05__enqueue(p, &d);
			if (d.latency_ns)
				v05__record_latency(p, d.latency_ns);
		}
		e->pad8 = 0;
	}
	v05__count(p, V05_C_SAMPLES_ISSUED, issued_total);
	v05__count(p, V05_C_DEC_SAMPLE, issued);
	/* The held list (keys) now starts with the kept prompts; if it was a
	 * rebuilt copy, held_keys finds them by a scan next time. */
	bl->n_held = kept;
	bl->held_samples = kept_samples;
	p->batch_recs[b].hold_since_ns = kept ? v05__now_ns() : 0;
	p->batch_recs[b].state = V05_B_OPEN;
}

/* Plan (k_step each; a WAVES_FIT rule's: each prompt's own), pad,
 * persist, issue. */
void v05__release_steps(struct v05_plugin *p, uint32_t b)
{
	uint64_t *keys;
	uint32_t n = v05__held_keys(p, b, &keys);
	uint32_t step = p->params.k_step;
	uint64_t total = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (!e || e->state != V05_P_HELD)
			continue;
		/* A WAVES_FIT rule's prompts carry their own plans
		 * (sched_eb_stream.c). */
		if (p->rule->waves == V05__WAVES_FIT) {
			total += e->k_planned - v05__group_k(e);
			continue;
		}
		/* "more" guaranteed k + k_step <= k_max. */
		e->k_planned = (uint8_t)(v05__group_k(e) + step);
		total += step;
	}
	v05__pad_and_issue(p, b, total, p->cfg.pad_multiple);
}

/* The held prompts' plans are set (total samples): pad, persist, issue.
 * A padded prompt is marked (pad8) so its SAMPLE says so. */
void v05__pad_and_issue(struct v05_plugin *p, uint32_t b, uint64_t total,
			uint32_t pad)
{
	uint64_t *keys;
	uint32_t n = v05__held_keys(p, b, &keys), m = 0;
	struct pad_item *items = p->pad_items; /* n <= slot_count */

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (!e || e->state != V05_P_HELD)
			continue;
		e->pad8 &= (uint8_t)~V05_PF_PADDED;
		if (e->pad8 & V05_PF_DEFER)
			continue; /* not in this release: no padding */
		items[m].prio = e->gap -
				(float)(e->k_planned - v05__group_k(e));
		items[m].key = e->key;
		items[m].e = e;
		m++;
	}
	if (pad > 1 && total % pad) {
		uint32_t extra = (uint32_t)(pad - total % pad);

		v05__count(p, V05_C_SAMPLES_PADDED,
			   distribute_padding(p, items, m, extra));
	}
	p->batch_recs[b].state = V05_B_RELEASING;
	p->batch_recs[b].round++;
	v05__count(p, V05_C_ROUNDS, 1);
	v05__issue_plan(p, b);
}

/* The barrier's decision for an external resolver (recover repeats it). */
void v05__barrier_decision(struct v05_plugin *p, uint32_t b,
			   struct v05_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->kind = V05_DECISION_BARRIER;
	d->batch = p->batch_recs[b].id;
	d->k = p->batches[b].n_held;
	d->samples = p->batch_recs[b].n_prompts;
}
