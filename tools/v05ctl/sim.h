/* SPDX-License-Identifier: MIT */
/* v05ctl sim's parts: the options, the advantage tallies, the run. */
#ifndef V05CTL_SIM_H
#define V05CTL_SIM_H

#include <stdint.h>

#include "v05.h"

struct sim_opts {
	uint64_t prompts, seed, batch;
	double noise, hallucination, cost, halt, p_fixed;
	uint32_t mode, k, k_max, pad, sigma, schedule;
	int have_k, have_p, have_k_max, have_pad, have_halt, have_cost;
	int have_sigma; /* else the mode's own (v05_config_mode) */
	int no_prior; /* every prior 0: no value model at all */
	/* v05-eb without a barrier: the running fit's window and cold start
	 * (0: the library's defaults). */
	uint32_t eb_window, eb_cold, have_eb_window, eb_early;
	/* v05-eb's first waves' sizes (bit k: k samples; have_eb_first:
	 * given, 0 for k_init always; else the library's default). */
	uint32_t eb_first, have_eb_first;
	/* A value model whose quality changes: from the batch that starts
	 * at or after half the prompts on, priors have this noise and
	 * hallucination share (have_drift). */
	double drift_noise, drift_hallucination;
	int have_drift;
	/* Epochs over the same prompts (fresh rewards each time): what the
	 * rules with a cross-epoch state (knapsack, greso) learn from. */
	uint64_t epochs;
	/* Each p from Beta(p_beta, p_beta_b) instead of uniform (have_beta;
	 * p_beta_b = p_beta for the symmetric --p-beta A): below 1 it piles
	 * prompts near 0 and 1, as real datasets do; unequal, it skews. */
	double p_beta, p_beta_b;
	int have_beta;
	/* Pilot-Commit's band (have_band: given, else the library's) and
	 * eviction of solved prompts across epochs (NaN: never). */
	double pc_lower, pc_upper, pc_evict;
	int have_band;
	/* EBPO's forgetting window in groups (0: none, the default). */
	uint32_t ebpo_window;
	/* v05-pg's skip bar, per mille (have_pg_skip: given, else the
	 * library's V05_PG_SKIP). */
	uint32_t pg_skip;
	int have_pg_skip;
};

/* |A| of every final sample, this mode's and grpo's on the same groups. */
struct adv_acc {
	double *abs;
	uint64_t n, cap;
	double sq;
};

struct sim_out {
	double sq_err, k_sum;
	uint32_t max_k, max_waves;
	uint64_t dropped, groups, nonzero; /* nonzero: a trained advantage
					    * that is not 0 */
	uint64_t skipped; /* greso, pilot-commit: candidates not rolled out;
			   * v05-pg: prompts it took no sample of */
	uint64_t first_k, first_n; /* first waves' samples (early start
				    * included) and count, at submit */
	struct adv_acc adv, grpo;
};

/* sim_adv.c: |A| tallies and their quantiles in the JSON. */
int sim_adv_group(struct sim_out *out, const struct v05_group *g);
void sim_adv_print(const char *name, struct adv_acc *a);

/* sim_run.c: the simulation on a real plugin; prints one JSON object. */
int sim_run(const struct sim_opts *o);
int sim_fail(const char *what);

#endif
