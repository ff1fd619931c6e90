/* SPDX-License-Identifier: MIT */
/*
 * v05-eb without a barrier (schedule stream, the default): a prompt's
 * second-wave decision is made when its own first k_init rewards are in.
 *
 * The fit does not wait for the batch. Its state is additive (eb_state.c):
 * each first wave is folded into the running state the moment it is in,
 * the older ones weighed down by keep = 1 - 1/eb_window per fold, across
 * batches; the fit is the best grid point of that state plus the other
 * engines' (v05_eb_state_set_remote). The prompt's own first wave is
 * folded before its decision, as at the barrier.
 *
 * Cold start: until eb_cold first waves have been folded (this plugin's
 * and the other engines' handed in), a first wave is held undecided
 * (k_planned == k) as at a barrier; the fold that brings the count to
 * eb_cold decides every undecided prompt of every batch, and so does a
 * batch's last first wave if it comes sooner. The count only grows, so
 * once warm a run stays warm.
 *
 * A decided "more" waits only to pad: released when the batch's planned
 * samples reach pad_multiple, when no prompt of the batch is collecting,
 * or, unpadded, at the stream deadline (schedule.c), with each prompt's
 * own plan.
 *
 * What depends on arrival order: the fit a decision sees is over the
 * first waves folded before it (and its own), so the same rewards in the
 * same order give the same decisions, and another order may give others.
 * Nothing depends on wall time but the deadline's release moment.
 *
 * Crash consistency: a fold and the prompt's hold are two stores; a
 * takeover between them folds that first wave once more (one group among
 * hundreds of the fit's weight). Plans, like the barrier's, are written
 * before anything is issued (dispatch.c's RELEASING).
 */
#include <string.h>

#include "schedule.h"
#include "../rules/stats_core.h"
#include "../mechanics/vocab.h"
#include "../../shm/proc.h"

/* An early start the first wave says was not needed: its samples not yet
 * in are aborted, and those in dropped, so the group is the first wave. */
static void trim_early(struct v05_plugin *p, struct v05_prompt *e)
{
	uint64_t first = (1ull << v05__first_k(p, e)) - 1;
	uint64_t out = e->issued & ~e->received & ~first;

	/* Issued mask first: a reward for an aborted sample that comes
	 * after is refused as not issued. */
	e->issued = first;
	e->received &= first;
	if (out && !p->silent) {
		struct v05_decision d;

		memset(&d, 0, sizeof(d));
		d.kind = V05_DECISION_ABORT;
		d.key = e->key;
		d.slot = e->slot;
		d.gen = v05__slot(&p->seg, e->slot)->gen;
		d.samples = out;
		for (uint64_t x = out; x; x &= x - 1)
			d.k++;
		d.batch = p->batch_recs[e->batch].id;
		v05__enqueue(p, &d);
	}
}

/*
 * Decide every undecided held prompt of batch b under fit, on its first
 * k_init rewards: plans first; then the prompts with nothing left to
 * issue finalize if every issued reward is in, or go back to collecting
 * (an early start whose early samples cover its plan). Finals after the
 * plans: finalizing the last open prompt frees the batch record, and the
 * held list must not change under the plans.
 */
static void decide_held(struct v05_plugin *p, uint32_t b,
			const struct v05_eb_fit *fit)
{
	struct batch_local *bl = &p->batches[b];
	uint64_t *keys, id = p->batch_recs[b].id;
	uint32_t n = v05__held_keys(p, b, &keys);
	uint32_t decided = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);
		uint32_t k, m, share;
		double r[V05_K_LIMIT];
		float gap = 0.0f;

		if (!e || e->state != V05_P_HELD || !(e->pad8 & V05_PF_UNDECIDED))
			continue;
		e->pad8 &= (uint8_t)~V05_PF_UNDECIDED;
		decided++;
		k = v05__first_k(p, e);
		v05__prompt_rewards(p, e, k, r);
		m = p->rule->more(&p->env, fit, e->prior, r, k, &gap);
		if (e->pad8 & V05_PF_EARLY) {
			e->pad8 &= (uint8_t)~V05_PF_EARLY;
			if (!m)
				trim_early(p, e);
		}
		e->k_planned = (uint8_t)(k + m);
		share = v05__held_share(p, e);
		if (!share)
			continue;
		/* Padding priority: the rule's (v05-eb: the posterior
		 * variance over the plan), as at the barrier. */
		e->gap = gap;
		bl->held_samples += share;
	}
	if (!decided)
		return;
	for (uint32_t i = 0; i < n && p->batch_recs[b].id == id; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);

		if (!e || e->state != V05_P_HELD || (e->pad8 & V05_PF_UNDECIDED) ||
		    e->k_planned != v05__group_k(e))
			continue;
		if (e->received == e->issued) {
			v05__finalize(p, e, 0, 0);
		} else {
			v05__unhold(p, e); /* its early samples are the plan */
		}
	}
}

/*
 * Release the whole multiples of pad_multiple the held plans make: the
 * prompts are taken in hold order while their plans fit the largest
 * multiple, the rest stay held (deferred) for the next release; padding
 * fills what the taken plans leave of that multiple. Plans differ per
 * prompt (2 to k_max - k_init samples), so padding every release up, as
 * the paper's stream does with its equal steps, would add about half a
 * multiple per release, many times a batch.
 */
static void release_multiples(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];
	uint32_t pad = p->cfg.pad_multiple;
	uint32_t target = bl->held_samples / pad * pad, sum = 0, taken = 0;
	uint64_t *keys;
	uint32_t n = v05__held_keys(p, b, &keys);

	for (uint32_t i = 0; i < n; i++) {
		struct v05_prompt *e = v05__table_find(&p->table, keys[i]);
		uint32_t m;

		if (!e || e->state != V05_P_HELD)
			continue;
		m = e->k_planned - v05__group_k(e);
		/* The first always goes: a plan above the multiple would
		 * otherwise wait for its deadline. */
		if (!taken || sum + m <= target) {
			sum += m;
			taken++;
		} else {
			e->pad8 |= V05_PF_DEFER;
		}
	}
	v05__pad_and_issue(p, b, sum, p->cfg.pad_multiple);
}

static void eb_stream_check(struct v05_plugin *p, uint32_t b)
{
	struct batch_local *bl = &p->batches[b];
	struct v05_batch_rec *rec = &p->batch_recs[b];
	struct v05_eb_fit fit;
	uint64_t id = rec->id;

	if (!id || !bl->n_held)
		return;
	/* Cold: wait for the weight or for the batch's last first wave. */
	if (!v05__eb_warm(p) && bl->n_collecting)
		return;
	if (!v05__eb_running_fit(p, &fit))
		return;
	decide_held(p, b, &fit);
	if (rec->id != id || !bl->n_held)
		return;
	if (!bl->n_collecting) {
		v05__pad_and_issue(p, b, bl->held_samples, p->cfg.pad_multiple);
		return;
	}
	if (bl->held_samples >= p->cfg.pad_multiple) {
		release_multiples(p, b);
		return;
	}
	if (!rec->hold_since_ns)
		rec->hold_since_ns = v05__now_ns();
}

static void eb_first_wave(struct v05_plugin *p, struct v05_prompt *e)
{
	uint32_t k = v05__first_k(p, e); /* an early start issued more */
	uint32_t b0 = e->batch;
	bool was_warm = v05__eb_warm(p);

	/* Into the running fit first: its decision sees its own group. */
	v05__fold_first(p, e, k);
	/* Undecided: no plan, no planned samples (k_planned stays what was
	 * issued: held_share is 0). */
	e->k_planned = (uint8_t)v05__group_k(e);
	e->pad8 |= V05_PF_UNDECIDED;
	v05__hold(p, e, 0.0f, 0);
	eb_stream_check(p, b0); /* may finalize e: b0, not e->batch, after */
	if (was_warm || !v05__eb_warm(p))
		return;
	/* This fold ended the cold start: every batch's undecided prompts
	 * are decided now, not at their batch's next event. */
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++)
		if (b != b0 && p->batch_recs[b].id && p->batches[b].n_held)
			eb_stream_check(p, b);
}

/*
 * The stream deadline: everything held goes, with its own plan, unpadded.
 * On an engine, first waves end one at a time over the batch's long tail,
 * so the deadline fires for a plan or two at a time; padding each such
 * release up to the multiple made a third of all samples padding (1062 of
 * 3272 on vLLM, `bench/engine --noise 0.5 --hallucination 0.2`, one batch,
 * before this change; half the prompts pushed to k_max). A release below
 * the multiple costs a continuous-batching engine nothing.
 */
static void eb_stream_deadline(struct v05_plugin *p, uint32_t b)
{
	v05__pad_and_issue(p, b, p->batches[b].held_samples, 1);
}

const struct v05__schedule v05__sched_eb_stream = {
	.name = "v05-eb stream",
	.progress = eb_stream_check,
	.deadline = eb_stream_deadline,
	.first_wave = eb_first_wave,
};
