/* SPDX-License-Identifier: MIT */
/*
 * GRESO's pre-rollout filter (include/v05/rules.h, docs/RULES.md): the rule
 * as its authors' code runs it, its paper's text being out of reach here.
 * Pure functions on the caller's records: the trainer keeps one
 * struct v05_greso_prompt per dataset prompt and one struct v05_greso per
 * run. The groups themselves are dapo's (the row below: mode greso drops a
 * zero-variance group).
 */
#include <assert.h>
#include <errno.h>
#include <math.h>

#include "rule.h"
#include "splitmix.h"
#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/rules.h"

static_assert(sizeof(struct v05_greso_prompt) == 8, "greso prompt ABI");
static_assert(sizeof(struct v05_greso) == 48, "greso state ABI");

/* The authors' thresholds on their 0 / 0.1 / 1 reward scale (all correct:
 * mean >= 0.98; all wrong: mean <= 0.11), mapped to [-1, 1]. For binary
 * rewards: all +1, all -1. */
#define EASY_AT 0.96
#define HARD_AT (-0.78)

static int check_rates(const struct v05_greso *g)
{
	if (!(g->p_easy >= V05_GRESO_P_MIN && g->p_easy <= V05_GRESO_P_MAX &&
	      g->p_hard >= V05_GRESO_P_MIN && g->p_hard <= V05_GRESO_P_MAX))
		return v05__fail(-EINVAL,
				 "greso: rates %g, %g are not in [%g, %g] (not a state v05_greso_init made)",
				 g->p_easy, g->p_hard, V05_GRESO_P_MIN,
				 V05_GRESO_P_MAX);
	return 0;
}

static int check_prompt(const struct v05_greso_prompt *x)
{
	if (x->kind > V05_GRESO_HARD || (x->z == 0) != (x->kind == V05_GRESO_MIXED))
		return v05__fail(-EINVAL, "greso: prompt record (z %u, kind %u) cannot be",
				 x->z, x->kind);
	return 0;
}

/* A rate state and a prompt record, both as this file writes them. */
static int check_pair(const struct v05_greso *g,
		      const struct v05_greso_prompt *x)
{
	int ret;

	if (!g || !x)
		return v05__fail(-EINVAL, "greso: NULL argument");
	ret = check_rates(g);
	return ret ? ret : check_prompt(x);
}

V05_API void v05_greso_init(struct v05_greso *g, uint64_t seed)
{
	if (!g)
		return;
	g->p_easy = g->p_hard = V05_GRESO_P0;
	g->seed = seed;
	g->total = g->easy = g->hard = 0;
}

V05_API int v05_greso_fold(struct v05_greso *g, struct v05_greso_prompt *x,
			   const double *rewards, uint32_t k)
{
	uint32_t kind = V05_GRESO_MIXED;
	bool same = true;
	int ret;

	v05__clear_error();
	ret = check_pair(g, x);
	if (ret)
		return ret;
	if (!rewards)
		return v05__fail(-EINVAL, "greso: NULL argument");
	if (k == 0 || k > V05_K_LIMIT)
		return v05__fail(-EINVAL, "greso: k = %u is not in [1, %u]", k,
				 V05_K_LIMIT);
	for (uint32_t i = 0; i < k; i++) {
		if (!(rewards[i] >= -1.0 && rewards[i] <= 1.0))
			return v05__fail(-EDOM, "greso: reward %u = %g is not in [-1, 1]",
					 i, rewards[i]);
		/* As float32, the thresholds too (stats_core.h, v05__r32). */
		same = same && v05__r32(rewards[i]) == v05__r32(rewards[0]);
	}
	if (same && v05__r32(rewards[0]) >= v05__r32(EASY_AT))
		kind = V05_GRESO_EASY;
	else if (same && v05__r32(rewards[0]) <= v05__r32(HARD_AT))
		kind = V05_GRESO_HARD;
	/* A run counts groups of one kind; another kind starts a new run,
	 * a group with any spread (or zero variance between the two
	 * thresholds) ends it. */
	if (kind == V05_GRESO_MIXED)
		x->z = 0;
	else
		x->z = x->kind == kind && x->z < UINT32_MAX ? x->z + 1 : 1;
	x->kind = kind;
	g->total++;
	g->easy += kind == V05_GRESO_EASY;
	g->hard += kind == V05_GRESO_HARD;
	return (int)kind;
}

static double keep_p(const struct v05_greso *g, const struct v05_greso_prompt *x)
{
	double p = x->kind == V05_GRESO_EASY ? g->p_easy : g->p_hard;
	double keep = pow(p, (double)x->z);

	if (x->z == 0)
		return 1.0;
	return keep > V05_GRESO_KEEP_FLOOR ? keep : V05_GRESO_KEEP_FLOOR;
}

V05_API int v05_greso_keep_p(const struct v05_greso *g,
			     const struct v05_greso_prompt *x, double *keep)
{
	int ret;

	v05__clear_error();
	ret = check_pair(g, x);
	if (ret)
		return ret;
	if (!keep)
		return v05__fail(-EINVAL, "greso: NULL argument");
	*keep = keep_p(g, x);
	return 0;
}

V05_API int v05_greso_skip(const struct v05_greso *g,
			   const struct v05_greso_prompt *x, uint64_t key,
			   uint64_t step)
{
	uint64_t s;
	double u;
	int ret;

	v05__clear_error();
	ret = check_pair(g, x);
	if (ret)
		return ret;
	if (x->z == 0)
		return 0;
	/* One draw per (run, prompt, step), uniform on [0, 1) from the top
	 * 53 bits: the same choices on a rerun and after a takeover, and
	 * independent across prompts and steps. */
	s = g->seed ^ (key * 0x9e3779b97f4a7c15ull);
	(void)v05__splitmix64(&s);
	s ^= step * 0xc2b2ae3d27d4eb4full;
	u = (double)(v05__splitmix64(&s) >> 11) * 0x1.0p-53;
	return u >= keep_p(g, x);
}

/* One rate's step: down (skip that kind more) when its share reached its
 * target, else up; within the bounds. */
static double adapt(double p, uint64_t n, uint64_t total, double target)
{
	p += (double)n / (double)total >= target ? -V05_GRESO_DELTA :
						   V05_GRESO_DELTA;
	return p < V05_GRESO_P_MIN ? V05_GRESO_P_MIN :
	       p > V05_GRESO_P_MAX ? V05_GRESO_P_MAX : p;
}

V05_API int v05_greso_step_end(struct v05_greso *g)
{
	int ret;

	v05__clear_error();
	if (!g)
		return v05__fail(-EINVAL, "greso: NULL argument");
	ret = check_rates(g);
	if (ret)
		return ret;
	if (g->easy > g->total || g->hard > g->total - g->easy)
		return v05__fail(-EINVAL, "greso: step counts cannot be");
	if (g->total) {
		/* The target split as the authors split it: a third to
		 * easy prompts, two thirds to hard ones ("more exploration
		 * on hard examples"). */
		g->p_easy = adapt(g->p_easy, g->easy, g->total,
				  V05_GRESO_TARGET / 3.0);
		g->p_hard = adapt(g->p_hard, g->hard, g->total,
				  2.0 * V05_GRESO_TARGET / 3.0);
	}
	g->total = g->easy = g->hard = 0;
	return 0;
}

V05_API int v05_greso_refill(uint32_t b_train, uint32_t kept,
			     double zv_share, uint32_t b_default,
			     uint32_t *b_next)
{
	double est;

	v05__clear_error();
	if (!b_next)
		return v05__fail(-EINVAL, "greso refill: NULL argument");
	if (kept >= b_train || b_default == 0)
		return v05__fail(-EINVAL,
				 "greso refill: %u of %u kept, rollout batch %u: nothing to refill",
				 kept, b_train, b_default);
	if (!(zv_share >= 0.0 && zv_share <= 1.0))
		return v05__fail(-EINVAL, "greso refill: zero-variance share %g is not in [0, 1]",
				 zv_share);
	/* Every group zero-variance: no estimate; the largest batch, and
	 * another may follow. */
	est = zv_share < 1.0 ?
		      floor(V05_GRESO_REFILL_OVER * (double)(b_train - kept) /
			    (1.0 - zv_share)) :
		      INFINITY;
	if (est <= (double)b_default) {
		uint32_t e = (uint32_t)est;

		*b_next = e > V05_GRESO_REFILL_MIN ? e : V05_GRESO_REFILL_MIN;
		if (*b_next > b_default)
			*b_next = b_default;
		return 1;
	}
	*b_next = b_default;
	return 0;
}

/* ---- the row: mode greso, dapo's groups at GRESO's G ---------------- */

const struct v05__rule v05__rule_greso = {
	.name = "greso",
	.waves = V05__WAVES_STEPS,
	/* G = 8 per prompt (GRESO's authors'); one wave. */
	.preset = { .k_init = 8, .k_step = 1, .k_max = 8 },
	.estimate = v05__rule_dapo_estimate,
};
