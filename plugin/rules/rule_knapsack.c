/* SPDX-License-Identifier: MIT */
/*
 * Knapsack RL's allocation (arXiv 2509.25849; the rule as its authors' code
 * runs it, their paper's full text being out of reach here: docs/RULES.md
 * says what was read). A batch's budget of per_prompt samples per prompt
 * is split to maximise sum_i Value(N_i, p_i), with
 *   Value(N, p) = (1 - p^N - (1 - p)^N) * p (1 - p)^2
 * (the chance the group has a non-zero gradient, times the information a
 * prompt of success rate p gives), each N_i in [N_LOW, n_up]. Value is
 * concave in N for 0 < p < 1, so handing out one sample at a time to the
 * largest marginal value is exactly optimal; ties go to the lower index.
 * A pure rule: no plugin state. Mode "knapsack" takes p from each prompt's
 * own past rewards (v05_knapsack_hist_*, below), kept by the trainer.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "rule.h"
#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/rules.h"

/* (1 - p)^m without forming 1 - p, which rounds to 1 for p below 1.1e-16
 * (and loses p's digits well above that). */
static double pow1m(double p, uint32_t m)
{
	return m ? exp((double)m * log1p(-p)) : 1.0;
}

/*
 * The marginal value of a prompt's (n+1)-th sample, Value(n + 1, p) -
 * Value(n, p), in closed form: (1-p)^n - (1-p)^(n+1) = p (1-p)^n and
 * p^n - p^(n+1) = (1-p) p^n, so
 *   gain = p^2 (1-p)^3 [(1-p)^(n-1) + p^(n-1)],
 * a product of positive terms for 0 < p < 1: no cancellation, so a p one
 * ulp from 0 or 1, or subnormal, gets its true (tiny, >= 0) gain, where
 * the difference of two values gave 0 or a negative number.
 */
static double gain(uint32_t n, double p)
{
	return p * p * pow1m(p, 3) * (pow1m(p, n - 1) + pow(p, n - 1));
}

struct heap {
	uint32_t *at; /* prompt indices, a max-heap on (gain, -index) */
	double *g;    /* by prompt index: its next sample's gain       */
	uint32_t len;
};

static bool above(const struct heap *h, uint32_t a, uint32_t b)
{
	return h->g[a] > h->g[b] || (h->g[a] == h->g[b] && a < b);
}

static void sift_down(struct heap *h, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i, t;

		if (l < h->len && above(h, h->at[l], h->at[m]))
			m = l;
		if (r < h->len && above(h, h->at[r], h->at[m]))
			m = r;
		if (m == i)
			return;
		t = h->at[i];
		h->at[i] = h->at[m];
		h->at[m] = t;
		i = m;
	}
}

/* Spread `left` samples one at a time over the prompts `want` selects that
 * are below n_up, in index order, round after round; returns what is left
 * (every selected prompt at n_up). */
static uint32_t spread(const double *p01, uint32_t n, uint32_t n_up,
		       uint32_t *out, uint32_t left, int want)
{
	bool placed = true;

	while (left && placed) {
		placed = false;
		for (uint32_t i = 0; i < n && left; i++) {
			bool sel = want == 0 ? p01[i] == 0.0 :
				   want == 1 ? p01[i] == 0.0 || p01[i] == 1.0 :
					       true;

			if (sel && out[i] < n_up) {
				out[i]++;
				left--;
				placed = true;
			}
		}
	}
	return left;
}

int v05__knapsack_plan_u(const double *p01, uint32_t n, uint32_t per_prompt,
			 uint32_t n_up, uint32_t *out)
{
	struct heap h = { 0 };
	uint32_t r = n * (per_prompt - V05_KNAPSACK_N_LOW), eligible = 0;
	uint32_t zero = 0, unknown = 0;
	double est = 0.0, cap = log(1.0 - V05_KNAPSACK_ALPHA);

	for (uint32_t i = 0; i < n; i++) {
		out[i] = V05_KNAPSACK_N_LOW;
		if (isnan(p01[i])) {
			/* No estimate yet: the uniform budget, outside the
			 * knapsack (the authors' first epoch). */
			out[i] = per_prompt;
			r -= per_prompt - V05_KNAPSACK_N_LOW;
			unknown++;
			continue;
		}
		if (p01[i] > 0.0 && p01[i] < 1.0) {
			/* Samples to see both outcomes with probability
			 * alpha: log(1 - alpha) / log(1 - m), m the rarer
			 * outcome's chance (exact: 1 - p is for p >= 0.5).
			 * log1p(-m) < 0 for every m > 0, subnormal too, so
			 * need is positive, +inf at worst (then n_up). */
			double m = p01[i] > 0.5 ? 1.0 - p01[i] : p01[i];
			double need = cap / log1p(-m);

			eligible++;
			est += floor(need < n_up ? need : n_up);
		}
		zero += p01[i] == 0.0;
	}
	if (eligible == 0) {
		/* Nothing the knapsack can value: the budget goes to the
		 * prompts never solved (what they cannot take, once all are
		 * at n_up, to the others: the budget is spent unless every
		 * prompt is at n_up, as v05_knapsack_plan promises), else
		 * uniformly. */
		if (zero)
			spread(p01, n, n_up, out, spread(p01, n, n_up, out, r, 0),
			       2);
		else
			for (uint32_t i = 0; i < n; i++)
				out[i] = per_prompt;
		return 0;
	}
	/* The fallback: budget beyond what the eligible prompts can use
	 * (each needs about log(1 - alpha) / log(max(p, 1 - p)) samples to
	 * show both outcomes) goes to the unsolved prompts, or else to the
	 * other prompts outside the knapsack. Prompts without an estimate
	 * are neither (spread's tests are false for NaN): they keep their
	 * uniform share. */
	if (est < (double)r && (zero || eligible + unknown < n)) {
		uint32_t extra = r - (uint32_t)est, left;

		left = spread(p01, n, n_up, out, extra, zero ? 0 : 1);
		r = (uint32_t)est + left;
	}
	h.at = malloc((size_t)n * sizeof(*h.at));
	h.g = malloc((size_t)n * sizeof(*h.g));
	if (!h.at || !h.g) {
		free(h.at);
		free(h.g);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (p01[i] > 0.0 && p01[i] < 1.0 && out[i] < n_up) {
			h.g[i] = gain(out[i], p01[i]);
			h.at[h.len++] = i;
		}
	}
	for (uint32_t i = h.len / 2; i-- > 0;)
		sift_down(&h, i);
	while (r && h.len) {
		uint32_t i = h.at[0];

		out[i]++;
		r--;
		if (out[i] < n_up) {
			h.g[i] = gain(out[i], p01[i]);
		} else {
			h.at[0] = h.at[--h.len];
		}
		sift_down(&h, 0);
	}
	free(h.at);
	free(h.g);
	/* Every eligible prompt at n_up: the rest to whoever is below. */
	spread(p01, n, n_up, out, r, 2);
	return 0;
}

void v05__knapsack_clip_u(uint32_t k, double *adv)
{
	for (uint32_t i = 0; adv && i < k; i++)
		adv[i] = fmax(-V05_KNAPSACK_ADV_CLIP,
			      fmin(V05_KNAPSACK_ADV_CLIP, adv[i]));
}

V05_API int v05_knapsack_plan(const double *p01, uint32_t n,
			      uint32_t per_prompt, uint32_t n_up,
			      uint32_t *out)
{
	v05__clear_error();
	if (n && (!p01 || !out))
		return v05__fail(-EINVAL, "knapsack plan: NULL argument");
	if (n_up < V05_KNAPSACK_N_LOW || n_up > V05_K_LIMIT)
		return v05__fail(-EINVAL, "n_up %u is outside [%u, %u]", n_up,
				 V05_KNAPSACK_N_LOW, V05_K_LIMIT);
	if (per_prompt < V05_KNAPSACK_N_LOW || per_prompt > n_up)
		return v05__fail(-EINVAL, "per_prompt %u is outside [%u, n_up = %u]",
				 per_prompt, V05_KNAPSACK_N_LOW, n_up);
	for (uint32_t i = 0; i < n; i++)
		if (!(p01[i] >= 0.0 && p01[i] <= 1.0) && !isnan(p01[i]))
			return v05__fail(-EDOM, "p[%u] = %g is not in [0, 1] "
					 "(or NaN: no estimate)", i, p01[i]);
	if (n > UINT32_MAX / V05_K_LIMIT)
		return v05__fail(-ERANGE, "%u prompts: too many", n);
	if (v05__knapsack_plan_u(p01, n, per_prompt, n_up, out))
		return v05__fail(-ENOMEM, "knapsack plan: out of memory");
	return 0;
}

/* ---- the rows: knapsack-prior (p from the prior), knapsack (p from the
 * prompt's own history, passed as its prior; NaN: none yet) ------------ */

static int check_params(const struct v05__rule *r, const struct v05_params *p)
{
	if (p->k_init < V05_KNAPSACK_N_LOW)
		return v05__fail(-EINVAL,
				 "%s: k_init %u (the budget per prompt) is below the minimum per prompt, %u",
				 r->name, p->k_init, V05_KNAPSACK_N_LOW);
	return 0;
}

/*
 * Each prompt's one wave, planned over the whole submit from the priors:
 * p = (1 + prior) / 2; a NaN prior (mode knapsack: no estimate yet) gets
 * k_init outside the knapsack; a prior that is not valid plans as a prior
 * of 0 (its prompt is refused anyway, and its share of the budget is not
 * spent, as a refused prompt's never is).
 */
static int plan_batch(const struct v05_params *p, double *prior, uint32_t n,
		      uint32_t *k0)
{
	for (uint32_t i = 0; i < n; i++) {
		double v = prior[i];

		prior[i] = isnan(v) ? NAN :
			   isfinite(v) && v >= -1.0 && v <= 1.0 ?
			   (1.0 + v) / 2.0 : 0.5;
	}
	return v05__knapsack_plan_u(prior, n, p->k_init, p->k_max, k0);
}

/* GRPO's advantages, clipped. */
static void estimate(const struct v05__rule_env *env,
		     const struct v05_eb_fit *fit, double prior,
		     const double *r, uint32_t k, struct v05_estimate *e,
		     double *adv)
{
	v05__rule_grpo_estimate(env, fit, prior, r, k, e, adv);
	v05__knapsack_clip_u(k, adv);
}

const struct v05__rule v05__rule_knapsack_prior = {
	.name = "knapsack-prior",
	.waves = V05__WAVES_STEPS,
	/* 8 samples per prompt on average, up to 64 (the masks' width; the
	 * authors allow 128). One wave: nothing to pad. */
	.preset = { .k_init = 8, .k_step = 1, .k_max = V05_K_LIMIT },
	.check_params = check_params,
	.plan_batch = plan_batch,
	.estimate = estimate,
};

const struct v05__rule v05__rule_knapsack = {
	.name = "knapsack",
	.waves = V05__WAVES_STEPS,
	.flags = V05__RULE_NAN_PRIOR,
	/* As knapsack-prior's. */
	.preset = { .k_init = 8, .k_step = 1, .k_max = V05_K_LIMIT },
	.check_params = check_params,
	.plan_batch = plan_batch,
	.estimate = estimate,
};

/* ---- the cross-epoch estimate (include/v05/rules.h) ---------------------
 *
 * The window is a shift register of outcomes: folding in sample order puts
 * the latest sample of the latest epoch at bit 0, so the window holds the
 * V05_KNAPSACK_WINDOW most recent outcomes, later epochs first and higher
 * sample indices first, as the authors' window walks back through them.
 */

static_assert(sizeof(struct v05_knapsack_hist) == 32, "knapsack hist ABI");

V05_API int v05_knapsack_hist_fold(struct v05_knapsack_hist *h,
				   uint64_t epoch, const double *rewards,
				   uint32_t k)
{
	const uint32_t mask = (1u << V05_KNAPSACK_WINDOW) - 1;

	v05__clear_error();
	if (!h || !rewards)
		return v05__fail(-EINVAL, "knapsack history: NULL argument");
	if (k == 0 || k > V05_K_LIMIT)
		return v05__fail(-EINVAL, "knapsack history: k = %u is not in [1, %u]",
				 k, V05_K_LIMIT);
	if (h->seen && epoch < h->epoch)
		return v05__fail(-EINVAL,
				 "knapsack history: epoch %llu is before the last one folded, %llu",
				 (unsigned long long)epoch,
				 (unsigned long long)h->epoch);
	for (uint32_t i = 0; i < k; i++)
		if (!(rewards[i] >= -1.0 && rewards[i] <= 1.0))
			return v05__fail(-EDOM,
					 "knapsack history: reward %u = %g is not in [-1, 1]",
					 i, rewards[i]);
	if (!h->seen || epoch != h->epoch) {
		h->epoch = epoch;
		h->last_n = h->last_s = 0;
	}
	for (uint32_t i = 0; i < k; i++) {
		uint32_t won = v05__r32(rewards[i]) > 0.0f; /* as float32 */

		h->window = ((h->window << 1) | won) & mask;
		if (h->filled < V05_KNAPSACK_WINDOW)
			h->filled++;
		if (h->last_n < UINT32_MAX) {
			h->last_n++;
			h->last_s += won;
		}
		if (h->seen < UINT32_MAX)
			h->seen++;
	}
	return 0;
}

V05_API int v05_knapsack_hist_estimate(const struct v05_knapsack_hist *h,
				       double *p01)
{
	v05__clear_error();
	if (!h || !p01)
		return v05__fail(-EINVAL, "knapsack history: NULL argument");
	if (h->filled > V05_KNAPSACK_WINDOW || h->filled > h->seen ||
	    h->last_n > h->seen || h->last_s > h->last_n ||
	    (h->window >> h->filled) != 0)
		return v05__fail(-EINVAL, "knapsack history: counts that cannot be "
				 "(not a record this library wrote)");
	if (h->seen < V05_KNAPSACK_MIN_SEEN)
		return 0;
	if (h->last_n >= V05_KNAPSACK_WINDOW)
		*p01 = (double)h->last_s / (double)h->last_n;
	else
		*p01 = (double)__builtin_popcount(h->window) / (double)h->filled;
	return 1;
}
