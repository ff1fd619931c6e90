/* SPDX-License-Identifier: MIT */
/* v05ctl sim's advantage tallies: |A| of every final sample, this mode's
 * and verl's GRPO on the same groups, and their quantiles. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "num.h"
#include "v05-internal/shm.h"
#include "v05-internal/splitmix.h"
#include "v05-internal/vocab.h"
#include "v05.h"
#include "v05ctl.h"
#include "sim.h"

static int adv_add(struct adv_acc *a, double x)
{
	if (a->n == a->cap) {
		uint64_t cap = a->cap ? 2 * a->cap : 4096;
		double *n = realloc(a->abs, cap * sizeof(*n));

		if (!n)
			return -1;
		a->abs = n;
		a->cap = cap;
	}
	a->abs[a->n++] = fabs(x);
	a->sq += x * x;
	return 0;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* Nearest-rank quantile of the sorted |A|. */
static double quantile(const struct adv_acc *a, double q)
{
	uint64_t r = (uint64_t)ceil(q * (double)a->n);

	return a->n ? a->abs[r ? r - 1 : 0] : 0.0;
}

void sim_adv_print(const char *name, struct adv_acc *a)
{
	qsort(a->abs, a->n, sizeof(double), cmp_double);
	printf(", \"%s\": {\"p99\": ", name);
	json_num(stdout, quantile(a, 0.99));
	printf(", \"p999\": ");
	json_num(stdout, quantile(a, 0.999));
	printf(", \"max\": ");
	json_num(stdout, a->n ? a->abs[a->n - 1] : 0.0);
	printf(", \"mean_sq\": ");
	json_num(stdout, a->n ? a->sq / (double)a->n : 0.0);
	printf("}");
}

/* This group's advantages, and grpo's on its rewards. */
int sim_adv_group(struct sim_out *out, const struct v05_group *g)
{
	struct v05_params gp;
	struct v05_estimate e;
	double r[V05_K_LIMIT], a[V05_K_LIMIT];

	v05_params_default(&gp);
	gp.mode = V05_MODE_GRPO;
	gp.k_init = 1;
	gp.k_max = V05_K_LIMIT;
	for (uint32_t i = 0; i < g->k; i++)
		r[i] = g->rewards[i];
	if (v05_estimate(&gp, 0.0, r, g->k, &e, a))
		return -1;
	for (uint32_t i = 0; i < g->k; i++)
		if (adv_add(&out->adv, g->advantages[i]) ||
		    adv_add(&out->grpo, a[i]))
			return -1;
	return 0;
}
