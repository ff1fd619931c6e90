/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the numeric calls over edge values (issue 37):
 * Knapsack RL's allocation (v05_knapsack_plan), every mode's v05_estimate
 * and v05_keep, v05-eb's estimate under a grid fit, and the rules' folds
 * (v05_knapsack_hist_fold, v05_greso_fold), on values that are mostly the
 * edges of their range (0, 1, -1 and one ulp either side, subnormals, 1 -
 * p rounding to 1, NaN, infinities), else raw bytes. Under UBSan (the
 * fuzz build, and the replay in the ASan/UBSan build with
 * float-cast-overflow on) no call may do anything undefined; and:
 *   - each call returns 0 or -EINVAL / -EDOM / -ERANGE, and -EDOM exactly
 *     when a value is not finite in its range (NaN is a knapsack "no
 *     estimate", not an error);
 *   - an allocation is within [V05_KNAPSACK_N_LOW, n_up], a NaN prompt
 *     gets per_prompt or more, and the budget is spent unless every prompt
 *     is at n_up;
 *   - an estimate's numbers are finite, its advantages too, and |A| is
 *     within its mode's bound;
 *   - the keep mask has bits below k only, keep_n of them for
 *     reinforce-ada (k of them otherwise).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "v05.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_edges: invariant broken: %s\n", what);
		abort();
	}
}

struct in {
	const uint8_t *d;
	size_t n, at;
};

static uint8_t byte(struct in *in)
{
	return in->at < in->n ? in->d[in->at++] : 0;
}

/* A value: one of the edges (selector below 40), else 8 raw bytes. */
static double value(struct in *in)
{
	static const double edge[] = {
		0.0, -0.0, 1.0, -1.0, 0.5, -0.5,
		0x1p-1074, -0x1p-1074, DBL_MIN, -DBL_MIN, 0x1p-54, 0x1p-53,
		1e-17, -1e-17, 1.0 - 0x1p-53, -1.0 + 0x1p-53, 1.0 + 0x1p-52,
		-1.0 - 0x1p-52, 0.5 - 0x1p-54, 0.5 + 0x1p-53, 0.4,
		(double)0.4f, 0.96, (double)0.96f, -0.78, (double)-0.78f,
		1e-300, 1.0 - 1e-16, NAN, -NAN, INFINITY, -INFINITY, DBL_MAX,
		-DBL_MAX, 2.0, 0.1, 0.9, 0.25, 1e-9, 1.0 - 1e-9,
	};
	uint8_t sel = byte(in);
	double v;

	if (sel < sizeof(edge) / sizeof(edge[0]))
		return edge[sel];
	if (in->at + 8 > in->n)
		return (double)sel / 255.0;
	memcpy(&v, in->d + in->at, 8);
	in->at += 8;
	return v;
}

static int unit(double x)
{
	return x >= -1.0 && x <= 1.0; /* false for NaN */
}

static void plan(struct in *in)
{
	double p[16];
	uint32_t out[16], n = 1 + byte(in) % 16, per = byte(in) % 70,
			  up = byte(in) % 70, sum = 0, all_up = 1;
	int bad = 0, ret;

	for (uint32_t i = 0; i < n; i++) {
		p[i] = value(in);
		bad |= !(p[i] >= 0.0 && p[i] <= 1.0) && !isnan(p[i]);
	}
	ret = v05_knapsack_plan(p, n, per, up, out);
	if (up < V05_KNAPSACK_N_LOW || up > V05_K_LIMIT ||
	    per < V05_KNAPSACK_N_LOW || per > up) {
		check(ret == -EINVAL, "plan: bad budget accepted");
		return;
	}
	check(ret == (bad ? -EDOM : 0), "plan: -EDOM iff a p outside [0, 1]");
	if (ret)
		return;
	for (uint32_t i = 0; i < n; i++) {
		check(out[i] >= V05_KNAPSACK_N_LOW && out[i] <= up, "plan: bounds");
		check(!isnan(p[i]) || out[i] >= per, "plan: no estimate, per_prompt");
		sum += out[i];
		all_up &= out[i] == up;
	}
	check(sum == n * per || all_up, "plan: budget spent");
}

static void estimate(struct in *in)
{
	struct v05_config c;
	struct v05_estimate e;
	struct v05_eb_fit fit;
	double r[V05_K_LIMIT], adv[V05_K_LIMIT], prior;
	uint32_t mode = byte(in) % V05_MODE_COUNT, k;
	uint64_t keep;
	int bad = 0, ret;

	v05_config_default(&c);
	check(v05_config_mode(&c, mode) == 0, "config_mode");
	c.params.sigma = byte(in) & 1;
	prior = value(in);
	k = 1 + byte(in) % c.params.k_max;
	for (uint32_t i = 0; i < k; i++) {
		r[i] = value(in);
		bad |= !unit(r[i]);
	}
	if (mode == V05_MODE_V05_EB) {
		fit.n0 = v05_eb_n0_at(byte(in) % V05_EB_N0_GRID);
		fit.h = v05_eb_h_at(byte(in) % V05_EB_H_GRID);
		check(v05_eb_shape_at(byte(in) % V05_EB_SHAPES, &fit.a2,
				      &fit.b2) == 0, "shape_at");
		ret = v05_eb_estimate(&c.params, &fit, prior, r, k, &e, adv);
	} else {
		ret = v05_estimate(&c.params, prior, r, k, &e, adv);
	}
	check(ret == ((bad || !unit(prior)) ? -EDOM : 0),
	      "estimate: -EDOM iff a reward or the prior is not in [-1, 1]");
	if (ret == 0) {
		/* GRPO's std + 1e-6 can be 1e-6; the knapsack modes clip
		 * at 5; Reinforce-Ada's sigma is 1; the fused modes'
		 * normaliser bounds |A| by sqrt(k) <= 8 (rms) or 200. */
		double bound = mode == V05_MODE_GRPO || mode == V05_MODE_DAPO ||
			       mode == V05_MODE_GRESO ? 2.0 / V05_GRPO_EPSILON :
			       mode == V05_MODE_KNAPSACK ||
			       mode == V05_MODE_KNAPSACK_PRIOR ? V05_KNAPSACK_ADV_CLIP :
			       mode == V05_MODE_ADA || mode == V05_MODE_ADA_POS ? 2.0 :
			       c.params.sigma == V05_SIGMA_PAPER ? 200.0 : 8.0;

		check(isfinite(e.mean) && isfinite(e.baseline) &&
		      isfinite(e.sigma) && isfinite(e.weight) &&
		      isfinite(e.delta2), "estimate: finite");
		check(!e.has_target || isfinite(e.k_target), "estimate: target");
		check(e.k == k && e.action <= V05_ACTION_DROP, "estimate: k, action");
		for (uint32_t i = 0; i < k; i++)
			check(isfinite(adv[i]) && fabs(adv[i]) <= bound,
			      "estimate: advantage bound");
	}
	if (mode == V05_MODE_V05_EB)
		return;
	ret = v05_keep(&c.params, r, k, &keep);
	check(ret == (bad ? -EDOM : 0), "keep: -EDOM iff a reward is bad");
	if (ret == 0) {
		uint32_t want = mode == V05_MODE_ADA || mode == V05_MODE_ADA_POS ?
				(c.params.k_init / 2 < k ? c.params.k_init / 2 : k) : k;

		check((k == 64 || keep >> k == 0) &&
		      (uint32_t)__builtin_popcountll(keep) == want, "keep: mask");
	}
}

static void folds(struct in *in)
{
	struct v05_knapsack_hist h;
	struct v05_greso g;
	struct v05_greso_prompt x = { 0, 0 };
	double r[8], p01;
	int bad = 0, ret;

	memset(&h, 0, sizeof(h));
	v05_greso_init(&g, 1);
	for (uint32_t i = 0; i < 8; i++) {
		r[i] = value(in);
		bad |= !unit(r[i]);
	}
	check(v05_knapsack_hist_fold(&h, 1, r, 8) == (bad ? -EDOM : 0),
	      "hist fold: -EDOM iff a reward is bad");
	ret = v05_knapsack_hist_estimate(&h, &p01);
	check(ret == (bad ? 0 : 1), "hist estimate");
	check(!ret || (p01 >= 0.0 && p01 <= 1.0), "hist estimate: in [0, 1]");
	ret = v05_greso_fold(&g, &x, r, 8);
	check(bad ? ret == -EDOM : ret >= V05_GRESO_MIXED && ret <= V05_GRESO_HARD,
	      "greso fold");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size, 0 };

	plan(&in);
	estimate(&in);
	folds(&in);
	return 0;
}
