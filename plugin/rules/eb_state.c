/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's fit as an additive state: per shape of the second component,
 * the groups' log-likelihood under that shape alone (pop) and the
 * log-likelihood over the (n0, h) grid with it (ll), summed over folded
 * groups; and the fit: the shape of the largest pop, then its best grid
 * point. The barrier fit (one batch, nothing forgotten) and the
 * barrier-free schedule's running fit are the same arithmetic: the
 * per-batch fit is a fold of the batch into a zero state, in the same
 * order (of its shape's plane alone: the others are not needed), so both
 * give bit-identical points on the same groups.
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

#define NS V05_EB_SHAPES
#define NN V05_EB_N0_GRID
#define NH V05_EB_H_GRID

static_assert(sizeof(struct v05_eb_state) == 8u * NS * NN * NH + 8u * NS + 16u,
	      "eb state ABI");

/*
 * The grid and the logs of its h, computed once per process: a fold would
 * otherwise remake them (pow, log, log1p) before the log1p it needs (a fold
 * per first wave, on the engine's loop). The values are the ones
 * v05_eb_n0_at and v05_eb_h_at return, so a fold adds bit for bit what it
 * added when it computed them itself.
 */
struct grid {
	double n0[NN];
	double h[NH], lh[NH], l1h[NH];
	/* Per shape, the least log-probability it gives any group (k =
	 * V05_K_LIMIT rewards, s where the Beta function is least): with
	 * log h, a floor under every group's log-likelihood (state_check);
	 * and the most (one reward, the likelier outcome). */
	double m2min[NS], m2top[NS];
	/* The most any group's log-likelihood can be at each grid point:
	 * one reward, under a prior of +-1 that it agrees with
	 * (m1 = (n0 + 1) / (n0 + 2)), and the shape's likelier outcome:
	 * below 0 everywhere. */
	double top[NS][NN][NH];
};

static struct grid grid_values;
static pthread_once_t grid_once = PTHREAD_ONCE_INIT;

static void grid_make(void)
{
	struct grid *g = &grid_values;

	for (uint32_t j = 0; j < NN; j++)
		g->n0[j] = v05__eb_n0_u(j);
	for (uint32_t j = 0; j < NH; j++) {
		g->h[j] = v05__eb_h_u(j);
		g->lh[j] = log(g->h[j]);
		g->l1h[j] = log1p(-g->h[j]);
	}
	for (uint32_t c = 0; c < NS; c++) {
		double a = v05__eb_shapes[c][0], b = v05__eb_shapes[c][1];
		/* log B(a + s, b + K - s) is convex in s, least where
		 * a + s = b + K - s. */
		double s = ((double)V05_K_LIMIT + b - a) / 2.0;
		double top2 = (a > b ? a : b) / (a + b);

		s = s < 0.0 ? 0.0 : (s > V05_K_LIMIT ? V05_K_LIMIT : s);
		g->m2min[c] = lmarg(a, b, V05_K_LIMIT, s);
		g->m2top[c] = log(top2);
		for (uint32_t j = 0; j < NN; j++)
			for (uint32_t l = 0; l < NH; l++)
				g->top[c][j][l] =
					log((1.0 - g->h[l]) * (g->n0[j] + 1.0) /
						    (g->n0[j] + 2.0) +
					    g->h[l] * top2);
	}
}

/* pthread_once orders grid_make's stores before any caller's reads. */
static const struct grid *grid(void)
{
	pthread_once(&grid_once, grid_make);
	return &grid_values;
}

/* One group's log m2 under each shape (its p drawn from the shape). */
static void shape_lls(uint32_t k, double s, double *m2)
{
	for (uint32_t c = 0; c < NS; c++)
		m2[c] = lmarg(v05__eb_shapes[c][0], v05__eb_shapes[c][1], k, s);
}

/*
 * One row of a shape's plane (one n0, every h): the second component does
 * not depend on (n0, h), the first only on n0, so log[(1-h) m1 + h m2] =
 * log m1 + log1p(h (m2/m1 - 1)) takes one exp per row. keep multiplies the
 * old value first; keep == 1 leaves it exact, so a fold into a zero state
 * with keep 1 adds in the order a batch fit does.
 */
static void fold_row(double *ll, const struct grid *g, double keep, double m1,
		     double m2)
{
	double r = exp(m2 - m1) - 1.0;

	if (isfinite(r)) {
		for (uint32_t l = 0; l < NH; l++)
			ll[l] = keep * ll[l] + (m1 + log1p(g->h[l] * r));
	} else {
		/* m2 >> m1: stay in log space. */
		for (uint32_t l = 0; l < NH; l++)
			ll[l] = keep * ll[l] +
				logaddexp(g->l1h[l] + m1, g->lh[l] + m2);
	}
}

static void fold(struct v05_eb_state *st, const struct grid *g, double keep,
		 double prior, uint32_t k, double s)
{
	double m2[NS];

	shape_lls(k, s, m2);
	for (uint32_t c = 0; c < NS; c++)
		st->pop[c] = keep * st->pop[c] + m2[c];
	for (uint32_t j = 0; j < NN; j++) {
		double a, b, m1;

		comp1(g->n0[j], prior, &a, &b);
		m1 = lmarg(a, b, k, s);
		for (uint32_t c = 0; c < NS; c++)
			fold_row(st->ll[c][j], g, keep, m1, m2[c]);
	}
	st->weight = keep * st->weight + 1.0;
	st->folded++;
}

void v05__eb_fold_u(struct v05_eb_state *st, double keep, double prior,
		    uint32_t k, double s)
{
	fold(st, grid(), keep, prior, k, s);
}

/* The shape of the largest population log-likelihood (the first on ties,
 * so a fit is reproducible and a state that favours none keeps shape 0). */
static uint32_t best_shape(const double *a, const double *b)
{
	double best = -INFINITY;
	uint32_t bc = 0;

	for (uint32_t c = 0; c < NS; c++) {
		double v = a[c] + (b ? b[c] : 0.0);

		if (v > best) {
			best = v;
			bc = c;
		}
	}
	return bc;
}

/* The best point of shape c's plane (a's, plus b's if not NULL; each
 * NN rows of NH). */
static void best_point(const double *a, const double *b, uint32_t c,
		       struct v05_eb_fit *fit)
{
	const struct grid *g = grid();
	double best = -INFINITY;
	uint32_t bj = 0, bl = 0;

	for (uint32_t j = 0; j < NN; j++) {
		for (uint32_t l = 0; l < NH; l++) {
			double v = a[j * NH + l] + (b ? b[j * NH + l] : 0.0);

			/* Strictly greater: the first grid point wins ties,
			 * so a fit is reproducible. */
			if (v > best) {
				best = v;
				bj = j;
				bl = l;
			}
		}
	}
	fit->n0 = g->n0[bj];
	fit->h = g->h[bl];
	fit->a2 = v05__eb_shapes[c][0];
	fit->b2 = v05__eb_shapes[c][1];
}

uint32_t v05__eb_argmax_u(const struct v05_eb_state *a,
			  const struct v05_eb_state *b, struct v05_eb_fit *fit)
{
	uint32_t c = best_shape(a->pop, b ? b->pop : NULL);

	best_point(&a->ll[c][0][0], b ? &b->ll[c][0][0] : NULL, c, fit);
	return c;
}

/* A batch's fit: its groups folded into a zero state with keep 1 (the
 * same fold_row, in the same order), of the chosen shape's plane only. */
uint32_t v05__eb_fit_u(const double *prior, const uint32_t *k,
		       const double *s, uint32_t n, struct v05_eb_fit *fit)
{
	const struct grid *g = grid();
	double pop[NS], m2[NS], ll[NN][NH];
	uint32_t c;

	memset(pop, 0, sizeof(pop));
	memset(ll, 0, sizeof(ll));
	for (uint32_t i = 0; i < n; i++) {
		shape_lls(k[i], s[i], m2);
		for (uint32_t j = 0; j < NS; j++)
			pop[j] = 1.0 * pop[j] + m2[j];
	}
	c = best_shape(pop, NULL);
	for (uint32_t i = 0; i < n; i++) {
		double m2c = lmarg(v05__eb_shapes[c][0], v05__eb_shapes[c][1],
				   k[i], s[i]);

		for (uint32_t j = 0; j < NN; j++) {
			double a, b;

			comp1(g->n0[j], prior[i], &a, &b);
			fold_row(ll[j], g, 1.0, lmarg(a, b, k[i], s[i]), m2c);
		}
	}
	best_point(&ll[0][0], NULL, c, fit);
	return c;
}

/* ---- checked public entry points ------------------------------------- */

/*
 * A state this library could have made. Each folded group adds, at every
 * grid point of shape c, log[(1-h) m1 + h m2] (m1, m2 its probability under
 * the two components), and to pop[c] log m2, each weighed by keep^age,
 * and the weight adds keep^age; so:
 *  - every value finite, the weight finite in [0, folded];
 *  - every value <= weight x the most one group can add there (a log of
 *    a probability, below 0: at most one reward), so 0 exactly where the
 *    weight is 0 and far below 0 where it is large: a count claimed must
 *    come with log-likelihoods of its size;
 *  - every value >= weight x (log h + the least log m2 of any group)
 *    ((1-h) m1 + h m2 >= h m2), pop[c] >= weight x that least log m2;
 *  - ll >= weight x log h + pop[c] at every point of plane c (the same
 *    inequality, group by group): a shape's pop cannot be raised above
 *    what its plane says of it;
 *  - each row (one shape, one n0) concave in h: a sum of logs of functions
 *    linear in h, weighed by positive numbers.
 * A NaN or infinite value would make every fit the grid's first point (no
 * comparison with NaN is true); a finite but impossible one (a positive
 * log-likelihood, a row pulled towards one h, a shape's pop pushed up)
 * moves every engine's fit to where the sender wants: none gets in. The
 * tolerances are far above the rounding of 10^7 folds, far below anything
 * a forged value moves.
 */
static bool above(double v, double hi)
{
	return v > hi - 1e-9 * hi + 1e-12;
}

static bool below(double v, double lo)
{
	return v < lo + 1e-9 * lo - 1e-12;
}

static int pop_check(const struct v05_eb_state *st, const struct grid *g,
		     const char *what)
{
	for (uint32_t c = 0; c < NS; c++) {
		double v = st->pop[c], lo = st->weight * g->m2min[c];
		double hi = st->weight * g->m2top[c];

		if (above(v, hi))
			return v05__fail(-EDOM,
					 "%s: population log-likelihood [%u] is %g, above %g, the most groups of weight %g can give under Beta(%g, %g): a count without the groups",
					 what, c, v, hi, st->weight,
					 v05__eb_shapes[c][0], v05__eb_shapes[c][1]);
		if (below(v, lo))
			return v05__fail(-EDOM,
					 "%s: population log-likelihood [%u] is %g, below %g, the least groups of weight %g can give under Beta(%g, %g)",
					 what, c, v, lo, st->weight,
					 v05__eb_shapes[c][0], v05__eb_shapes[c][1]);
	}
	return 0;
}

static int value_check(const struct v05_eb_state *st, const struct grid *g,
		       const char *what)
{
	for (uint32_t c = 0; c < NS; c++) {
		for (uint32_t j = 0; j < NN; j++) {
			for (uint32_t l = 0; l < NH; l++) {
				double v = st->ll[c][j][l];
				double lo = st->weight * (g->lh[l] + g->m2min[c]);
				double hi = st->weight * g->top[c][j][l];
				double floor = st->weight * g->lh[l] + st->pop[c];

				if (v > 0.0)
					return v05__fail(-EDOM,
							 "%s: log-likelihood [%u][%u][%u] is %g > 0; a group's log-likelihood is the log of a probability, <= 0",
							 what, c, j, l, v);
				if (above(v, hi))
					return v05__fail(-EDOM,
							 "%s: log-likelihood [%u][%u][%u] is %g, above %g, the most groups of weight %g can give there: a count without the groups",
							 what, c, j, l, v, hi, st->weight);
				if (below(v, lo))
					return v05__fail(-EDOM,
							 "%s: log-likelihood [%u][%u][%u] is %g, below %g, the least groups of weight %g can give at h = %g",
							 what, c, j, l, v, lo, st->weight, g->h[l]);
				if (below(v, floor))
					return v05__fail(-EDOM,
							 "%s: log-likelihood [%u][%u][%u] is %g, below weight x log h + the population's %g under shape %u: that population log-likelihood is more than its groups give",
							 what, c, j, l, v, floor, c);
			}
		}
	}
	return 0;
}

static int row_check(const struct v05_eb_state *st, const struct grid *g,
		     const char *what)
{
	for (uint32_t c = 0; c < NS; c++) {
		for (uint32_t j = 0; j < NN; j++) {
			const double *y = st->ll[c][j];

			for (uint32_t l = 1; l + 1 < NH; l++) {
				double h1 = g->h[l - 1], h2 = g->h[l], h3 = g->h[l + 1];
				double chord = ((h3 - h2) * y[l - 1] +
						(h2 - h1) * y[l + 1]) / (h3 - h1);
				double tol = 1e-8 * (fabs(y[l - 1]) + fabs(y[l]) +
						     fabs(y[l + 1]));

				if (y[l] < chord - tol)
					return v05__fail(-EDOM,
							 "%s: the log-likelihood over h at shape %u, n0 = %g is not concave at h = %g (%g, %g below the chord of its neighbours); no set of groups gives such a row",
							 what, c, g->n0[j], h2, y[l],
							 chord - y[l]);
			}
		}
	}
	return 0;
}

/* 0, or -EDOM naming the first value that is not a finite number. */
static int finite_check(const struct v05_eb_state *st, const char *what)
{
	for (uint32_t c = 0; c < NS; c++) {
		if (!isfinite(st->pop[c]))
			return v05__fail(-EDOM,
					 "%s: population log-likelihood [%u] is %g, not a finite number",
					 what, c, st->pop[c]);
		for (uint32_t j = 0; j < NN; j++)
			for (uint32_t l = 0; l < NH; l++)
				if (!isfinite(st->ll[c][j][l]))
					return v05__fail(-EDOM,
							 "%s: log-likelihood [%u][%u][%u] is %g, not a finite number",
							 what, c, j, l, st->ll[c][j][l]);
	}
	return 0;
}

int v05__eb_state_check(const struct v05_eb_state *st, const char *what)
{
	const struct grid *g = grid();
	int ret;

	ret = finite_check(st, what);
	if (ret)
		return ret;
	if (!(isfinite(st->weight) && st->weight >= 0.0 &&
	      st->weight <= (double)st->folded))
		return v05__fail(-EDOM,
				 "%s: weight %g is not a finite number in [0, folded = %llu]",
				 what, st->weight, (unsigned long long)st->folded);
	ret = pop_check(st, g, what);
	if (!ret)
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
	for (uint32_t c = 0; c < NS; c++) {
		for (uint32_t j = 0; j < NN; j++)
			for (uint32_t l = 0; l < NH; l++)
				dst->ll[c][j][l] += src->ll[c][j][l];
		dst->pop[c] += src->pop[c];
	}
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
