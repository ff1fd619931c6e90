/* SPDX-License-Identifier: MIT */
/*
 * A mode is a row of the rule table (table.c), as a schedule is a row of
 * the schedule table (schedules/schedule.h): its name, its flags and its
 * functions. The functions are pure: they see the parameters, the
 * configuration and the rule's running state (struct v05__rule_env),
 * never the plugin. The mechanics, the schedules and the
 * top call them through the row the plugin was created with (struct
 * v05_plugin's rule); v05_estimate, v05_keep, v05_decide and
 * v05_params_check through the row of p->mode (modes.c); config.c for the
 * presets and checks. Nothing else branches on the mode
 * (tests/check_modes.py).
 *
 * A new mode: its number in include/v05/stats.h (enum v05_mode), one file
 * rule_<name>.c defining its `const struct v05__rule v05__rule_<name>`
 * (a hook left NULL takes the default its comment below gives), one line in
 * table.c's V05__RULES, and the file in plugin/meson.build
 * (docs/LAYOUT.md, "Where a change goes").
 */
#ifndef V05_PLUGIN_RULE_H
#define V05_PLUGIN_RULE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "v05/plugin.h"
#include "v05/stats.h"

/*
 * A rule's running state, in the segment's state region (a takeover keeps
 * it; mechanics/internal.h checks it fits), written by the owner only:
 * - own, remote: the running fit of the prior (the grid's log-likelihood,
 *   eb_state.c) of a rule that folds first waves or groups into it (v05-eb
 *   under the stream schedule). own: this plugin's, forgetting applied as
 *   folded; remote: the other engines' states as last handed in
 *   (v05_eb_state_set_remote), replaced whole each time, never folded into
 *   own, so an exchange repeated counts nothing twice.
 * - ebpo: EBPO's running Welford statistics (mode ebpo).
 * - pg: v05-pg's running sums over the prompts it took (rule_pg.c).
 * - barrier: v05-eb's last barrier fit (rounds), for the first waves.
 */
#define V05_PG_GRID 12 /* rollout prices v05-pg weighs (rule_pg.c) */
struct v05_pg_stats {
	/* Each a sum over prompts at submit, the older ones weighed down
	 * by 1 - 1/eb_window per prompt folded (none with eb_window 0):
	 * weight and signal over every prompt submitted, skipped ones
	 * included (the skip's bar); per price j of the grid, over the
	 * prompts taken, what each one's plan under that price was
	 * expected to cost: */
	double weight;                /* prompts                         */
	double signal;                /* expected sqrt(4 p (1 - p))      */
	double rollouts[V05_PG_GRID]; /* expected samples, n             */
	double error[V05_PG_GRID];    /* expected error, a + b / n       */
	uint64_t prompts;             /* folded, forgetting aside        */
	uint64_t pad;
};
static_assert(sizeof(struct v05_pg_stats) == 32 + 16 * V05_PG_GRID,
	      "pg stats ABI");

struct v05_fit_store {
	struct v05_eb_state own;
	struct v05_eb_state remote;
	uint64_t remote_sets; /* v05_eb_state_set_remote calls */
	/* own's sequence word (shm/atomics.h, the seqlock): odd while the
	 * owner changes own, so another process can copy it whole
	 * (v05_observer_eb_state). Took padding that was 0. */
	uint32_t own_seq;
	uint32_t pad;
	/* Segment ABI 8: EBPO's running statistics (mode ebpo). */
	struct v05_ebpo ebpo;
	/* Segment ABI 9: v05-pg's running sums. */
	struct v05_pg_stats pg;
	/* Segment ABI 9: the fit of the last barrier whose batch had at
	 * least eb_cold first waves (rounds: the next batches' first waves
	 * are chosen under it); barrier_groups 0: none yet. */
	struct v05_eb_fit barrier;
	uint64_t barrier_groups;
	uint64_t pad2;
};
/* own_seq's place is what another process reads (v05_observer_eb_state);
 * the store's size is checked against the segment's state region
 * (mechanics/internal.h). */
static_assert(offsetof(struct v05_fit_store, own_seq) ==
	      2 * sizeof(struct v05_eb_state) + 8, "fit store ABI");

/* What a rule reads besides a group: the parameters, the configuration
 * (a rule's own fields: pc_lower, eb_window, ...), its running state. The
 * plugin fills one at create and attach, the configuration as the segment
 * stores it (a rule's parameter must be stored there: a takeover reads
 * it); v05_estimate one of the parameters with the authors' band and no
 * state (modes.c). */
struct v05__rule_env {
	const struct v05_params *params;
	const struct v05_config *config;
	struct v05_fit_store *state; /* NULL: no plugin */
};

/* v05-eb's running fit, which v05-pg shares (rule_eb.c): what a fold
 * keeps of the state before it (1 - 1/eb_window; 1 for no window), and
 * the fold of a first wave into the engine's own state. */
double v05__eb_keep(const struct v05__rule_env *env);
void v05__eb_fold_first(const struct v05__rule_env *env, double prior,
			const double *r, uint32_t k);

/* How a rule's groups go in waves, which picks its schedules (schedule.c:
 * the row's waves and the configured schedule). */
enum v05__waves {
	/* A group is decided when its issued samples are in; its "more" is
	 * k_step more samples, held by the schedule rounds (the paper's
	 * barrier) or stream; a held prompt adds k_step to its batch's held
	 * samples (mechanics.h, v05__held_share). */
	V05__WAVES_STEPS = 0,
	/* A first wave is decided under a fit of the prior (rounds: the
	 * batch's barrier fit; stream: the running fit, folded first wave
	 * by first wave) with a plan of its own (more()); the second wave
	 * is final. No halt, no external halt. A held prompt adds what its
	 * plan adds (k_planned - k; 0 while undecided). */
	V05__WAVES_FIT,
};

enum v05__rule_flag {
	/* v05_decide answers the paper's stopping rule (OSLA). */
	V05__RULE_OSLA = 1u << 0,
	/* The batch's halt cuts its "more" short (schedule stream checks
	 * it after every decision; under the others a halt would stop
	 * nothing, and counting one would say otherwise). */
	V05__RULE_HALTS = 1u << 1,
	/* Takes no padding and no halt: config_check wants pad_multiple 1
	 * and halt_fraction 0 (padding would add samples to its pool, a
	 * halt cut its rounds short). */
	V05__RULE_NO_PAD_HALT = 1u << 2,
	/* A NaN prior at submit is "no estimate yet" (kept as 0: nothing
	 * reads it), not a value model that failed. */
	V05__RULE_NAN_PRIOR = 1u << 3,
	/* Its running fit is the engines' to share (v05_eb_state_get,
	 * _set_remote, _set_own), under the stream schedule. */
	V05__RULE_MERGES = 1u << 4,
	/* Takes eb_early, the early start (first_wave's *early), under
	 * the stream schedule. */
	V05__RULE_EARLY = 1u << 5,
	/* Takes eb_first, the first wave's sizes first_wave chooses from
	 * (checked against k_max; other rules ignore it). */
	V05__RULE_FIRST = 1u << 6,
	/* Its first_wave may answer 0: the prompt is skipped at submit
	 * (only such a rule's submit holds the skipped prompts). */
	V05__RULE_SKIPS = 1u << 7,
};

struct v05__rule {
	const char *name;   /* v05_mode_name, v05_mode_from_name        */
	uint32_t waves;     /* enum v05__waves                          */
	uint32_t flags;     /* enum v05__rule_flag                      */
	/* Why v05_estimate cannot run it without the plugin's state, or
	 * NULL (it can). */
	const char *needs_plugin;
	/* Its default cost per rollout (v05_config_default for the default
	 * mode, v05_config_mode); 0: V05_DEFAULT_COST. */
	double cost;

	/* ---- configuration (config.c, modes.c) ---- */
	/* What the rule's authors ran, set by v05_config_mode besides the
	 * mode: k_init, k_step, k_max, and with them pad_multiple 1 and
	 * halt_fraction 0 (one wave, or rounds nothing may pad or cut
	 * short), keep_n 0 for a rule that keeps part of a group, and the
	 * normaliser (enum v05_sigma; only the fused estimates read it).
	 * k_init 0: no preset (the defaults stand). */
	struct v05__preset {
		uint32_t k_init, k_step, k_max, sigma;
	} preset;
	/* Checks beyond the common ones: 0 or a negative errno with its
	 * message (v05__fail). NULL: none. A rule without keep() takes no
	 * keep_n (checked for it). */
	int (*check_params)(const struct v05__rule *r,
			    const struct v05_params *p);
	int (*check_config)(const struct v05__rule *r,
			    const struct v05_config *c);

	/* ---- at submit (submit.c) ---- */
	/* The batch's first waves planned together (knapsack): k0[i] in
	 * [1, k_max] for n priors as submitted (prior[] is scratch the
	 * hook may overwrite; a prior that is not valid plans as 0, its
	 * prompt is refused anyway). 0 or -ENOMEM. NULL: first_wave's. */
	int (*plan_batch)(const struct v05_params *p, double *prior,
			  uint32_t n, uint32_t *k0);
	/* One prompt's first wave: its size in [1, k_max] (the samples its
	 * first decision waits for), and in *early the samples issued with
	 * it beyond that (the early start; k0 + *early <= k_max); or 0: the
	 * prompt is skipped (no sample; its DROP with k = 0 is queued at
	 * submit). fit: once warm, the running fit (stream) or the last
	 * barrier's (rounds), else NULL. NULL hook: k_init, none. */
	uint32_t (*first_wave)(const struct v05__rule_env *env,
			       const struct v05_eb_fit *fit, double prior,
			       uint32_t *early);

	/* ---- a group (decide.c, finalize.c, the schedules) ---- */
	/* The group the rule decides on (its issued samples in), into the
	 * running state before its estimate: EBPO's "fold, then estimate".
	 * NULL: no running state. */
	void (*fold_group)(const struct v05__rule_env *env, double prior,
			   const double *r, uint32_t k);
	/* WAVES_FIT under stream: a first wave into the running fit,
	 * before its decision (the decision sees its own group). */
	void (*fold_first)(const struct v05__rule_env *env, double prior,
			   const double *r, uint32_t k);
	/* The group's numbers and action (e->action: stop, more, drop) and
	 * its advantages (adv may be NULL). fit: the fit a WAVES_FIT
	 * rule's group is under, NULL when there is none. */
	void (*estimate)(const struct v05__rule_env *env,
			 const struct v05_eb_fit *fit, double prior,
			 const double *r, uint32_t k, struct v05_estimate *e,
			 double *adv);
	/* WAVES_FIT: the samples a first wave of k gets more (0: final
	 * now), and for a plan (m > 0) its padding priority in *gap. */
	uint32_t (*more)(const struct v05__rule_env *env,
			 const struct v05_eb_fit *fit, double prior,
			 const double *r, uint32_t k, float *gap);
	/* A prompt accepted at submit, taken (first_wave gave it
	 * samples) or skipped, under the running fit (warm: not NULL),
	 * into the running state before the next prompt's first wave:
	 * v05-pg's sums. NULL: none kept. */
	void (*fold_prompt)(const struct v05__rule_env *env,
			    const struct v05_eb_fit *fit, double prior,
			    bool taken);
	/* The samples a final group is trained on, bit i for sample i.
	 * NULL: all k. */
	uint64_t (*keep)(const struct v05_params *p, const double *r,
			 uint32_t k);
};

/* rule_grpo.c: GRPO's estimate (modes grpo, knapsack's before its clip)
 * and dapo's (a zero-variance group dropped; mode greso), for the rows
 * built on them. */
void v05__rule_grpo_estimate(const struct v05__rule_env *env,
			     const struct v05_eb_fit *fit, double prior,
			     const double *r, uint32_t k,
			     struct v05_estimate *e, double *adv);
void v05__rule_dapo_estimate(const struct v05__rule_env *env,
			     const struct v05_eb_fit *fit, double prior,
			     const double *r, uint32_t k,
			     struct v05_estimate *e, double *adv);

/* table.c: the row of mode (mode < V05_MODE_COUNT), NULL otherwise. */
const struct v05__rule *v05__rule_of(uint32_t mode);

#endif
