/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's fit as an additive state: the log-likelihood over the (n0, h)
 * grid summed over folded groups, and its best grid point. The barrier
 * fit (one batch, nothing forgotten) and the barrier-free schedule's
 * running fit are the same arithmetic: the per-batch fit is a fold of the
 * batch into a zero state, in the same order, so both give bit-identical
 * points on the same groups.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "eb_math.h"
#include "stats_core.h"
#include "../../shm/error.h"
#include "v05/stats.h"

static_assert(sizeof(struct v05_eb_state) ==
		      8u * V05_EB_N0_GRID * V05_EB_H_GRID + 16u,
	      "eb state ABI");

/*
 * The grid and the logs of its h, computed once per process: a fold ran
 * 31 pow and 72 more pow, log and log1p calls to remake them before the
 * 744 log1p it needs (a fold per first wave, on the engine's loop). The
 * values are the ones v05_eb_n0_at and v05_eb_h_at return, so a fold adds
 * bit for bit what it added when it computed them itself.
 */
struct grid {
	double n0[V05_EB_N0_GRID];
	double h[V05_EB_H_GRID], lh[V05_EB_H_GRID], l1h[V05_EB_H_GRID];
	/* The least log-probability the uniform component gives any group
	 * (k = V05_K_LIMIT rewards, half of them successes): with log h, a
	 * floor under every group's log-likelihood (state_check). */
	double m2min;
	/* The most any group's log-likelihood can be at each grid point: one
	 * reward, a success, under a prior of 1 (m1 = (n0 + 1) / (n0 + 2))
	 * and the uniform component's 1/2: below 0 everywhere. */
	double top[V05_EB_N0_GRID][V05_EB_H_GRID];
};

static struct grid grid_values;
static pthread_once_t grid_once = PTHREAD_ONCE_INIT;

static void grid_make(void)
{
	struct grid *g = &grid_values;

	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
		g->n0[j] = v05__eb_n0_u(j);
	for (uint32_t j = 0; j < V05_EB_H_GRID; j++) {
		g->h[j] = v05__eb_h_u(j);
		g->lh[j] = log(g->h[j]);
		g->l1h[j] = log1p(-g->h[j]);
	}
	g->m2min = lmarg(1.0, 1.0, V05_K_LIMIT, V05_K_LIMIT / 2.0);
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			g->top[j][l] = log((1.0 - g->h[l]) * (g->n0[j] + 1.0) /
					   (g->n0[j] + 2.0) + g->h[l] / 2.0);
}

/* pthread_once orders grid_make's stores before any caller's reads. */
static const struct grid *grid(void)
{
	pthread_once(&grid_once, grid_make);
	return &grid_values;
}

/*
 * Component 2 does not depend on (n0, h), component 1 only on n0: one pair
 * of marginals per n0, reused for every h as
 * log[(1-h) m1 + h m2] = log m1 + log1p(h (m2/m1 - 1)).
 * keep multiplies the old value first; keep == 1 leaves it exact, so a
 * fold into a zero state with keep 1 adds in the order a batch fit does.
 */
static void fold(struct v05_eb_state *st, const struct grid *g, double keep,
		 double prior, uint32_t k, double s)
{
	double m2 = lmarg(1.0, 1.0, k, s);

	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		double a, b, m1, r;
		double *ll = st->ll[j];

		comp1(g->n0[j], prior, &a, &b);
		m1 = lmarg(a, b, k, s);
		r = exp(m2 - m1) - 1.0;
		if (isfinite(r)) {
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
				ll[l] = keep * ll[l] + (m1 + log1p(g->h[l] * r));
		} else {
			/* m2 >> m1: stay in log space. */
			for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
				ll[l] = keep * ll[l] +
					logaddexp(g->l1h[l] + m1, g->lh[l] + m2);
		}
	}
	st->weight = keep * st->weight + 1.0;
	st->folded++;
}

void v05__eb_fold_u(struct v05_eb_state *st, double keep, double prior,
		    uint32_t k, double s)
{
	fold(st, grid(), keep, prior, k, s);
}

void v05__eb_argmax_u(const struct v05_eb_state *a,
		      const struct v05_eb_state *b, struct v05_eb_fit *fit)
{
	double best = -INFINITY;
	uint32_t bj = 0, bl = 0;

	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++) {
			double v = a->ll[j][l] + (b ? b->ll[j][l] : 0.0);

			/* Strictly greater: the first grid point wins ties,
			 * so a fit is reproducible. */
			if (v > best) {
				best = v;
				bj = j;
				bl = l;
			}
		}
	}
	fit->n0 = grid()->n0[bj];
	fit->h = grid()->h[bl];
}

void v05__eb_fit_u(const double *prior, const uint32_t *k, const double *s,
		   uint32_t n, struct v05_eb_fit *fit)
{
	const struct grid *g = grid();
	struct v05_eb_state st;

	memset(&st, 0, sizeof(st));
	for (uint32_t i = 0; i < n; i++)
		fold(&st, g, 1.0, prior[i], k[i], s[i]);
	v05__eb_argmax_u(&st, NULL, fit);
}

/* ---- checked public entry points ------------------------------------- */

/*
 * A state this library could have made. Each folded group adds, at every
 * grid point, log[(1-h) m1 + h m2] (m1, m2 its probability under the two
 * components), weighed by keep^age, and the weight adds keep^age; so:
 *  - every value finite, the weight finite in [0, folded];
 *  - every value <= weight x the most one group can add there (a log of
 *    a probability, below 0: at most one reward, a success, under a
 *    prior of 1), so 0 exactly where the weight is 0 and far below 0
 *    where it is large: a count claimed must come with log-likelihoods
 *    of its size;
 *  - every value >= weight x (log h + the least log m2 of any group):
 *    (1-h) m1 + h m2 >= h m2;
 *  - each row (one n0) concave in h: a sum of logs of functions linear in
 *    h, weighed by positive numbers.
 * A NaN or infinite value would make every fit the grid's first point (no
 * comparison with NaN is true); a finite but impossible one (a positive
 * log-likelihood, a row pulled towards one h) moves every engine's fit to
 * where the sender wants: none gets in. The tolerances are far above the
 * rounding of 10^7 folds, far below anything a forged value moves.
 */
static int value_check(const struct v05_eb_state *st, const struct grid *g,
		       const char *what)
{
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++) {
			double v = st->ll[j][l], lo = st->weight * (g->lh[l] + g->m2min);
			double hi = st->weight * g->top[j][l];

			if (v > 0.0)
				return v05__fail(-EDOM,
						 "%s: log-likelihood [%u][%u] is %g > 0; a group's log-likelihood is the log of a probability, <= 0",
						 what, j, l, v);
			if (v > hi - 1e-9 * hi + 1e-12)
				return v05__fail(-EDOM,
						 "%s: log-likelihood [%u][%u] is %g, above %g, the most groups of weight %g can give there: a count without the groups",
						 what, j, l, v, hi, st->weight);
			if (v < lo + 1e-9 * lo - 1e-12)
				return v05__fail(-EDOM,
						 "%s: log-likelihood [%u][%u] is %g, below %g, the least groups of weight %g can give at h = %g",
						 what, j, l, v, lo, st->weight, g->h[l]);
		}
	}
	return 0;
}

static int row_check(const struct v05_eb_state *st, const struct grid *g,
		     const char *what)
{
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++) {
		const double *y = st->ll[j];

		for (uint32_t l = 1; l + 1 < V05_EB_H_GRID; l++) {
			double h1 = g->h[l - 1], h2 = g->h[l], h3 = g->h[l + 1];
			double chord = ((h3 - h2) * y[l - 1] + (h2 - h1) * y[l + 1]) /
				       (h3 - h1);
			double tol = 1e-8 * (fabs(y[l - 1]) + fabs(y[l]) + fabs(y[l + 1]));

			if (y[l] < chord - tol)
				return v05__fail(-EDOM,
						 "%s: the log-likelihood over h at n0 = %g is not concave at h = %g (%g, %g below the chord of its neighbours); no set of groups gives such a row",
						 what, g->n0[j], h2, y[l], chord - y[l]);
		}
	}
	return 0;
}

int v05__eb_state_check(const struct v05_eb_state *st, const char *what)
{
	const struct grid *g = grid();
	int ret;

	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			if (!isfinite(st->ll[j][l]))
				return v05__fail(-EDOM,
						 "%s: log-likelihood [%u][%u] is %g, not a finite number",
						 what, j, l, st->ll[j][l]);
	if (!(isfinite(st->weight) && st->weight >= 0.0 &&
	      st->weight <= (double)st->folded))
		return v05__fail(-EDOM,
				 "%s: weight %g is not a finite number in [0, folded = %llu]",
				 what, st->weight, (unsigned long long)st->folded);
	ret = value_check(st, g, what);
	if (!ret)
		ret = row_check(st, g, what);
	return ret;
}

V05_API void v05_eb_state_init(struct v05_eb_state *st)
{
	if (st)
		memset(st, 0, sizeof(*st));
}

V05_API int v05_eb_state_fold(struct v05_eb_state *st, double keep,
			      double prior, uint32_t k, double s)
{
	int ret;

	v05__clear_error();
	if (!st)
		return v05__fail(-EINVAL, "eb_state_fold: NULL state");
	ret = v05__eb_state_check(st, "eb_state_fold");
	if (ret)
		return ret;
	if (!(keep >= 0.0 && keep <= 1.0))
		return v05__fail(-EDOM, "eb_state_fold: keep %g is not in [0, 1]",
				 keep);
	if (!(isfinite(prior) && prior >= -1.0 && prior <= 1.0))
		return v05__fail(-EDOM, "eb: prior %g is not finite in [-1, 1]",
				 prior);
	if (k < 1 || k > V05_K_LIMIT)
		return v05__fail(-ERANGE, "eb: k = %u is not in [1, %u]", k,
				 V05_K_LIMIT);
	if (!(isfinite(s) && s >= 0.0 && s <= (double)k))
		return v05__fail(-EDOM, "eb: successes %g are not in [0, k = %u]",
				 s, k);
	v05__eb_fold_u(st, keep, prior, k, s);
	return 0;
}

V05_API int v05_eb_state_add(struct v05_eb_state *dst,
			     const struct v05_eb_state *src)
{
	int ret;

	v05__clear_error();
	if (!dst || !src)
		return v05__fail(-EINVAL, "eb_state_add: NULL state");
	ret = v05__eb_state_check(dst, "eb_state_add (dst)");
	if (!ret)
		ret = v05__eb_state_check(src, "eb_state_add (src)");
	if (ret)
		return ret;
	if (src->folded > UINT64_MAX - dst->folded)
		return v05__fail(-EOVERFLOW, "eb_state_add: %llu + %llu groups overflow the count",
				 (unsigned long long)dst->folded,
				 (unsigned long long)src->folded);
	for (uint32_t j = 0; j < V05_EB_N0_GRID; j++)
		for (uint32_t l = 0; l < V05_EB_H_GRID; l++)
			dst->ll[j][l] += src->ll[j][l];
	dst->weight += src->weight;
	dst->folded += src->folded;
	return 0;
}

V05_API int v05_eb_state_fit(const struct v05_eb_state *st,
			     struct v05_eb_fit *fit)
{
	int ret;

	v05__clear_error();
	if (!st || !fit)
		return v05__fail(-EINVAL, "eb_state_fit: NULL argument");
	ret = v05__eb_state_check(st, "eb_state_fit");
	if (ret)
		return ret;
	if (!(st->weight > 0.0))
		return v05__fail(-EAGAIN, "eb_state_fit: the state holds no group");
	v05__eb_argmax_u(st, NULL, fit);
	return 0;
}
