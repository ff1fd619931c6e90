/* SPDX-License-Identifier: MIT */
/*
 * v05ctl sim: the statistical simulator, on the real library. Prompts with
 * true success probabilities go through a real plugin (segment, lane,
 * decisions, batch halt and padding) in batches; rewards are Bernoulli
 * draws; the baseline each group ends with is compared with the truth.
 */
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

void help_sim(FILE *f)
{
	fprintf(f,
		"usage: v05ctl sim --prompts N --prior-noise S --hallucination H\n"
		"                  --mode MODE [--k K] --seed X [options]\n"
		"       v05ctl sim --false-rejection [--prior V] [--k-max N]\n"
		"\n"
		"Runs N simulated prompts through a real v05 plugin (its own\n"
		"segment, a producer lane, the decisions, the batch halt and the\n"
		"padding), in batches, and prints one JSON object: mode, k, prompts,\n"
		"prior_noise, hallucination, seed, mse (mean over prompts of\n"
		"(baseline - mu)^2), rollouts_per_prompt, mean_k, max_k, halts,\n"
		"rounds, waves_per_batch (dispatches per batch, the first one\n"
		"included), max_waves, dropped, saving_vs_g16 (1 - rollouts per\n"
		"prompt / 16), and the advantages' distribution: adv (this mode's\n"
		"|A| p99, p99.9, max and mean A^2 over every sample) and adv_grpo\n"
		"(the same for verl's (r - mean) / (std + 1e-6) on the same groups).\n"
		"\n"
		"Each prompt's true success probability p is uniform on [0, 1]\n"
		"(or --p); its true mean is mu = 2p - 1; its prior is\n"
		"clip(mu + N(0, S^2), -1, 1), or, with probability H, uniform on\n"
		"[-1, 1]; each reward is +1 with probability p, else -1.\n"
		"\n"
		"options:\n"
		"  --prompts N         prompts (default 10000)\n"
		"  --prior-noise S     prior noise std, >= 0 (default 0.1)\n"
		"  --hallucination H   share of random priors, in [0, 1] (default 0)\n"
		"  --mode MODE         v05-eb (empirical Bayes, two waves; the\n"
		"                      default), v05 (the paper's OSLA), v05-fixed,\n"
		"                      grpo, dapo\n"
		"  --paper             the paper's exact behaviour: mode v05, halt\n"
		"                      0.25, --sigma paper, rounds (later options\n"
		"                      still override)\n"
		"  --sigma NORM        rms (bounded, default) or paper (fused modes)\n"
		"  --schedule S        rounds (default) or stream\n"
		"  --k K               group size: v05's and v05-eb's k_init (default 4),\n"
		"                      v05-fixed's k (default 4), grpo/dapo's G\n"
		"                      (default 16)\n"
		"  --k-max N           v05's and v05-eb's cap (default 16)\n"
		"  --cost C            OSLA cost per rollout (default %g)\n"
		"  --halt-fraction F   batch halt (default 0.25)\n"
		"  --pad N             dispatch multiple (default 32)\n"
		"  --batch B           prompts per batch (default 512)\n"
		"  --p P               every prompt's true success probability\n"
		"  --seed X            seed (default 0)\n"
		"  --false-rejection   instead: the exact rate at which an exact\n"
		"                      prior --prior (default 0.8) is rejected at\n"
		"                      k = 1..--k-max (default 8), by enumerating\n"
		"                      the binomial distribution of successes\n"
		"  -h, --help          this text\n"
		"\n"
		"Bad arguments: one line on stderr naming the argument, exit 2.\n",
		V05_DEFAULT_COST);
}

/* The draws built on splitmix64: the same stream for a seed. */
static uint64_t rng_next(uint64_t *s)
{
	return v05__splitmix64(s);
}

static double uniform01(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static double normal(uint64_t *s)
{
	double u1 = ((double)(rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
	double u2 = uniform01(s);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

struct sim_opts {
	uint64_t prompts, seed, batch;
	double noise, hallucination, cost, halt, p_fixed;
	uint32_t mode, k, k_max, pad, sigma, schedule;
	int have_k, have_p;
};

/* |A| of every final sample, this mode's and grpo's on the same groups. */
struct adv_acc {
	double *abs;
	uint64_t n, cap;
	double sq;
};

struct sim_out {
	double sq_err, k_sum;
	uint32_t max_k, max_waves;
	uint64_t dropped;
	struct adv_acc adv, grpo;
};

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

static void adv_print(const char *name, struct adv_acc *a)
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
static int adv_group(struct sim_out *out, const struct v05_group *g)
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

static float reward_of(uint64_t seed, uint64_t prompt, uint32_t sample, double p)
{
	uint64_t s = seed ^ (prompt * 0x9e3779b97f4a7c15ull) ^
		     ((uint64_t)sample << 48);

	rng_next(&s);
	return uniform01(&s) < p ? 1.0f : -1.0f;
}

static int sim_fail(const char *what)
{
	fprintf(stderr, "v05ctl sim: %s: %s\n", what, v05_errmsg());
	return EXIT_FAILED;
}

/* One decision: a SAMPLE pushes its rewards, a FINAL or DROP is scored
 * against the truth and its slot released. */
static int apply_decision(struct v05_plugin *pl, struct v05_producer *w,
			  const struct sim_opts *o, uint64_t first,
			  const double *p, const struct v05_decision *d,
			  struct sim_out *out, uint32_t *finals)
{
	/* The prompt's index, from the uid its slot holds. */
	char buf[24] = "";
	struct v05_group g;
	double mu;
	uint32_t i;

	if (v05_slot_uid(pl, d->slot, buf, sizeof(buf) - 1) < 0)
		return sim_fail("slot uid");
	i = (uint32_t)(strtoull(buf + 1, NULL, 10) - first);
	if (d->kind == V05_DECISION_SAMPLE) {
		for (uint32_t s = 0; s < 64; s++) {
			if (!(d->samples >> s & 1))
				continue;
			if (v05_producer_push(w, d->key, d->gen, s,
					      reward_of(o->seed, first + i, s, p[i])))
				return sim_fail("push");
		}
		return 0;
	}
	if (v05_group(pl, d->slot, &g))
		return sim_fail("group");
	mu = 2.0 * p[i] - 1.0;
	out->sq_err += (g.baseline - mu) * (g.baseline - mu);
	out->k_sum += g.k;
	if (g.k > out->max_k)
		out->max_k = g.k;
	out->dropped += d->kind == V05_DECISION_DROP;
	if (adv_group(out, &g))
		return sim_fail("advantages");
	if (v05_release(pl, d->slot, d->gen, d->key))
		return sim_fail("release");
	(*finals)++;
	return 0;
}

static int run_batch(struct v05_plugin *pl, struct v05_producer *w,
		     const struct sim_opts *o, uint64_t first, uint32_t n,
		     const double *p, const double *prior, struct sim_out *out,
		     struct v05_decision *d)
{
	struct v05_prompt_in *in = calloc(n, sizeof(*in));
	char (*uids)[24] = calloc(n, 24);
	uint32_t finals = 0;
	int m, ret = 0;

	if (!in || !uids) {
		ret = EXIT_FAILED;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], 24, "s%llu", (unsigned long long)(first + i));
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = prior[i];
	}
	m = v05_submit(pl, in, n, d, NULL);
	if (m != (int)n) {
		ret = sim_fail("submit");
		goto out;
	}
	while (!ret) {
		for (int j = 0; j < m && !ret; j++)
			ret = apply_decision(pl, w, o, first, p, &d[j], out,
					     &finals);
		if (ret || finals == n)
			break;
		m = v05_poll(pl, d, 2 * n);
		if (m < 0)
			ret = sim_fail("poll");
	}
out:
	free(in);
	free(uids);
	return ret;
}

static int run_sim(const struct sim_opts *o)
{
	uint32_t bsz = (uint32_t)(o->batch < o->prompts ? o->batch : o->prompts);
	double *p = calloc(o->prompts, sizeof(double));
	double *prior = calloc(o->prompts, sizeof(double));
	struct v05_decision *d = calloc(2 * (size_t)bsz, sizeof(*d));
	uint64_t rng = o->seed, counters[V05_COUNTER_SLOTS], batches = 0;
	struct sim_out out;
	struct v05_producer *w = NULL;
	struct v05_plugin *pl = NULL;
	struct v05_config c;
	char name[64];
	int ret = 0;

	memset(&out, 0, sizeof(out));
	if (!p || !prior || !d)
		return EXIT_FAILED;
	for (uint64_t i = 0; i < o->prompts; i++) {
		double mu, v;

		p[i] = o->have_p ? o->p_fixed : uniform01(&rng);
		mu = 2.0 * p[i] - 1.0;
		if (uniform01(&rng) < o->hallucination) {
			v = -1.0 + 2.0 * uniform01(&rng);
		} else {
			v = mu + o->noise * normal(&rng);
			v = v > 1.0 ? 1.0 : (v < -1.0 ? -1.0 : v);
		}
		prior[i] = v;
	}
	v05_config_default(&c);
	c.params.cost = o->cost;
	c.params.mode = o->mode;
	c.params.k_init = o->k;
	c.params.k_max = o->mode == V05_MODE_V05 || o->mode == V05_MODE_V05_EB ?
				 o->k_max : o->k;
	/* Fixed-k modes never step; the default step must still fit k_max
	 * (the parameters' bound), e.g. at k = 1. */
	if (c.params.k_step > c.params.k_max)
		c.params.k_step = c.params.k_max;
	c.params.sigma = o->sigma;
	c.schedule = o->schedule;
	c.halt_fraction = o->halt;
	c.pad_multiple = o->pad;
	c.max_prompts = bsz;
	c.max_producers = 1;
	c.max_batches = 2;
	c.lane_capacity = 1024;
	while (c.lane_capacity < (uint64_t)bsz * c.params.k_max)
		c.lane_capacity <<= 1;
	snprintf(name, sizeof(name), "v05ctl-sim-%d", (int)getpid());
	if (v05_plugin_create(name, &c, &pl))
		return sim_fail("create");
	if (v05_producer_open(name, 0, &w)) {
		ret = sim_fail("producer");
		goto out;
	}
	for (uint64_t first = 0; first < o->prompts && !ret; first += bsz) {
		uint32_t n = (uint32_t)(o->prompts - first < bsz ? o->prompts - first : bsz);

		uint64_t before;

		v05_counters(pl, counters, V05_COUNTER_SLOTS);
		before = counters[V05_C_ROUNDS];
		ret = run_batch(pl, w, o, first, n, p + first, prior + first, &out, d);
		v05_counters(pl, counters, V05_COUNTER_SLOTS);
		/* Waves: the first dispatch plus every release. */
		if (1 + counters[V05_C_ROUNDS] - before > out.max_waves)
			out.max_waves = (uint32_t)(1 + counters[V05_C_ROUNDS] - before);
		batches++;
	}
	if (!ret) {
		double rpp;

		v05_counters(pl, counters, V05_COUNTER_SLOTS);
		rpp = (double)counters[V05_C_SAMPLES_ISSUED] / (double)o->prompts;
		printf("{\"mode\": \"%s\", \"k\": %u, \"k_max\": %u, \"prompts\": %llu, "
		       "\"prior_noise\": ", v05_mode_name(o->mode), o->k,
		       c.params.k_max, (unsigned long long)o->prompts);
		json_num(stdout, o->noise);
		printf(", \"hallucination\": ");
		json_num(stdout, o->hallucination);
		printf(", \"p\": ");
		if (o->have_p)
			json_num(stdout, o->p_fixed);
		else
			fputs("null", stdout);
		printf(", \"sigma\": \"%s\", \"schedule\": \"%s\"",
		       v05_sigma_name(o->sigma),
		       o->schedule == V05_SCHEDULE_STREAM ? "stream" : "rounds");
		printf(", \"seed\": %llu, \"cost\": ", (unsigned long long)o->seed);
		json_num(stdout, o->cost);
		printf(", \"halt_fraction\": ");
		json_num(stdout, o->halt);
		printf(", \"pad_multiple\": %u, \"batch\": %u, \"mse\": ", o->pad, bsz);
		json_num(stdout, out.sq_err / (double)o->prompts);
		printf(", \"rollouts_per_prompt\": ");
		json_num(stdout, rpp);
		printf(", \"mean_k\": ");
		json_num(stdout, out.k_sum / (double)o->prompts);
		printf(", \"max_k\": %u, \"halts\": %llu, \"rounds\": %llu, "
		       "\"waves_per_batch\": ",
		       out.max_k, (unsigned long long)counters[V05_C_HALTS],
		       (unsigned long long)counters[V05_C_ROUNDS]);
		json_num(stdout, (double)(batches + counters[V05_C_ROUNDS]) /
					 (double)batches);
		printf(", \"max_waves\": %u, \"dropped\": %llu, \"saving_vs_g16\": ",
		       out.max_waves, (unsigned long long)out.dropped);
		json_num(stdout, 1.0 - rpp / 16.0);
		adv_print("adv", &out.adv);
		adv_print("adv_grpo", &out.grpo);
		printf("}\n");
	}
out:
	if (w)
		v05_producer_close(w);
	v05_plugin_close(pl, V05_CLOSE_UNLINK);
	free(p);
	free(prior);
	free(d);
	free(out.adv.abs);
	free(out.grpo.abs);
	return ret;
}

/* Exactly, by enumeration: x ~ Bin(k, p) successes with p = (V + 1) / 2
 * (the prior is exact); rejected iff delta2(2x/k - 1, V, k) > 0. */
static int false_rejection(double prior, uint32_t kmax)
{
	double p = (prior + 1.0) / 2.0;

	printf("{\"prior\": ");
	json_num(stdout, prior);
	printf(", \"p\": ");
	json_num(stdout, p);
	printf(", \"false_rejection\": [");
	for (uint32_t k = 1; k <= kmax; k++) {
		double rate = 0.0;

		for (uint32_t x = 0; x <= k; x++) {
			double lc = lgamma(k + 1.0) - lgamma(x + 1.0) -
				    lgamma(k - x + 1.0);
			double w = p == 0.0 ? (x == 0) : p == 1.0 ? (x == k) :
				   exp(lc + x * log(p) + (k - x) * log1p(-p));
			double d2;

			if (v05_delta2(2.0 * x / k - 1.0, prior, k, &d2))
				return sim_fail("delta2");
			if (d2 > 0.0)
				rate += w;
		}
		printf("%s{\"k\": %u, \"rate\": ", k > 1 ? ", " : "", k);
		json_num(stdout, rate);
		printf(", \"gap\": ");
		json_num(stdout, 2.0 / k);
		printf(", \"radius\": ");
		json_num(stdout, 1.0 / sqrt((double)k));
		printf("}");
	}
	printf("]}\n");
	return EXIT_OK;
}

static int opt_double(const char *opt, const char *arg, double lo, double hi,
		      double *out)
{
	if (v05ctl_parse_double(arg, out) || *out < lo || *out > hi)
		return v05ctl_usage_error("sim", "%s: '%s' is not a number in [%g, %g]",
					  opt, arg, lo, hi);
	return 0;
}

static int opt_u64(const char *opt, const char *arg, uint64_t lo, uint64_t hi,
		   uint64_t *out)
{
	if (v05ctl_parse_u64(arg, hi, out) || *out < lo)
		return v05ctl_usage_error("sim", "%s: '%s' is not an integer in [%llu, %llu]",
					  opt, arg, (unsigned long long)lo,
					  (unsigned long long)hi);
	return 0;
}

int cmd_sim(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "prompts", required_argument, NULL, 'n' },
		{ "prior-noise", required_argument, NULL, 's' },
		{ "hallucination", required_argument, NULL, 'H' },
		{ "mode", required_argument, NULL, 'M' },
		{ "sigma", required_argument, NULL, 'g' },
		{ "paper", no_argument, NULL, 'A' },
		{ "schedule", required_argument, NULL, 'T' },
		{ "k", required_argument, NULL, 'k' },
		{ "k-max", required_argument, NULL, 'K' },
		{ "cost", required_argument, NULL, 'c' },
		{ "halt-fraction", required_argument, NULL, 'f' },
		{ "pad", required_argument, NULL, 'P' },
		{ "batch", required_argument, NULL, 'b' },
		{ "p", required_argument, NULL, 'p' },
		{ "seed", required_argument, NULL, 'S' },
		{ "false-rejection", no_argument, NULL, 'F' },
		{ "prior", required_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sim_opts o = { .prompts = 10000, .seed = 0, .batch = 512,
			      .noise = 0.1, .hallucination = 0.0,
			      .cost = V05_DEFAULT_COST, .halt = 0.25,
			      .mode = V05_MODE_V05_EB, .k_max = 16, .pad = 32 };
	double prior = 0.8;
	uint64_t v;
	int opt, fr = 0, ret, have_kmax = 0;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			if (opt_u64("--prompts", optarg, 1, 100000000, &o.prompts))
				return EXIT_USAGE;
			break;
		case 's':
			if (opt_double("--prior-noise", optarg, 0, 100, &o.noise))
				return EXIT_USAGE;
			break;
		case 'H':
			if (opt_double("--hallucination", optarg, 0, 1, &o.hallucination))
				return EXIT_USAGE;
			break;
		case 'M':
			ret = v05_mode_from_name(optarg);
			if (ret < 0)
				return v05ctl_usage_error("sim",
					"--mode: '%s' is not one of v05, v05-fixed, v05-eb, grpo, dapo",
					optarg);
			o.mode = (uint32_t)ret;
			break;
		case 'A':
			o.mode = V05_MODE_V05;
			o.halt = 0.25;
			o.sigma = V05_SIGMA_PAPER;
			o.schedule = V05_SCHEDULE_ROUNDS;
			break;
		case 'g':
			ret = v05_sigma_from_name(optarg);
			if (ret < 0)
				return v05ctl_usage_error("sim",
					"--sigma: '%s' is not rms or paper", optarg);
			o.sigma = (uint32_t)ret;
			break;
		case 'T':
			if (strcmp(optarg, "rounds") == 0)
				o.schedule = V05_SCHEDULE_ROUNDS;
			else if (strcmp(optarg, "stream") == 0)
				o.schedule = V05_SCHEDULE_STREAM;
			else
				return v05ctl_usage_error("sim",
					"--schedule: '%s' is not rounds or stream", optarg);
			break;
		case 'k':
			if (opt_u64("--k", optarg, 1, V05_K_LIMIT, &v))
				return EXIT_USAGE;
			o.k = (uint32_t)v;
			o.have_k = 1;
			break;
		case 'K':
			if (opt_u64("--k-max", optarg, 1, V05_K_LIMIT, &v))
				return EXIT_USAGE;
			o.k_max = (uint32_t)v;
			have_kmax = 1;
			break;
		case 'c':
			if (v05ctl_parse_double(optarg, &o.cost) || !(o.cost > 0) ||
			    !(o.cost < 1))
				return v05ctl_usage_error("sim",
					"--cost: '%s' is not a number in (0, 1)", optarg);
			break;
		case 'f':
			if (opt_double("--halt-fraction", optarg, 0, 1, &o.halt))
				return EXIT_USAGE;
			break;
		case 'P':
			if (opt_u64("--pad", optarg, 1, 65536, &v))
				return EXIT_USAGE;
			o.pad = (uint32_t)v;
			break;
		case 'b':
			if (opt_u64("--batch", optarg, 1, 1u << 20, &o.batch))
				return EXIT_USAGE;
			break;
		case 'p':
			if (opt_double("--p", optarg, 0, 1, &o.p_fixed))
				return EXIT_USAGE;
			o.have_p = 1;
			break;
		case 'S':
			if (opt_u64("--seed", optarg, 0, UINT64_MAX, &o.seed))
				return EXIT_USAGE;
			break;
		case 'F':
			fr = 1;
			break;
		case 'V':
			if (opt_double("--prior", optarg, -1, 1, &prior))
				return EXIT_USAGE;
			break;
		case 'h':
			help_sim(stdout);
			return EXIT_OK;
		case ':':
			return v05ctl_usage_error("sim", "%s needs a value",
						  argv[optind - 1]);
		default:
			return v05ctl_usage_error("sim",
				"unknown option '%s' (see v05ctl sim --help)",
				argv[optind - 1]);
		}
	}
	if (optind < argc)
		return v05ctl_usage_error("sim", "unexpected argument '%s'",
					  argv[optind]);
	if (fr)
		return false_rejection(prior, have_kmax ? o.k_max : 8);
	if (!o.have_k)
		o.k = o.mode == V05_MODE_GRPO || o.mode == V05_MODE_DAPO ? 16 : 4;
	if ((o.mode == V05_MODE_V05 || o.mode == V05_MODE_V05_EB) && o.k > o.k_max)
		return v05ctl_usage_error("sim", "--k: %u is above --k-max %u",
					  o.k, o.k_max);
	return run_sim(&o);
}
