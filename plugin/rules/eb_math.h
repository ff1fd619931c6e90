/* SPDX-License-Identifier: MIT */
/*
 * v05-eb's likelihood arithmetic and its grid, shared by the fit (eb.c),
 * the additive fit state (eb_state.c) and the posterior, so neither file
 * calls the other for them. In log space through lgamma:
 * beta-binomial probabilities of 64 draws underflow a double long before
 * they matter.
 */
#ifndef V05_PLUGIN_EB_MATH_H
#define V05_PLUGIN_EB_MATH_H

#include <math.h>
#include <stdint.h>

#include "v05/stats.h"

/* The grid's points: n0 = 10^(3 j / (V05_EB_N0_GRID - 1)), 1 to 1000; h
 * log-spaced from V05_EB_H_MIN to V05_EB_H_MAX (v05_eb_n0_at, v05_eb_h_at;
 * the fit state tabulates them once). */
static inline double v05__eb_n0_u(uint32_t j)
{
	return pow(10.0, 3.0 * (double)j / (double)(V05_EB_N0_GRID - 1));
}

static inline double v05__eb_h_u(uint32_t j)
{
	return V05_EB_H_MIN * pow(V05_EB_H_MAX / V05_EB_H_MIN,
				  (double)j / (double)(V05_EB_H_GRID - 1));
}

/* The second component's shapes, Beta(a, b) (v05_eb_shape_at): shape 0
 * the uniform (the first on ties: a population that favours no shape
 * keeps it); U-shaped (piled at 0 and 1), skewed each way, humped. */
static const double v05__eb_shapes[V05_EB_SHAPES][2] = {
	{ 1.0, 1.0 },	{ 0.3, 0.3 },	{ 0.5, 0.5 },	{ 0.2, 0.6 },
	{ 0.6, 0.2 },	{ 0.3, 1.2 },	{ 1.2, 0.3 },	{ 0.5, 2.0 },
	{ 2.0, 0.5 },	{ 2.0, 2.0 },	{ 0.15, 1.35 }, { 1.35, 0.15 },
};

/* log B(a, b) */
static inline double lbeta(double a, double b)
{
	return lgamma(a) + lgamma(b) - lgamma(a + b);
}

/* log(e^x + e^y) without overflow or a needless underflow. */
static inline double logaddexp(double x, double y)
{
	double m = x > y ? x : y;

	if (m == -INFINITY)
		return -INFINITY;
	return m + log1p(exp(-fabs(x - y)));
}

/* The first component's Beta parameters for a prior V and concentration
 * n0. V is clamped to [-1, 1] by the callers' checks, so a, b >= 1. */
static inline void comp1(double n0, double prior, double *a, double *b)
{
	double q = (1.0 + prior) / 2.0;

	*a = n0 * q + 1.0;
	*b = n0 * (1.0 - q) + 1.0;
}

/* log of the sequence probability of s successes in k under Beta(a, b):
 * B(a + s, b + k - s) / B(a, b). For a whole s (binary rewards) it is the
 * product prod_{i<s} (a + i) prod_{j<k-s} (b + j) / prod_{l<k} (a + b + l),
 * one log instead of six lgamma; a fractional s goes through lgamma. */
static inline double lmarg(double a, double b, uint32_t k, double s)
{
	if (s == floor(s)) {
		uint32_t si = (uint32_t)s;
		double num = 1.0, den = 1.0;

		for (uint32_t i = 0; i < si; i++)
			num *= a + (double)i;
		for (uint32_t j = 0; j < k - si; j++)
			num *= b + (double)j;
		for (uint32_t l = 0; l < k; l++)
			den *= a + b + (double)l;
		/* Factors >= 0.15 (the least shape parameter) and < 1e9 +
		 * 64: 64 of them cannot underflow, and overflow only for a
		 * huge n0; then lgamma. */
		if (isfinite(num) && isfinite(den))
			return log(num / den);
	}
	return lbeta(a + s, b + (double)k - s) - lbeta(a, b);
}

#endif /* V05_PLUGIN_EB_MATH_H */
