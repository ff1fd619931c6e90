/* SPDX-License-Identifier: MIT */
/*
 * v05-eb: an empirical-Bayes baseline with two-stage allocation
 * (docs/STATISTICS.md, "Mode v05-eb"). Pure functions, no allocation.
 *
 * Each prompt's success probability p has the prior
 *   (1 - h) Beta(n0 q + 1, n0 (1 - q) + 1) + h Beta(1, 1),  q = (1 + V) / 2,
 * fitted per batch by maximum likelihood on a grid. Everything below is in
 * log space through lgamma: beta-binomial probabilities of 64 draws
 * underflow a double long before they matter.
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

static double loglik_u(double n0, double h, const double *prior,
		       const uint32_t *k, const double *s, uint32_t n)
{
	double ll = 0.0, l1h = log1p(-h), lh = log(h);

	for (uint32_t i = 0; i < n; i++) {
		double a, b;

		comp1(n0, prior[i], &a, &b);
		ll += logaddexp(l1h + lmarg(a, b, k[i], s[i]),
				lh + lmarg(1.0, 1.0, k[i], s[i]));
	}
	return ll;
}

/* Posterior mean and variance of p, and the hallucination weight. */
void v05__eb_posterior_u(const struct v05_eb_fit *fit, double prior,
			 uint32_t k, double s, double *mean, double *var,
			 double *w2)
{
	double a1, b1, lw1, lw2, norm, p1, p2, e1, e2, n1, n2, m, v;

	comp1(fit->n0, prior, &a1, &b1);
	lw1 = log1p(-fit->h) + lmarg(a1, b1, k, s);
	lw2 = log(fit->h) + lmarg(1.0, 1.0, k, s);
	norm = logaddexp(lw1, lw2);
	p2 = exp(lw2 - norm);
	p1 = 1.0 - p2;
	n1 = a1 + b1 + (double)k; /* a + b of the component's posterior */
	n2 = 2.0 + (double)k;
	a1 += s;
	/* Mean and second moment of each component's Beta posterior. */
	e1 = a1 / n1;
	e2 = (1.0 + s) / n2;
	m = p1 * e1 + p2 * e2;
	v = p1 * a1 * (a1 + 1.0) / (n1 * (n1 + 1.0)) +
	    p2 * (1.0 + s) * (2.0 + s) / (n2 * (n2 + 1.0)) - m * m;
	*mean = m;
	*var = v > 0.0 ? v : 0.0; /* cancellation can leave -ulp */
	*w2 = p2;
}

/*
 * E[Var(mu) after m more binary rewards], by recurrence rather than lgamma:
 * with a component's posterior Beta(A, B), its predictive of t successes in
 * m draws is P(0) = prod_{i<m} (B + i) / (A + B + i) and
 * P(t + 1) = P(t) (m - t) / (t + 1) (A + t) / (B + m - t - 1); the mixture's
 * predictive weighs them by the posterior weights w_j, and after t successes
 * component j's weight is proportional to w_j P_j(t).
 */
double v05__eb_ev_u(const struct v05_eb_fit *fit, double prior, uint32_t k,
		    double s, uint32_t m)
{
	double a1, b1, lw1, lw2, norm, w[2], A[2], B[2], P[2], ev = 0.0;
	double mean, var, w2;

	if (m == 0) {
		v05__eb_posterior_u(fit, prior, k, s, &mean, &var, &w2);
		return 4.0 * var;
	}
	comp1(fit->n0, prior, &a1, &b1);
	lw1 = log1p(-fit->h) + lmarg(a1, b1, k, s);
	lw2 = log(fit->h) + lmarg(1.0, 1.0, k, s);
	norm = logaddexp(lw1, lw2);
	w[0] = exp(lw1 - norm);
	w[1] = exp(lw2 - norm);
	A[0] = a1 + s;
	B[0] = b1 + (double)k - s;
	A[1] = 1.0 + s;
	B[1] = 1.0 + (double)k - s;
	for (int c = 0; c < 2; c++) {
		P[c] = 1.0;
		for (uint32_t i = 0; i < m; i++)
			P[c] *= (B[c] + i) / (A[c] + B[c] + i);
	}
	for (uint32_t t = 0; t <= m; t++) {
		double q[2] = { w[0] * P[0], w[1] * P[1] }, pt = q[0] + q[1];
		double e1 = 0.0, e2 = 0.0;

		if (pt > 0.0) {
			for (int c = 0; c < 2; c++) {
				double a = A[c] + t, n = A[c] + B[c] + m;

				e1 += q[c] / pt * a / n;
				e2 += q[c] / pt * a * (a + 1.0) / (n * (n + 1.0));
			}
			var = e2 - e1 * e1;
			ev += pt * 4.0 * (var > 0.0 ? var : 0.0);
		}
		for (int c = 0; c < 2 && t < m; c++)
			P[c] *= (double)(m - t) / (double)(t + 1) * (A[c] + t) /
				(B[c] + (double)(m - t) - 1.0);
	}
	return ev;
}

uint32_t v05__eb_choose_u(const struct v05_params *p,
			  const struct v05_eb_fit *fit, double prior,
			  uint32_t k, double s)
{
	double best = v05__eb_ev_u(fit, prior, k, s, 0);
	uint32_t m_best = 0;

	for (uint32_t m = p->k_step; k + m <= p->k_max; m += p->k_step) {
		double v = v05__eb_ev_u(fit, prior, k, s, m) + p->cost * (double)m;

		if (v < best) {
			best = v;
			m_best = m;
		}
	}
	return m_best;
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
				  log(fit->h) + lmarg(1.0, 1.0, n, (double)t)));
}

/*
 * Before any reward: the probability that the first wave (k_init binary
 * rewards) will be given more samples, under the prior predictive of the
 * mixture: sum over t successes of C(k, t) [(1 - h) m1(t) + h m2(t)] times
 * [v05__eb_choose_u(k, t) > 0], m the sequence probabilities.
 */
double v05__eb_p_more_u(const struct v05_params *p,
			const struct v05_eb_fit *fit, double prior)
{
	uint32_t k = p->k_init;
	double a, b, more = 0.0, lc = 0.0;

	comp1(fit->n0, prior, &a, &b);
	for (uint32_t t = 0; t <= k; t++) {
		double lp;

		if (t)
			lc += log((double)(k - t + 1) / (double)t);
		lp = logaddexp(log1p(-fit->h) + lmarg(a, b, k, (double)t),
			       log(fit->h) + lmarg(1.0, 1.0, k, (double)t));
		if (v05__eb_choose_u(p, fit, prior, k, (double)t))
			more += exp(lc + lp);
	}
	return more > 1.0 ? 1.0 : more;
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
	*ll = loglik_u(fit->n0, fit->h, prior, k, s, n);
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
	*ev = v05__eb_ev_u(fit, prior, k, s, m);
	return 0;
}
