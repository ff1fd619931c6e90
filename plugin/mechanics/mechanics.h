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
/* Plan every held prompt (k_step each; v05-eb: its own plan) and issue. */
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

/* What a held prompt adds to its batch's held samples: v05-eb's own plan
 * (0 while undecided), the paper's rule's k_step. */
static inline uint32_t v05__held_share(const struct v05_plugin *p,
				       const struct v05_prompt *e)
{
	uint32_t k = v05__group_k(e);

	if (p->params.mode == V05_MODE_V05_EB)
		return e->k_planned > k ? e->k_planned - k : 0;
	return p->params.k_step;
}

/* eb_fit.c: v05-eb's fits as the plugin holds them. */
struct v05_eb_fit;
/* The successes in the prompt's first k received rewards. */
double v05__prompt_successes(struct v05_plugin *p, const struct v05_prompt *e,
			     uint32_t k);
/* EBPO: the prompt's final group (k_init rewards, one wave) into the
 * running statistics in the state region, the window's forgetting first. */
void v05__ebpo_fold_prompt(struct v05_plugin *p, const struct v05_prompt *e);
/* The running fit (no barrier): own part + the others'; false if empty. */
bool v05__eb_running_fit(struct v05_plugin *p, struct v05_eb_fit *fit);
/* eb_cold first waves folded in (own and handed in): a run is warm once. */
bool v05__eb_warm(const struct v05_plugin *p);
/* The running fit once warm; false before. */
bool v05__eb_warm_fit(struct v05_plugin *p, struct v05_eb_fit *fit);
/* At submit: k_step samples more with the first wave if the fit says
 * the prompt likely needs them (eb_early); returns how many (0 or k_step). */
uint32_t v05__eb_early(struct v05_plugin *p, struct v05_prompt *e,
		       const struct v05_eb_fit *fit);
/* The fit a prompt of batch b is estimated under: the running fit without
 * a barrier, else the one stored in the batch record if the grid can give
 * it (the record is in the segment: after a takeover it is checked, not
 * trusted). */
bool v05__eb_fit_of(struct v05_plugin *p, uint32_t b,
		    struct v05_eb_fit *fit);

#endif
