/* SPDX-License-Identifier: MIT */
/*
 * v05-eb: an empirical-Bayes baseline with two-stage allocation
 * (docs/STATISTICS.md, "Mode v05-eb"). Pure functions, no allocation.
 *
 * Each prompt's success probability p has the prior
 *   (1 - h) Beta(n0 q + 1, n0 (1 - q) + 1) + h Beta(a2, b2),  q = (1 + V) / 2,
 * the second component the population's shape, fitted on first waves
 * (eb_state.c). Likelihoods are in log space (eb_math.h): beta-binomial
 * probabilities of 64 draws underflow a double long before they matter.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "eb_math.h"
#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/stats.h"

double v05__eb_successes(const double *r, uint32_t k)
{
	double s = 0.0;

	for (uint32_t i = 0; i < k; i++)
		s += (1.0 + r[i]) / 2.0;
	/* Rounding cannot leave [0, k] by more than an ulp; clamp it. */
	return s < 0.0 ? 0.0 : (s > (double)k ? (double)k : s);
}

V05_API double v05_eb_n0_at(uint32_t j)
{
	return v05__eb_n0_u(j);
}

V05_API double v05_eb_h_at(uint32_t j)
{
	return v05__eb_h_u(j);
}

V05_API int v05_eb_shape_at(uint32_t j, double *a, double *b)
{
	if (j >= V05_EB_SHAPES)
		return v05__fail(-ERANGE, "eb: shape %u is not in [0, %u)", j,
				 V05_EB_SHAPES);
	if (a)
		*a = v05__eb_shapes[j][0];
	if (b)
		*b = v05__eb_shapes[j][1];
	return 0;
}

static double loglik_u(const struct v05_eb_fit *fit, const double *prior,
		       const uint32_t *k, const double *s, uint32_t n)
{
	double ll = 0.0, l1h = log1p(-fit->h), lh = log(fit->h);

	for (uint32_t i = 0; i < n; i++) {
		double a, b;

		comp1(fit->n0, prior[i], &a, &b);
		ll += logaddexp(l1h + lmarg(a, b, k[i], s[i]),
				lh + lmarg(fit->a2, fit->b2, k[i], s[i]));
	}
	return ll;
}

/* One group's posterior: each component's weight w and Beta(A, B). */
struct post {
	double w[2], A[2], B[2];
};

static void post_of(const struct v05_eb_fit *fit, double prior, uint32_t k,
		    double s, struct post *q)
{
	double a1, b1, lw1, lw2, norm;

	comp1(fit->n0, prior, &a1, &b1);
	lw1 = log1p(-fit->h) + lmarg(a1, b1, k, s);
	lw2 = log(fit->h) + lmarg(fit->a2, fit->b2, k, s);
	norm = logaddexp(lw1, lw2);
	q->w[1] = exp(lw2 - norm);
	q->w[0] = 1.0 - q->w[1];
	q->A[0] = a1 + s;
	q->B[0] = b1 + (double)k - s;
	q->A[1] = fit->a2 + s;
	q->B[1] = fit->b2 + (double)k - s;
}

/* Mean and variance of p under weights w of the Betas (A, B). */
static void moments(const double *w, const double *A, const double *B,
		    double *mean, double *var)
{
	double m = 0.0, m2 = 0.0, v;

	for (int c = 0; c < 2; c++) {
		double n = A[c] + B[c];

		m += w[c] * A[c] / n;
		m2 += w[c] * A[c] * (A[c] + 1.0) / (n * (n + 1.0));
	}
	v = m2 - m * m;
	*mean = m;
	*var = v > 0.0 ? v : 0.0; /* cancellation can leave -ulp */
}

/* Posterior mean and variance of p, and the hallucination weight. */
void v05__eb_posterior_u(const struct v05_eb_fit *fit, double prior,
			 uint32_t k, double s, double *mean, double *var,
			 double *w2)
{
	struct post q;

	post_of(fit, prior, k, s, &q);
	moments(q.w, q.A, q.B, mean, var);
	*w2 = q.w[1];
}

/*
 * E[Var(mu) after m more binary rewards], by recurrence rather than lgamma:
 * with a component's posterior Beta(A, B), its predictive of t successes in
 * m draws is P(0) = prod_{i<m} (B + i) / (A + B + i) and
 * P(t + 1) = P(t) (m - t) / (t + 1) (A + t) / (B + m - t - 1); the mixture's
 * predictive weighs them by the posterior weights w_j, and after t successes
 * component j's weight is proportional to w_j P_j(t).
 */
static double ev_u(const struct post *q, uint32_t m)
{
	double P[2], ev = 0.0, mean, var;

	if (m == 0) {
		moments(q->w, q->A, q->B, &mean, &var);
		return 4.0 * var;
	}
	for (int c = 0; c < 2; c++) {
		P[c] = 1.0;
		for (uint32_t i = 0; i < m; i++)
			P[c] *= (q->B[c] + i) / (q->A[c] + q->B[c] + i);
	}
	for (uint32_t t = 0; t <= m; t++) {
		double w[2] = { q->w[0] * P[0], q->w[1] * P[1] }, pt = w[0] + w[1];

		if (pt > 0.0) {
			double A[2] = { q->A[0] + t, q->A[1] + t };
			double B[2] = { q->B[0] + (double)(m - t),
					q->B[1] + (double)(m - t) };

			w[0] /= pt;
			w[1] /= pt;
			moments(w, A, B, &mean, &var);
			ev += pt * 4.0 * var;
		}
		for (int c = 0; c < 2 && t < m; c++)
			P[c] *= (double)(m - t) / (double)(t + 1) * (q->A[c] + t) /
				(q->B[c] + (double)(m - t) - 1.0);
	}
	return ev;
}

/* ev_u from the fit: the expected posterior variance after m more, for a
 * caller without the posterior (mode v05-pg's look-ahead, rule_pg.c). */
double v05__eb_ev_u(const struct v05_eb_fit *fit, double prior, uint32_t k,
		    double s, uint32_t m)
{
	struct post q;

	post_of(fit, prior, k, s, &q);
	return ev_u(&q, m);
}

/* The m in {0, k_step, ...}, k + m <= k_max, with the least expected
 * variance plus cost (the smaller m on ties), and that value. */
static uint32_t best_m(const struct v05_params *p, const struct post *q,
		       uint32_t k, double *value)
{
	double best = ev_u(q, 0);
	uint32_t m_best = 0;

	for (uint32_t m = p->k_step; k + m <= p->k_max; m += p->k_step) {
		double v = ev_u(q, m) + p->cost * (double)m;

		if (v < best) {
			best = v;
			m_best = m;
		}
	}
	*value = best;
	return m_best;
}

uint32_t v05__eb_choose_u(const struct v05_params *p,
			  const struct v05_eb_fit *fit, double prior,
			  uint32_t k, double s)
{
	struct post q;
	double value;

	post_of(fit, prior, k, s, &q);
	return best_m(p, &q, k, &value);
}

/*
 * The prior predictive of t successes in n binary rewards before any:
 * C(n, t) [(1 - h) m1(t) + h m2(t)], m the sequence probabilities.
 */
double v05__eb_pred_u(const struct v05_eb_fit *fit, double prior, uint32_t n,
		      uint32_t t)
{
	double a, b, lc = 0.0;

	comp1(fit->n0, prior, &a, &b);
	for (uint32_t i = 1; i <= t; i++)
		lc += log((double)(n - i + 1) / (double)i);
	return exp(lc + logaddexp(log1p(-fit->h) + lmarg(a, b, n, (double)t),
				  log(fit->h) + lmarg(fit->a2, fit->b2, n,
						      (double)t)));
}

/*
 * Before any reward, a first wave of k1: its expected final risk, the sum
 * over t successes of the prior predictive C(k1, t) [(1 - h) m1(t) +
 * h m2(t)] (m the sequence probabilities) times the least expected
 * variance plus cost at (k1, t) (best_m), plus cost * k1; and in *p_more
 * the probability that it will be given more (best_m's m > 0).
 */
double v05__eb_first_risk_u(const struct v05_params *p,
			    const struct v05_eb_fit *fit, double prior,
			    uint32_t k1, double *p_more)
{
	double a, b, risk = 0.0, more = 0.0, lc = 0.0;
	double l1h = log1p(-fit->h), lh = log(fit->h);

	comp1(fit->n0, prior, &a, &b);
	for (uint32_t t = 0; t <= k1; t++) {
		struct post q;
		double pt, value;

		if (t)
			lc += log((double)(k1 - t + 1) / (double)t);
		pt = exp(lc + logaddexp(l1h + lmarg(a, b, k1, (double)t),
					lh + lmarg(fit->a2, fit->b2, k1,
						   (double)t)));
		post_of(fit, prior, k1, (double)t, &q);
		if (best_m(p, &q, k1, &value))
			more += pt;
		risk += pt * value;
	}
	*p_more = more > 1.0 ? 1.0 : more;
	return risk + p->cost * (double)k1;
}

uint32_t v05__eb_first_u(const struct v05_params *p,
			 const struct v05_eb_fit *fit, double prior,
			 uint32_t waves, double *risk, double *p_more)
{
	double best = INFINITY, pm_best = 0.0;
	uint32_t k_best = 0;

	for (uint32_t k = 1; k <= p->k_max && k < 32; k++) {
		double r, pm;

		if (!(waves >> k & 1))
			continue;
		r = v05__eb_first_risk_u(p, fit, prior, k, &pm);
		/* Strictly less: the smaller first wave on ties. */
		if (r < best) {
			best = r;
			pm_best = pm;
			k_best = k;
		}
	}
	*risk = best;
	*p_more = pm_best;
	return k_best;
}

/* Before any reward: the probability that the first wave of k_init will
 * be given more samples, under the prior predictive. */
double v05__eb_p_more_u(const struct v05_params *p,
			const struct v05_eb_fit *fit, double prior)
{
	double more;

	v05__eb_first_risk_u(p, fit, prior, p->k_init, &more);
	return more;
}

void v05__eb_estimate_u(const struct v05_params *p,
			const struct v05_eb_fit *fit, double prior,
			const double *rewards, uint32_t k,
			struct v05_estimate *e, double *adv)
{
	double s = v05__eb_successes(rewards, k), pm, var, w2, mu;

	memset(e, 0, sizeof(*e));
	e->k = k;
	e->action = V05_ACTION_STOP;
	e->mean = v05__mean_u(rewards, k);
	v05__eb_posterior_u(fit, prior, k, s, &pm, &var, &w2);
	mu = 2.0 * pm - 1.0;
	mu = mu > 1.0 ? 1.0 : (mu < -1.0 ? -1.0 : mu);
	e->baseline = mu;
	e->delta2 = 0.0;
	e->weight = 1.0 - w2;
	e->sigma = v05__sigma_of(p, mu, rewards, k);
	if (k == p->k_init) {
		uint32_t m = v05__eb_choose_u(p, fit, prior, k, s);

		if (m) {
			e->action = V05_ACTION_MORE;
			e->has_target = true;
			e->k_target = (double)(k + m);
		}
	}
	v05__advantages_u(rewards, k, mu, e->sigma, adv);
}

/* ---- checked public entry points ------------------------------------- */

static bool unit(double x)
{
	return isfinite(x) && x >= -1.0 && x <= 1.0;
}

int v05__eb_check_fit(const struct v05_eb_fit *fit)
{
	if (!fit)
		return v05__fail(-EINVAL, "eb: NULL fit");
	if (!isfinite(fit->n0) || fit->n0 < 0.0 || fit->n0 > 1e9)
		return v05__fail(-EDOM, "eb: n0 %g is not in [0, 1e9]", fit->n0);
	if (!isfinite(fit->h) || fit->h <= 0.0 || fit->h >= 1.0)
		return v05__fail(-EDOM, "eb: h %g is not in (0, 1)", fit->h);
	if (!(fit->a2 >= 0.01 && fit->a2 <= 1000.0 && fit->b2 >= 0.01 &&
	      fit->b2 <= 1000.0))
		return v05__fail(-EDOM,
				 "eb: the second component Beta(a2 %g, b2 %g) is not in [0.01, 1000] (1, 1: the uniform)",
				 fit->a2, fit->b2);
	return 0;
}

int v05__eb_check_group(double prior, uint32_t k, double s)
{
	if (!unit(prior))
		return v05__fail(-EDOM, "eb: prior %g is not finite in [-1, 1]",
				 prior);
	if (k > V05_K_LIMIT)
		return v05__fail(-ERANGE, "eb: k = %u is above %u", k, V05_K_LIMIT);
	if (!isfinite(s) || s < 0.0 || s > (double)k)
		return v05__fail(-EDOM, "eb: successes %g are not in [0, k = %u]",
				 s, k);
	return 0;
}

static int check_groups(const double *prior, const uint32_t *k,
			const double *s, uint32_t n)
{
	if (!prior || !k || !s)
		return v05__fail(-EINVAL, "eb: NULL argument");
	for (uint32_t i = 0; i < n; i++) {
		int ret = v05__eb_check_group(prior[i], k[i], s[i]);

		if (ret)
			return ret;
	}
	return 0;
}

V05_API int v05_eb_loglik(const struct v05_eb_fit *fit, const double *prior,
			  const uint32_t *k, const double *s, uint32_t n,
			  double *ll)
{
	int ret = v05__eb_check_fit(fit);

	if (!ret)
		ret = check_groups(prior, k, s, n);
	if (ret)
		return ret;
	if (!ll)
		return v05__fail(-EINVAL, "eb: NULL argument");
	*ll = loglik_u(fit, prior, k, s, n);
	return 0;
}

V05_API int v05_eb_fit(const double *prior, const uint32_t *k, const double *s,
		       uint32_t n, struct v05_eb_fit *fit)
{
	int ret;

	if (!fit)
		return v05__fail(-EINVAL, "eb: NULL fit");
	if (n == 0)
		return v05__fail(-ERANGE, "eb: a fit needs at least one group");
	ret = check_groups(prior, k, s, n);
	if (ret)
		return ret;
	v05__eb_fit_u(prior, k, s, n, fit);
	return 0;
}

V05_API int v05_eb_posterior(const struct v05_eb_fit *fit, double prior,
			     uint32_t k, double s, double *mean, double *var,
			     double *p_halluc)
{
	double pm, v, w2;
	int ret = v05__eb_check_fit(fit);

	if (!ret)
		ret = v05__eb_check_group(prior, k, s);
	if (ret)
		return ret;
	v05__eb_posterior_u(fit, prior, k, s, &pm, &v, &w2);
	if (mean)
		*mean = 2.0 * pm - 1.0;
	if (var)
		*var = 4.0 * v;
	if (p_halluc)
		*p_halluc = w2;
	return 0;
}

V05_API int v05_eb_expected_var(const struct v05_eb_fit *fit, double prior,
				uint32_t k, double s, uint32_t m, double *ev)
{
	struct post q;
	int ret = v05__eb_check_fit(fit);

	if (!ret)
		ret = v05__eb_check_group(prior, k, s);
	if (ret)
		return ret;
	if (!ev)
		return v05__fail(-EINVAL, "eb: NULL argument");
	if (k + m > V05_K_LIMIT)
		return v05__fail(-ERANGE, "eb: k + m = %u is above %u", k + m,
				 V05_K_LIMIT);
	post_of(fit, prior, k, s, &q);
	*ev = ev_u(&q, m);
	return 0;
}
