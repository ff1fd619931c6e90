/* SPDX-License-Identifier: MIT */
/*
 * The cross-epoch state of the published rules that need one (docs/RULES.md):
 * Knapsack RL's per-prompt success-rate estimate (mode "knapsack"),
 * GRESO's pre-rollout filter (mode "greso") and Pilot-Commit's evictions
 * (mode "pilot-commit"). The state belongs to the
 * training run, not to an engine: the caller (the trainer) keeps one record
 * per dataset prompt and the run's GRESO rates, saves them with its
 * checkpoint, and hands the plugin what they say at submit (a prompt's
 * estimate as its prior; which prompts to submit at all). So a plugin's
 * takeover, or a new engine, loses none of it.
 *
 * Pure functions on caller-owned structs: no I/O, no allocation, no global
 * state; negative errno on bad input. Rewards are on v05's scale [-1, 1].
 */
#ifndef V05_RULES_H
#define V05_RULES_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Knapsack RL: a prompt's success rate from its own history ----------
 *
 * As the authors' code estimates it (arXiv 2509.25849; docs/RULES.md): a
 * success is a reward above 0 as float32 (their +1; -1 and 0 are
 * failures). Once a prompt has V05_KNAPSACK_MIN_SEEN outcomes, its
 * estimate is the mean of its last epoch's outcomes if that epoch had
 * V05_KNAPSACK_WINDOW or more, else of its V05_KNAPSACK_WINDOW most recent
 * outcomes across epochs (later epochs first, within an epoch higher
 * sample indices first). Before that it has none: submit it with a NaN
 * prior (struct v05_prompt_in), and it gets the uniform budget, outside
 * the knapsack (the authors' first epoch).
 */
#define V05_KNAPSACK_WINDOW 16u
#define V05_KNAPSACK_MIN_SEEN 8u

struct v05_knapsack_hist {
	uint64_t epoch;  /* the epoch last_n and last_s count            */
	uint32_t window; /* the last `filled` outcomes, bit 0 the latest
			  * (1: a success)                               */
	uint32_t filled; /* outcomes in window, <= V05_KNAPSACK_WINDOW   */
	uint32_t seen;   /* outcomes ever folded (saturates)             */
	uint32_t last_n; /* outcomes of epoch `epoch`                    */
	uint32_t last_s; /* successes among them                         */
	uint32_t reserved;
};

/*
 * Fold a finished group's k rewards (in sample order) into h, seen in
 * epoch `epoch`: a later epoch starts a new last-epoch count, the same one
 * adds to it. A zeroed struct is a prompt never seen. Returns 0, -EINVAL
 * (NULL, k == 0 or k > V05_K_LIMIT, an epoch before h's) or -EDOM (a reward
 * not finite in [-1, 1]).
 */
V05_API int v05_knapsack_hist_fold(struct v05_knapsack_hist *h,
				   uint64_t epoch, const double *rewards,
				   uint32_t k);

/* 1 with *p01 the estimate in [0, 1], 0 when h has no estimate yet (fewer
 * than V05_KNAPSACK_MIN_SEEN outcomes), or -EINVAL. */
V05_API int v05_knapsack_hist_estimate(const struct v05_knapsack_hist *h,
				       double *p01);

/* ---- GRESO: skip prompts that keep giving zero-variance groups ----------
 *
 * As the authors' code runs it (docs/RULES.md; parameters there): a group
 * of all successes is "easy", of all failures "hard" (for rewards inside
 * (-1, 1): zero variance and a reward of at least 0.96, or at most -0.78,
 * each as float32, as rewards are kept: docs/RULES.md);
 * a prompt's z counts its trailing run of zero-variance groups of one kind.
 * Before a step's rollout, a prompt with z > 0 is skipped with probability
 * 1 - max(p^z, V05_GRESO_KEEP_FLOOR), p the run's p_easy or p_hard by its
 * kind; the draw is a hash of (seed, prompt key, step), so a rerun or a
 * takeover skips the same prompts. After each training step (but the first
 * epoch's), each rate moves by V05_GRESO_DELTA: down (skip more) when its
 * kind's share of the step's rolled-out groups reached its target (a third
 * of V05_GRESO_TARGET for easy, two thirds for hard), else up; within
 * [V05_GRESO_P_MIN, V05_GRESO_P_MAX]. The groups themselves are dapo's:
 * a zero-variance group is dropped, the others get GRPO advantages.
 */
#define V05_GRESO_P0 0.5
#define V05_GRESO_TARGET 0.25
#define V05_GRESO_DELTA 0.01
#define V05_GRESO_P_MIN 0.05
#define V05_GRESO_P_MAX 0.95
#define V05_GRESO_KEEP_FLOOR 0.01
/* The refill (DAPO's dynamic sampling with GRESO's adaptive size): the
 * next rollout batch is the prompts still needed over the share expected
 * to be kept, times this over-estimate, at least V05_GRESO_REFILL_MIN. */
#define V05_GRESO_REFILL_OVER 1.25
#define V05_GRESO_REFILL_MIN 64u

enum v05_greso_kind {
	V05_GRESO_MIXED = 0, /* not zero-variance (or never seen)       */
	V05_GRESO_EASY = 1,  /* every sample a success                  */
	V05_GRESO_HARD = 2,  /* every sample a failure                  */
};

struct v05_greso_prompt {
	uint32_t z;    /* trailing zero-variance groups of one kind      */
	uint32_t kind; /* enum v05_greso_kind of that run                */
};

struct v05_greso {
	double p_easy, p_hard; /* base keep probabilities                */
	uint64_t seed;         /* of the skip draws                      */
	uint64_t total;        /* this step's rolled-out groups          */
	uint64_t easy, hard;   /* ... of them all-success, all-failure   */
};

/* The run's start: both rates V05_GRESO_P0, no counts. */
V05_API void v05_greso_init(struct v05_greso *g, uint64_t seed);

/* A rolled-out prompt's final group (k rewards): x's run, the step's
 * counts. Returns its enum v05_greso_kind, -EINVAL or -EDOM. */
V05_API int v05_greso_fold(struct v05_greso *g, struct v05_greso_prompt *x,
			   const double *rewards, uint32_t k);

/* *keep: the chance that x is rolled out this step, 1 if z == 0, else
 * max(p^z, V05_GRESO_KEEP_FLOOR). 0 or -EINVAL. */
V05_API int v05_greso_keep_p(const struct v05_greso *g,
			     const struct v05_greso_prompt *x, double *keep);

/* 1: skip x (key: its v05_key, or any stable id) at step `step`; 0: roll
 * it out; -EINVAL. */
V05_API int v05_greso_skip(const struct v05_greso *g,
			   const struct v05_greso_prompt *x, uint64_t key,
			   uint64_t step);

/* The end of a training step: adapt the rates from its counts (unless it
 * rolled nothing out) and clear them. 0 or -EINVAL. */
V05_API int v05_greso_step_end(struct v05_greso *g);

/*
 * The refill's next rollout size, in prompts, when `kept` of the b_train
 * groups a step trains on are in and the last rollout batch had a share
 * zv_share in [0, 1] of zero-variance groups: *b_next. Returns 1 when that
 * rollout is the step's last try (the estimate fits in b_default), 0 when
 * another may follow, -EINVAL (kept >= b_train, b_default 0, zv_share
 * outside [0, 1]).
 */
V05_API int v05_greso_refill(uint32_t b_train, uint32_t kept,
			     double zv_share, uint32_t b_default,
			     uint32_t *b_next);

/* ---- Pilot-Commit: which prompts come back ------------------------------
 *
 * As its authors' code runs it (docs/RULES.md): a pilot's success rate p
 * (the mean of (1 + r) / 2 over its rewards) below `lower` is too hard:
 * deferred, the prompt comes back next epoch; above 1 - `upper` too easy:
 * skipped this epoch; at or above `evict` (their scripts: 1.0, every
 * pilot sample a success; NaN: never) solved: evicted, never drawn again
 * from the next epoch on; in [lower, 1 - upper] committed (the plugin's
 * mode "pilot-commit" gives it its commit samples). A prompt is drawn at
 * most once per epoch: one whose pilot was folded this epoch is not drawn
 * again in it (what a dataloader does; a stream that wraps within an
 * epoch would otherwise pilot it twice).
 */
enum v05_pc_class {
	V05_PC_COMMIT = 0,   /* in the band: committed, trained on     */
	V05_PC_TOO_HARD = 1, /* below the band: deferred               */
	V05_PC_TOO_EASY = 2, /* above the band: skipped this epoch     */
	V05_PC_SOLVED = 3,   /* at or above evict: evicted             */
};

struct v05_pc_prompt {
	uint64_t epoch; /* the epoch of its last pilot                   */
	uint32_t last;  /* enum v05_pc_class of that pilot               */
	uint32_t seen;  /* 1 once a pilot was folded                     */
};

/* The class of a pilot of k rewards (finite, in [-1, 1]) under the band
 * [lower, 1 - upper] (both in [0, 1], lower <= 1 - upper) and evict (in
 * [0, 1], or NaN: never). Returns the enum v05_pc_class, -EINVAL or -EDOM.
 * Solved wins over too easy. */
V05_API int v05_pc_class(const double *rewards, uint32_t k, double lower,
			 double upper, double evict);

/* A pilot of prompt x in `epoch` (epochs do not go back): its class, as
 * v05_pc_class, recorded in x. */
V05_API int v05_pc_fold(struct v05_pc_prompt *x, uint64_t epoch,
			const double *rewards, uint32_t k, double lower,
			double upper, double evict);

/* 1: do not draw x in `epoch` (evicted, and `epoch` is later than its
 * eviction; or piloted in this epoch already); 0: draw it; -EINVAL. */
V05_API int v05_pc_skip(const struct v05_pc_prompt *x, uint64_t epoch);

#ifdef __cplusplus
}
#endif

#endif /* V05_RULES_H */
