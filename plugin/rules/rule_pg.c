/* SPDX-License-Identifier: MIT */
/*
 * Mode v05-pg (docs/STATISTICS.md, "Mode v05-pg"): samples and prompts
 * allocated by the policy gradient's error per rollout, with v05-eb's
 * baseline (its running fit of the prior, eb.c, eb_state.c).
 *
 * A step's normalised gradient is the mean over its K prompts of each
 * prompt's mean over its n samples. In units of one sample's
 * within-prompt variance, its error relative to its signal is
 *
 *   R = sum_x (a + b_x / n_x) / (sum_x s_x)^2,
 *
 * a the between-prompt variance (pg_between), b_x = 1 + e_x^2 / tau_x
 * what a baseline off by e_x (its posterior variance) adds to a sample's,
 * tau_x = 4 p (1 - p) a sample's variance before normalising, s_x =
 * sqrt(tau_x) the prompt's signal after it. With N rollouts a step and
 * prompts drawn as they come, R = E[n] E[a + b / n] / (N E[s]^2): a
 * sample more on a prompt is a prompt fewer. E[n] E[a + b/n] is least
 * when each prompt's plan minimises b / n + lambda n for one price lambda
 * of a rollout; but the product is not convex (one prompt's best answer
 * depends on everyone's), so the rule does not chase a price from its own
 * plans: for each price of a grid (V05_PG_GRID, 0.02 to 5) it sums what
 * each prompt taken would have been expected to cost under it, E[n] and
 * E[a + b / n], and decides under the price whose product is least.
 *
 * At submit each prompt gets the first wave n1 (pg_first: 1, 2 or 4) that
 * minimises its expected cost under the running fit, the second wave
 * looked ahead; or none: a prompt whose expected signal is below pg_skip
 * per mille of the mean over the prompts submitted is skipped (R would
 * take only the best prompts, but a prompt never taken is a bias R does
 * not count, so only those whose gradient is next to nothing go). The
 * mean counts the skipped prompts too: over those taken alone each skip
 * raises the bar for the next, and a high pg_skip ran away (nearly every
 * prompt skipped; docs/STATISTICS.md). At its first wave it
 * gets the m more (multiples of k_step) that minimise b(n1 + m) / (n1 +
 * m) + lambda m, b at its expected posterior variance; the second wave is
 * final.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "rule.h"
#include "stats_core.h"
#include "../../shm/error.h"

/* tau = 4 p (1 - p) is floored: a prompt the fit is sure never succeeds
 * still has some variance, and b divides by it. */
#define TAU_FLOOR 1e-3
/* The price grid: lambda_j = LAMBDA_LO * LAMBDA_STEP^j. */
#define LAMBDA_LO 0.02
#define LAMBDA_HI 5.0
/* Before this weight of prompts is in the sums, the price is that of
 * one sample a prompt with an exact baseline (b = 1): a + 1. Nothing is
 * skipped before it either. */
#define WARM_PROMPTS 32.0
/* The plans a first wave looks at: first waves of up to MAX_FIRST samples
 * (pg_first's bits above it are refused), second waves of up to
 * MAX_M - 1 steps of k_step. */
#define MAX_FIRST 8
#define MAX_M 33

static double lambda_at(uint32_t j)
{
	return LAMBDA_LO * pow(LAMBDA_HI / LAMBDA_LO,
			       (double)j / (double)(V05_PG_GRID - 1));
}

struct post {
	double tau; /* 4 E[p (1 - p)], floored   */
	double e2;  /* Var(mu) = 4 Var(p)        */
};

static struct post post_of(const struct v05_eb_fit *fit, double prior,
			   uint32_t k, double s)
{
	double m, v, w2, pq;
	struct post q;

	v05__eb_posterior_u(fit, prior, k, s, &m, &v, &w2);
	/* E[p (1 - p)] = E[p] - E[p^2] = m - (v + m^2). */
	pq = m - v - m * m;
	q.tau = 4.0 * pq > TAU_FLOOR ? 4.0 * pq : TAU_FLOOR;
	q.e2 = 4.0 * v;
	return q;
}

/* The price decided under: the grid's least E[n] E[a + b / n]. */
static double price(const struct v05__rule_env *env)
{
	const struct v05_pg_stats *st = &env->state->pg;
	double best = INFINITY, lambda = env->config->pg_between + 1.0;

	if (st->weight < WARM_PROMPTS)
		return lambda;
	for (uint32_t j = 0; j < V05_PG_GRID; j++) {
		double f = st->rollouts[j] * st->error[j];

		if (f < best) {
			best = f;
			lambda = lambda_at(j);
		}
	}
	return lambda;
}

/*
 * What a prompt's second stage can be after n rewards with s successes:
 * for each m (0, k_step, ...; n + m <= k_max) its b(n + m) / (n + m), b
 * at the expected posterior variance after m more. Returns how many.
 */
static uint32_t stage2(const struct v05__rule_env *env,
		       const struct v05_eb_fit *fit, double prior, uint32_t n,
		       double s, double *bn)
{
	const struct v05_params *p = env->params;
	struct post q = post_of(fit, prior, n, s);
	uint32_t c = 0;

	bn[c++] = (1.0 + q.e2 / q.tau) / (double)n;
	for (uint32_t m = p->k_step; n + m <= p->k_max && c < MAX_M;
	     m += p->k_step)
		bn[c++] = (1.0 + v05__eb_ev_u(fit, prior, n, s, m) / q.tau) /
			  (double)(n + m);
	return c;
}

/* The m-th choice's b / n + lambda m: the least, its index. */
static uint32_t least(const double *bn, uint32_t c, uint32_t step,
		      double lambda, double *best)
{
	uint32_t i_best = 0;

	*best = bn[0];
	for (uint32_t i = 1; i < c; i++) {
		double v = bn[i] + lambda * (double)(i * step);

		if (v < *best) {
			*best = v;
			i_best = i;
		}
	}
	return i_best;
}

/* A prompt's first waves, looked ahead: for each allowed n1 and each t
 * of its successes, the predictive probability and the second stage. */
struct lookahead {
	uint32_t count;
	uint32_t n1[MAX_FIRST];
	double pt[MAX_FIRST][MAX_FIRST + 1];
	double bn[MAX_FIRST][MAX_FIRST + 1][MAX_M];
	uint32_t c[MAX_FIRST][MAX_FIRST + 1];
};

static void look_ahead(const struct v05__rule_env *env,
		       const struct v05_eb_fit *fit, double prior,
		       struct lookahead *la)
{
	const struct v05_params *p = env->params;

	la->count = 0;
	for (uint32_t n = 1; n <= p->k_max && n <= MAX_FIRST; n++) {
		uint32_t i = la->count;

		if (!(env->config->pg_first & (1u << n)))
			continue;
		la->n1[i] = n;
		for (uint32_t t = 0; t <= n; t++) {
			la->pt[i][t] = v05__eb_pred_u(fit, prior, n, t);
			la->c[i][t] = stage2(env, fit, prior, n, (double)t,
					     la->bn[i][t]);
		}
		la->count++;
	}
}

/* Under price lambda: the first wave of least expected cost (index into
 * la), and its plan's expected samples and b / n. */
static uint32_t plan(const struct v05__rule_env *env,
		     const struct lookahead *la, double lambda,
		     double *e_n, double *e_bn)
{
	uint32_t step = env->params->k_step, i_best = 0;
	double c_best = INFINITY;

	for (uint32_t i = 0; i < la->count; i++) {
		double c = lambda * (double)la->n1[i], n = 0.0, bn = 0.0;

		for (uint32_t t = 0; t <= la->n1[i]; t++) {
			double v;
			uint32_t m = least(la->bn[i][t], la->c[i][t], step,
					   lambda, &v);

			c += la->pt[i][t] * v;
			n += la->pt[i][t] * (double)(la->n1[i] + m * step);
			bn += la->pt[i][t] * la->bn[i][t][m];
		}
		if (c < c_best) {
			c_best = c;
			i_best = i;
			*e_n = n;
			*e_bn = bn;
		}
	}
	return i_best;
}

static uint32_t first_wave(const struct v05__rule_env *env,
			   const struct v05_eb_fit *fit, double prior,
			   uint32_t *early)
{
	const struct v05_pg_stats *st = &env->state->pg;
	struct lookahead la;
	double e_n, e_bn, s0;
	uint32_t i;

	*early = 0;
	if (!fit)
		return env->params->k_init;
	s0 = sqrt(post_of(fit, prior, 0, 0.0).tau);
	if (st->weight >= WARM_PROMPTS &&
	    1000.0 * s0 * st->weight <
		    (double)env->config->pg_skip * st->signal)
		return 0;
	look_ahead(env, fit, prior, &la);
	i = plan(env, &la, price(env), &e_n, &e_bn);
	return la.n1[i];
}

/* A prompt submitted: its expected signal (the skip's bar); if taken,
 * what its plan under each price of the grid was expected to cost (a
 * skipped prompt costs nothing, so only those taken are in the price). */
static void fold_prompt(const struct v05__rule_env *env,
			const struct v05_eb_fit *fit, double prior, bool taken)
{
	struct v05_pg_stats *st = &env->state->pg;
	double keep = v05__eb_keep(env);
	double a = env->config->pg_between;
	struct lookahead la;

	st->weight = keep * st->weight + 1.0;
	st->signal = keep * st->signal +
		     sqrt(post_of(fit, prior, 0, 0.0).tau);
	if (!taken)
		return;
	look_ahead(env, fit, prior, &la);
	for (uint32_t j = 0; j < V05_PG_GRID; j++) {
		double e_n = 0.0, e_bn = 0.0;

		(void)plan(env, &la, lambda_at(j), &e_n, &e_bn);
		st->rollouts[j] = keep * st->rollouts[j] + e_n;
		st->error[j] = keep * st->error[j] + a + e_bn;
	}
	st->prompts++;
}

static uint32_t more(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, float *gap)
{
	double bn[MAX_M], best, s = v05__eb_successes(r, k);
	uint32_t step = env->params->k_step;
	uint32_t c = stage2(env, fit, prior, k, s, bn);
	uint32_t m = least(bn, c, step, price(env), &best) * step;

	/* Padding goes to the largest baseline error relative to the
	 * prompt's variance: what another sample lowers most. */
	if (m) {
		struct post q = post_of(fit, prior, k, s);

		*gap = (float)((double)m + q.e2 / q.tau);
	}
	return m;
}

/* v05-eb's baseline under the fit; the decision is first_wave's and
 * more's, so the estimate itself never asks for more. */
static void estimate(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, struct v05_estimate *e,
		     double *adv)
{
	if (fit) {
		v05__eb_estimate_u(env->params, fit, prior, r, k, e, adv);
		e->action = V05_ACTION_STOP;
		e->has_target = false;
		e->k_target = 0.0;
		return;
	}
	v05__estimate_begin(e, r, k);
	v05__estimate_fused(env->params, prior, r, k, e, adv);
}

/* First waves of at most MAX_FIRST samples, one of them under k_max. */
static int check_config(const struct v05__rule *r, const struct v05_config *c)
{
	uint32_t k_max = c->params.k_max;
	uint32_t fits = k_max >= 31 ? c->pg_first :
				      c->pg_first & ((2u << k_max) - 1u);

	if (c->pg_first >> (MAX_FIRST + 1))
		return v05__fail(-EINVAL,
				 "%s: pg_first 0x%x asks for a first wave above %u samples",
				 r->name, c->pg_first, MAX_FIRST);
	if (!fits)
		return v05__fail(-EINVAL,
				 "%s: pg_first 0x%x allows no first wave of at most k_max = %u samples",
				 r->name, c->pg_first, k_max);
	return 0;
}

const struct v05__rule v05__rule_pg = {
	.name = "v05-pg",
	.waves = V05__WAVES_FIT,
	.flags = V05__RULE_MERGES | V05__RULE_SKIPS,
	.needs_plugin = "mode v05-pg needs its running fit and prices: run it in a plugin (v05_plugin_create)",
	/* The paper's normaliser: at one sample a prompt rms bounds a rare
	 * success's |A| by 1 (bench/train/PROBE.md, LEADERS.md). */
	.preset = { .k_init = 2, .k_step = 2, .k_max = 16,
		    .sigma = V05_SIGMA_PAPER },
	.check_config = check_config,
	.first_wave = first_wave,
	.fold_first = v05__eb_fold_first,
	.fold_prompt = fold_prompt,
	.estimate = estimate,
	.more = more,
};
