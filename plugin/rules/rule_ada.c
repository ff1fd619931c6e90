/* SPDX-License-Identifier: MIT */
/*
 * Reinforce-Ada (arXiv 2510.04996 v1, section 2.2, Algorithm 1; the
 * authors' defaults as their experiments ran them): a prompt samples in
 * rounds until its group has the signal it needs, then trains on n of its
 * k samples with a baseline from all k. A pure rule: no plugin state.
 *
 * The exit test sees whole rounds only (the plugin decides when every
 * issued sample is in, and the mode refuses padding), so a prompt's k, its
 * keep set and its advantages depend on its own rewards alone: the same
 * under the rounds schedule and the stream, in any arrival order.
 */
#include <errno.h>

#include "rule.h"
#include "stats_core.h"
#include "../../shm/error.h"

/* K_pos and K_neg of the exit test (v1 section 2.2: n/2 and n - n/2
 * balanced; at least one success for the positive exit). */
static void exits(bool pos, uint32_t n, uint32_t *kpos, uint32_t *kneg)
{
	if (pos) {
		*kpos = 1;
		*kneg = 0;
	} else {
		*kpos = n / 2;
		*kneg = n - n / 2;
	}
}

/* A success: above the threshold, as float32 (stats_core.h, v05__r32). */
static bool success(double r)
{
	return v05__r32(r) > v05__r32(V05_ADA_TAU);
}

static void count(const double *r, uint32_t k, uint32_t *pos, uint32_t *neg)
{
	*pos = 0;
	for (uint32_t i = 0; i < k; i++)
		*pos += success(r[i]);
	*neg = k - *pos;
}

uint32_t v05__ada_n(const struct v05_params *p)
{
	return p->keep_n ? p->keep_n : (p->k_init / 2 ? p->k_init / 2 : 1);
}

bool v05__ada_exited(const struct v05_params *p, bool positive,
		     const double *r, uint32_t k)
{
	uint32_t pos, neg, kpos, kneg;

	count(r, k, &pos, &neg);
	exits(positive, v05__ada_n(p), &kpos, &kneg);
	return pos >= kpos && neg >= kneg;
}

/*
 * Down-sample to n (Algorithm 1 line 18): at least n/2 of each outcome
 * where the pool has them, the rest filled from the other; within an
 * outcome the lowest sample indices (the authors keep the first ones they
 * cached; the paper does not say). A positive-exit group that never
 * exited has no success, so it keeps its first n failures, as the
 * authors' fallback does in that case.
 */
uint64_t v05__ada_keep(const struct v05_params *p, const double *r,
		       uint32_t k)
{
	uint32_t n = v05__ada_n(p), pos, neg, take, kp, kn;
	uint64_t keep = 0;

	count(r, k, &pos, &neg);
	take = n < k ? n : k;
	kp = pos < n / 2 ? pos : n / 2;
	kn = neg < take - kp ? neg : take - kp;
	kp += pos - kp < take - kp - kn ? pos - kp : take - kp - kn;
	for (uint32_t i = 0; i < k && (kp || kn); i++) {
		if (success(r[i]) && kp) {
			keep |= 1ull << i;
			kp--;
		} else if (!success(r[i]) && kn) {
			keep |= 1ull << i;
			kn--;
		}
	}
	return keep;
}

void v05__estimate_ada(const struct v05_params *p, bool pos, const double *r,
		       uint32_t k, struct v05_estimate *e, double *adv)
{
	uint64_t keep = v05__ada_keep(p, r, k);

	/* "Global statistics": the mean of every reward the prompt got; no
	 * std (v1 section 2.3), so sigma is 1 and |A| <= 2. */
	e->baseline = e->mean;
	e->weight = 1.0;
	e->sigma = 1.0;
	if (!v05__ada_exited(p, pos, r, k) && k + p->k_step <= p->k_max)
		e->action = V05_ACTION_MORE;
	for (uint32_t i = 0; adv && i < k; i++)
		adv[i] = keep >> i & 1 ? r[i] - e->baseline : 0.0;
}

/* ---- the rows: reinforce-ada (balanced exit), reinforce-ada-pos ---- */

/* Rounds of M = k_init (v1 Algorithm 1). */
static int check_params(const struct v05__rule *r, const struct v05_params *p)
{
	if (p->k_step != p->k_init)
		return v05__fail(-EINVAL,
				 "%s samples in rounds of k_init: k_step %u must equal k_init %u",
				 r->name, p->k_step, p->k_init);
	if (p->keep_n > p->k_init)
		return v05__fail(-EINVAL,
				 "keep_n %u is above k_init %u (the group trained on is at most one round)",
				 p->keep_n, p->k_init);
	return 0;
}

static void estimate_balanced(const struct v05__rule_env *env,
			      const struct v05_eb_fit *fit, double prior,
			      const double *r, uint32_t k,
			      struct v05_estimate *e, double *adv)
{
	(void)fit;
	(void)prior;
	v05__estimate_begin(e, r, k);
	v05__estimate_ada(env->params, false, r, k, e, adv);
}

static void estimate_positive(const struct v05__rule_env *env,
			      const struct v05_eb_fit *fit, double prior,
			      const double *r, uint32_t k,
			      struct v05_estimate *e, double *adv)
{
	(void)fit;
	(void)prior;
	v05__estimate_begin(e, r, k);
	v05__estimate_ada(env->params, true, r, k, e, adv);
}

const struct v05__rule v05__rule_ada = {
	.name = "reinforce-ada",
	.waves = V05__WAVES_STEPS,
	.flags = V05__RULE_NO_PAD_HALT,
	/* What the authors' experiments ran (docs/RULES.md): rounds of
	 * M = 8 up to N_max = 32, n = 4 trained on; nothing may add samples
	 * to the pool or cut a prompt's rounds short. */
	.preset = { .k_init = 8, .k_step = 8, .k_max = 32 },
	.check_params = check_params,
	.estimate = estimate_balanced,
	.keep = v05__ada_keep,
};

const struct v05__rule v05__rule_ada_pos = {
	.name = "reinforce-ada-pos",
	.waves = V05__WAVES_STEPS,
	.flags = V05__RULE_NO_PAD_HALT,
	/* As reinforce-ada's. */
	.preset = { .k_init = 8, .k_step = 8, .k_max = 32 },
	.check_params = check_params,
	.estimate = estimate_positive,
	.keep = v05__ada_keep,
};
