/* SPDX-License-Identifier: MIT */
/*
 * The decision core's mechanics, below the schedules: dispatch (the held
 * list, hold and let go, padding, issuing, the halt), finalization, and
 * v05-eb's fit as the plugin holds it. Nothing declared here calls a
 * schedule (schedule.h) or the top (top.h); tests/check_layering.sh
 * refuses an include of either from these files.
 */
#ifndef V05_PLUGIN_MECHANICS_H
#define V05_PLUGIN_MECHANICS_H

#include "internal.h"

/* finalize.c: statistics, advantages into the slot, FINAL, completion,
 * journal, support, the FINAL/DROP decision; latencies. */
void v05__estimate_prompt(struct v05_plugin *p, const struct v05_prompt *e,
			  struct v05_estimate *est, double *adv);
void v05__finalize_with(struct v05_plugin *p, struct v05_prompt *e,
			const struct v05_estimate *est, const double *adv,
			uint32_t flags, uint64_t latency);
/* Estimate, then finalize with the result. */
void v05__finalize(struct v05_plugin *p, struct v05_prompt *e, uint32_t flags,
		   uint64_t latency_ns);
/* A prompt its rule took no sample of (a first wave of 0): final with
 * k = 0, dropped, its prior as its baseline, counted as skipped. */
void v05__finalize_skip(struct v05_plugin *p, struct v05_prompt *e);
/* An open prompt leaves its batch's counts (final or cancelled). */
void v05__batch_leave(struct v05_plugin *p, const struct v05_prompt *e);
/* Append a final slot's group to the journal (if any): 0 or -errno. */
int v05__journal_slot(struct v05_plugin *p, uint32_t slot);
/* From the prompt's last reward (producer's clock) to now, 0 if unknown. */
uint64_t v05__latency_of(const struct v05_prompt *e, uint64_t now);
void v05__record_latency(struct v05_plugin *p, uint64_t ns);

/* dispatch.c: the held list of batch b, kept as prompts go HELD and
 * rebuilt from the table when it went stale. */
int v05__batch_hold(struct v05_plugin *p, uint32_t b, uint64_t key);
uint32_t v05__held_keys(struct v05_plugin *p, uint32_t b, uint64_t **keys);
/* A "more" waits for its batch's schedule; samples is what its plan adds
 * to the batch's held samples. The caller runs the schedule after. */
void v05__hold(struct v05_plugin *p, struct v05_prompt *e, float gap,
	       uint32_t samples);
/* A held prompt back to collecting (v05-eb: an early start's plan that
 * its early samples already cover). */
void v05__unhold(struct v05_plugin *p, struct v05_prompt *e);
/* Pad the held prompts' plans (k_planned, total samples) to a multiple of
 * pad (1: no padding), mark the batch RELEASING and issue: one wave. */
void v05__pad_and_issue(struct v05_plugin *p, uint32_t b, uint64_t total,
			uint32_t pad);
/* Plan every held prompt (k_step each; a WAVES_FIT rule's: its own
 * plan) and issue. */
void v05__release_steps(struct v05_plugin *p, uint32_t b);
/* Issue what the plans say (a release, or a takeover finding RELEASING). */
void v05__issue_plan(struct v05_plugin *p, uint32_t b);
/* Persist the halt, finalize the held prompts (first: count it). */
void v05__halt(struct v05_plugin *p, uint32_t b, int first);
/* The round barrier's decision for an external resolver. */
void v05__barrier_decision(struct v05_plugin *p, uint32_t b,
			   struct v05_decision *d);

static inline bool v05__batch_active(const struct v05_plugin *p, uint32_t b)
{
	return p->batch_recs[b].id != 0;
}

/* The paper's halt: fewer than halt_fraction of the batch still live. */
static inline bool v05__below_halt(const struct v05_plugin *p, uint32_t b,
				   uint32_t live)
{
	return (double)live < p->cfg.halt_fraction *
				      (double)p->batch_recs[b].n_prompts;
}

/* What a held prompt adds to its batch's held samples: a WAVES_FIT
 * rule's prompt its own plan (0 while undecided), a WAVES_STEPS rule's
 * "more" k_step. */
static inline uint32_t v05__held_share(const struct v05_plugin *p,
				       const struct v05_prompt *e)
{
	uint32_t k = v05__group_k(e);

	if (p->rule->waves == V05__WAVES_FIT)
		return e->k_planned > k ? e->k_planned - k : 0;
	return p->params.k_step;
}

/* eb_fit.c: the rules' running state and the fits as the plugin holds
 * them. */
struct v05_eb_fit;
/* The prompt's first k received rewards as doubles, in sample order. */
void v05__prompt_rewards(struct v05_plugin *p, const struct v05_prompt *e,
			 uint32_t k, double *r);
/* The successes in the prompt's first k received rewards. */
double v05__prompt_successes(struct v05_plugin *p, const struct v05_prompt *e,
			     uint32_t k);
/* The rule's folds into its running state (rules/rule.h): the prompt's
 * group (fold_group), its first wave of k (fold_first); the running fit's
 * memo goes stale. */
void v05__fold_group(struct v05_plugin *p, const struct v05_prompt *e);
void v05__fold_first(struct v05_plugin *p, const struct v05_prompt *e,
		     uint32_t k);
/* The samples of the prompt's first wave (the rule's first_wave at
 * submit; k_init for a segment an older library made). */
static inline uint32_t v05__first_k(const struct v05_plugin *p,
				    const struct v05_prompt *e)
{
	return e->k_first ? e->k_first : p->params.k_init;
}
/* The running fit (no barrier): own part + the others'; false if empty. */
bool v05__eb_running_fit(struct v05_plugin *p, struct v05_eb_fit *fit);
/* eb_cold first waves folded in (own and handed in): a run is warm once. */
bool v05__eb_warm(const struct v05_plugin *p);
/* The fit first waves are chosen under: the running fit once warm
 * (stream), the last barrier's (rounds); false before. */
bool v05__eb_warm_fit(struct v05_plugin *p, struct v05_eb_fit *fit);
/* A barrier fitted its batch's `groups` first waves: kept for the next
 * batches' first waves if they are at least eb_cold. */
void v05__eb_barrier_fitted(struct v05_plugin *p,
			    const struct v05_eb_fit *fit, uint32_t groups);
/* The fit a prompt of batch b is estimated under: the running fit without
 * a barrier, else the one stored in the batch record if the grid can give
 * it (the record is in the segment: after a takeover it is checked, not
 * trusted). */
bool v05__eb_fit_of(struct v05_plugin *p, uint32_t b,
		    struct v05_eb_fit *fit);

#endif
