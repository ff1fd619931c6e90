/* SPDX-License-Identifier: MIT */
/*
 * Batch policy: turns per-prompt "more" answers into dispatches.
 *
 * rounds (the paper's): "more" prompts are held until every open prompt of
 *   the batch has decided; then, if fewer than halt_fraction of the batch's
 *   prompts need more, the batch halts and they finalize; otherwise they are
 *   released together, the dispatch padded to a multiple of pad_multiple.
 * stream: a "more" is held only to pad: released once the held samples
 *   reach pad_multiple, when no prompt of the batch is still collecting, or
 *   when the oldest has waited stream_deadline_us. The halt rule is checked
 *   on the batch's live count (prompts not final) after every decision.
 *
 * Padding goes one sample at a time to the held prompt with the largest
 * k_target - k (k counting the samples already planned), never past k_max;
 * ties go to the smaller key, so a run is reproducible.
 *
 * Crash consistency of a release: the plan (each prompt's k_planned) is
 * written first, then the batch is marked RELEASING, then the samples are
 * issued. A takeover finding RELEASING issues what is left (plugin.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "probes.h"
#include "../shm/error.h"
#include "../shm/proc.h"

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

static void halt(struct v05_plugin *p, uint32_t b, int first)
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
static void issue(struct v05_plugin *p, uint32_t b)
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

/* Plan (k_step each, plus padding), persist, issue. */
static void release(struct v05_plugin *p, uint32_t b)
{
	uint64_t *keys;
	uint32_t n = v05__held_keys(p, b, &keys);
	uint32_t step = p->params.k_step;
	uint64_t total = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (!e || e->state != V05_P_HELD)
			continue;
		/* v05-eb's prompts carry their own plans (eb_stream.c). */
		if (p->params.mode == V05_MODE_V05_EB) {
			total += e->k_planned - v05__group_k(e);
			continue;
		}
		/* "more" guaranteed k + k_step <= k_max. */
		e->k_planned = (uint8_t)(v05__group_k(e) + step);
		total += step;
	}
	v05__pad_and_issue(p, b, total);
}

/* The held prompts' plans are set (total samples): pad, persist, issue.
 * A padded prompt is marked (pad8) so its SAMPLE says so. */
void v05__pad_and_issue(struct v05_plugin *p, uint32_t b, uint64_t total)
{
	uint64_t *keys;
	uint32_t n = v05__held_keys(p, b, &keys), m = 0;
	uint32_t pad = p->cfg.pad_multiple;
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
	issue(p, b);
}

static int active(struct v05_plugin *p, uint32_t b)
{
	return p->batch_recs[b].id != 0;
}

static int below_halt(struct v05_plugin *p, uint32_t b, uint32_t live)
{
	return (double)live < p->cfg.halt_fraction *
				      (double)p->batch_recs[b].n_prompts;
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

static void rounds_check(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];

	if (!active(p, b) || bl->n_collecting || !bl->n_held)
		return;
	if (p->cfg.flags & V05_CONFIG_EXTERNAL_HALT) {
		struct v05_decision d;

		if (p->batch_recs[b].state == V05_B_BARRIER)
			return;
		/* Persisted: a takeover reports it again (v05_recover). */
		p->batch_recs[b].state = V05_B_BARRIER;
		if (!p->silent) {
			v05__barrier_decision(p, b, &d);
			v05__enqueue(p, &d);
		}
		return;
	}
	/* Round barrier: every open prompt has decided; the open ones are
	 * exactly the held ones. */
	if (below_halt(p, b, bl->n_held))
		halt(p, b, 1);
	else
		release(p, b);
}

static void stream_check(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];
	struct v05_batch_rec *rec = &p->batch_recs[b];

	if (!active(p, b) || rec->state == V05_B_HALTED)
		return;
	if (below_halt(p, b, bl->n_open)) {
		halt(p, b, 1);
		return;
	}
	if (!bl->n_held)
		return;
	if (bl->held_samples >= p->cfg.pad_multiple || bl->n_collecting == 0) {
		release(p, b);
		return;
	}
	if (!rec->hold_since_ns)
		rec->hold_since_ns = v05__now_ns();
}

void v05__policy_held(struct v05_plugin *p, uint32_t b)
{
	/* v05-eb: rounds is its batch barrier (the fit of the whole first
	 * wave), stream decides each prompt on its own (eb_stream.c). */
	if (p->params.mode == V05_MODE_V05_EB &&
	    p->cfg.schedule == V05_SCHEDULE_STREAM)
		v05__eb_stream_check(p, b);
	else if (p->params.mode == V05_MODE_V05_EB)
		v05__eb_barrier(p, b);
	else if (p->cfg.schedule == V05_SCHEDULE_ROUNDS)
		rounds_check(p, b);
	else
		stream_check(p, b);
}

void v05__policy_deadlines(struct v05_plugin *p)
{
	uint64_t dl = (uint64_t)p->cfg.stream_deadline_us * 1000u, now = 0;

	if (p->cfg.schedule != V05_SCHEDULE_STREAM)
		return;
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++) {
		struct v05_batch_rec *rec = &p->batch_recs[b];

		if (!rec->id || !p->batches[b].n_held || !rec->hold_since_ns)
			continue;
		/* The clock only when a batch holds prompts; its decisions'
		 * latencies and final_ns use it too. */
		if (!now) {
			v05__clock_refresh(p);
			now = p->now_ns;
		}
		/* hold_since may be later than a `now` taken before it. */
		if (now >= rec->hold_since_ns && now - rec->hold_since_ns >= dl)
			release(p, b);
	}
}

int64_t v05__policy_next_deadline_ns(struct v05_plugin *p, uint64_t now)
{
	uint64_t dl = (uint64_t)p->cfg.stream_deadline_us * 1000u;
	int64_t best = -1;

	if (p->cfg.schedule != V05_SCHEDULE_STREAM)
		return -1;
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++) {
		struct v05_batch_rec *rec = &p->batch_recs[b];
		int64_t left;

		if (!rec->id || !p->batches[b].n_held || !rec->hold_since_ns)
			continue;
		left = now >= rec->hold_since_ns && now - rec->hold_since_ns >= dl ?
			       0 : (int64_t)(rec->hold_since_ns + dl - now);
		if (best < 0 || left < best)
			best = left;
	}
	return best;
}

void v05__policy_resume(struct v05_plugin *p, uint32_t b)
{
	struct v05_batch_rec *rec = &p->batch_recs[b];

	if (!active(p, b))
		return;
	if (rec->state == V05_B_RELEASING) {
		issue(p, b); /* the plan is in the entries */
	} else if (rec->state == V05_B_HALTED) {
		halt(p, b, 0); /* finalize the held ones the halt left */
		if (active(p, b))
			rec->state = V05_B_HALTED;
	} else {
		v05__policy_held(p, b);
	}
}

V05_API int v05_resolve(struct v05_plugin *p, uint64_t batch, int halt_it)
{
	v05__clear_error();
	if (!p || !batch)
		return v05__fail(-EINVAL, "resolve: bad argument");
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++) {
		if (p->batch_recs[b].id != batch)
			continue;
		if (p->batch_recs[b].state != V05_B_BARRIER)
			return v05__fail(-EINVAL,
					 "batch %llu is not waiting at a round barrier",
					 (unsigned long long)batch);
		v05__clock_refresh(p);
		if (halt_it)
			halt(p, b, 1);
		else
			release(p, b);
		return 0;
	}
	return v05__fail(-ENOENT, "no batch %llu in flight",
			 (unsigned long long)batch);
}
