/* SPDX-License-Identifier: MIT */
/* v05ctl estimate: one group through the statistics core, as JSON. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "num.h"
#include "v05.h"
#include "v05ctl.h"

void help_estimate(FILE *f)
{
	fprintf(f,
		"usage: v05ctl estimate --prior V --rewards R1,R2,... [--cost C]\n"
		"                       [--k-step N] [--k-max N] [--mode MODE]\n"
		"                       [--k-init N] [--keep-n N]\n"
		"                       [--sigma rms|paper] [--fit N0,H[,A2,B2]]\n"
		"\n"
		"Fuses the prior V with the rewards of one group (in sample order)\n"
		"and prints exactly one JSON object on stdout: k, mode, mean,\n"
		"delta2, weight, baseline, sigma, k_target (null when there is no\n"
		"target), action (\"more\", \"stop\" or \"drop\") and advantages\n"
		"(in input order). Numbers are printed with %%.17g.\n"
		"\n"
		"options:\n"
		"  --prior V       value-model prior on the [-1, 1] scale (V = 2p - 1);\n"
		"                  required for modes v05 and v05-fixed, ignored by\n"
		"                  grpo and dapo (default 0 there)\n"
		"  --rewards LIST  comma-separated rewards in [-1, 1], 1 to k-max of them\n"
		"  --cost C        cost of one rollout, in (0, 1) (default %g;\n"
		"                  v05-eb's %g)\n"
		"  --k-step N      samples added per \"more\", >= 1 (default %u)\n"
		"  --k-max N       cap on the group size, <= %u (default %u)\n"
		"  --mode MODE     v05 (fusion + OSLA), v05-fixed (fusion, fixed k),\n"
		"                  v05-eb (empirical-Bayes posterior mean under a\n"
		"                  batch's fit, see --fit), grpo (group mean/std as\n"
		"                  verl), dapo (grpo + drop of zero-variance groups),\n"
		"                  reinforce-ada, reinforce-ada-pos, knapsack-prior,\n"
		"                  knapsack, greso (docs/RULES.md; their own\n"
		"                  defaults: reinforce-ada's k 8/8/32, the knapsack\n"
		"                  modes' k_max 64, greso's G 8)\n"
		"                  (default v05)\n"
		"  --sigma NORM    advantage normaliser of the v05 modes: rms (default;\n"
		"                  sigma^2 = max(1 - baseline^2, mean (r - baseline)^2),\n"
		"                  so |A| <= sqrt(k)) or paper (sqrt(1 - baseline^2)\n"
		"                  floored at %g)\n"
		"  --fit N0,H[,A2,B2]\n"
		"                  v05-eb only, required there: the batch's fitted\n"
		"                  concentration n0 >= 0, hallucination weight H in\n"
		"                  (0, 1) and the hallucination component's\n"
		"                  Beta(A2, B2), each in [0.01, 1000] (default 1,1:\n"
		"                  the uniform); the group is taken at its first\n"
		"                  stage (k_init = k), so action/k_target give the\n"
		"                  two-stage choice of extra samples\n"
		"  --k-init N      the group size the rule started from: reinforce-\n"
		"                  ada's round (default 8; --k-step follows it);\n"
		"                  other modes: the number of rewards\n"
		"  --keep-n N      reinforce-ada: samples trained on (default\n"
		"                  k_init / 2); the JSON's \"keep\" lists them\n"
		"  -h, --help      this text\n"
		"\n"
		"grpo/dapo's sigma is the group's std (advantages divide by\n"
		"std + %g as verl).\n"
		"\n"
		"Bad input: one line on stderr naming the argument, exit status 2,\n"
		"nothing on stdout.\n"
		"\n"
		"example (the paper's worked example, prior 0.8 and 3 of 4 right):\n"
		"  v05ctl estimate --prior 0.8 --rewards 1,1,1,-1\n",
		V05_DEFAULT_COST, V05_EB_DEFAULT_COST, V05_DEFAULT_K_STEP,
		V05_K_LIMIT,
		V05_DEFAULT_K_MAX, V05_SIGMA_FLOOR, V05_GRPO_EPSILON);
}

static int parse_uint_opt(const char *opt, const char *arg, uint32_t *out)
{
	uint64_t v;
	int ret = v05ctl_parse_u64(arg, UINT32_MAX, &v);

	if (ret)
		return v05ctl_usage_error("estimate",
					  "%s: '%s' is not a non-negative integer",
					  opt, arg);
	*out = (uint32_t)v;
	return 0;
}

static void print_estimate(const struct v05_estimate *e, uint32_t mode,
			   uint32_t sigma, const double *adv, uint64_t keep)
{
	printf("{\"k\": %u, \"mode\": ", e->k);
	json_str(stdout, v05_mode_name(mode));
	printf(", \"sigma_mode\": ");
	json_str(stdout, v05_sigma_name(sigma));
	printf(", \"mean\": ");
	json_num(stdout, e->mean);
	printf(", \"delta2\": ");
	json_num(stdout, e->delta2);
	printf(", \"weight\": ");
	json_num(stdout, e->weight);
	printf(", \"baseline\": ");
	json_num(stdout, e->baseline);
	printf(", \"sigma\": ");
	json_num(stdout, e->sigma);
	printf(", \"k_target\": ");
	if (e->has_target)
		json_num(stdout, e->k_target);
	else
		fputs("null", stdout);
	printf(", \"action\": ");
	json_str(stdout, v05_action_name(e->action));
	printf(", \"keep\": [");
	for (uint32_t i = 0, first = 1; i < e->k; i++) {
		if (keep >> i & 1) {
			printf(first ? "%u" : ", %u", i);
			first = 0;
		}
	}
	printf("], \"advantages\": [");
	for (uint32_t i = 0; i < e->k; i++) {
		if (i)
			fputs(", ", stdout);
		json_num(stdout, adv[i]);
	}
	printf("]}\n");
}

int cmd_estimate(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "prior", required_argument, NULL, 'p' },
		{ "rewards", required_argument, NULL, 'r' },
		{ "cost", required_argument, NULL, 'c' },
		{ "k-step", required_argument, NULL, 's' },
		{ "k-max", required_argument, NULL, 'm' },
		{ "mode", required_argument, NULL, 'M' },
		{ "sigma", required_argument, NULL, 'g' },
		{ "fit", required_argument, NULL, 'f' },
		{ "k-init", required_argument, NULL, 'i' },
		{ "keep-n", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	double rewards[V05_K_LIMIT], adv[V05_K_LIMIT];
	const char *rewards_arg = NULL;
	struct v05_params params;
	struct v05_estimate e;
	struct v05_eb_fit fit = { 0.0, 0.0, 1.0, 1.0 };
	bool have_prior = false, have_fit = false, have_step = false;
	bool have_max = false, have_cost = false;
	uint32_t k_init = 0, keep_n = 0;
	uint64_t keep = 0;
	double prior = 0.0;
	unsigned bad = 0;
	int opt, k, ret;

	v05_params_default(&params);
	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			if (v05ctl_parse_double(optarg, &prior))
				return v05ctl_usage_error("estimate",
					"--prior: '%s' is not a finite number",
					optarg);
			have_prior = true;
			break;
		case 'r':
			rewards_arg = optarg;
			break;
		case 'c':
			if (v05ctl_parse_double(optarg, &params.cost))
				return v05ctl_usage_error("estimate",
					"--cost: '%s' is not a finite number",
					optarg);
			have_cost = true;
			break;
		case 's':
			if (parse_uint_opt("--k-step", optarg, &params.k_step))
				return EXIT_USAGE;
			have_step = true;
			break;
		case 'm':
			if (parse_uint_opt("--k-max", optarg, &params.k_max))
				return EXIT_USAGE;
			have_max = true;
			break;
		case 'i':
			if (parse_uint_opt("--k-init", optarg, &k_init))
				return EXIT_USAGE;
			if (k_init == 0) /* 0 stands for "not given" below */
				return v05ctl_usage_error("estimate",
					"--k-init: 0 is not a group size");
			break;
		case 'n':
			if (parse_uint_opt("--keep-n", optarg, &keep_n))
				return EXIT_USAGE;
			break;
		case 'M':
			ret = v05_mode_from_name(optarg);
			if (ret < 0)
				return v05ctl_usage_error("estimate",
					"--mode: %s",
					v05_errmsg());
			params.mode = (uint32_t)ret;
			break;
		case 'g':
			ret = v05_sigma_from_name(optarg);
			if (ret < 0)
				return v05ctl_usage_error("estimate",
					"--sigma: '%s' is not rms or paper", optarg);
			params.sigma = (uint32_t)ret;
			break;
		case 'f': {
			double v[4] = { 0.0, 0.0, 1.0, 1.0 };
			unsigned b2 = 0;
			int n = v05ctl_parse_double_list(optarg, v, 4, &b2);

			if ((n != 2 && n != 4) || !(v[0] >= 0.0 && v[0] <= 1e9) ||
			    !(v[1] > 0.0 && v[1] < 1.0) ||
			    !(v[2] >= 0.01 && v[2] <= 1000.0) ||
			    !(v[3] >= 0.01 && v[3] <= 1000.0))
				return v05ctl_usage_error("estimate",
					"--fit: '%s' is not N0,H or N0,H,A2,B2 with N0 >= 0, H in (0, 1), A2 and B2 in [0.01, 1000]",
					optarg);
			fit = (struct v05_eb_fit){ v[0], v[1], v[2], v[3] };
			have_fit = true;
			break;
		}
		case 'h':
			help_estimate(stdout);
			return EXIT_OK;
		case ':':
			return v05ctl_usage_error("estimate", "%s needs a value",
						  argv[optind - 1]);
		default:
			return v05ctl_usage_error("estimate",
				"unknown option '%s' (see v05ctl estimate --help)",
				argv[optind - 1]);
		}
	}
	if (optind < argc)
		return v05ctl_usage_error("estimate", "unexpected argument '%s'",
					  argv[optind]);
	if (!rewards_arg)
		return v05ctl_usage_error("estimate", "--rewards is required");
	if (params.mode == V05_MODE_V05_EB && !have_cost)
		params.cost = V05_EB_DEFAULT_COST;
	if (params.mode == V05_MODE_V05_EB && !have_fit)
		return v05ctl_usage_error("estimate",
					  "--fit N0,H is required for mode v05-eb");
	if (params.mode != V05_MODE_V05_EB && have_fit)
		return v05ctl_usage_error("estimate",
					  "--fit only applies to mode v05-eb");
	if (!have_prior && (params.mode == V05_MODE_V05 ||
			    params.mode == V05_MODE_V05_FIXED ||
			    params.mode == V05_MODE_V05_EB))
		return v05ctl_usage_error("estimate",
					  "--prior is required for mode %s",
					  v05_mode_name(params.mode));

	k = v05ctl_parse_double_list(rewards_arg, rewards, V05_K_LIMIT, &bad);
	if (k == -E2BIG)
		return v05ctl_usage_error("estimate",
					  "--rewards: more than %u rewards",
					  V05_K_LIMIT);
	if (k < 0)
		return v05ctl_usage_error("estimate",
					  "--rewards: entry %u is not a finite number",
					  bad + 1);
	if (params.mode >= V05_MODE_ADA) {
		/* A published rule: its own defaults, then the options. */
		struct v05_config c;
		struct v05_params given = params;

		v05_config_default(&c);
		v05_config_mode(&c, params.mode);
		params = c.params;
		params.sigma = given.sigma;
		if (have_cost)
			params.cost = given.cost;
		if (have_max)
			params.k_max = given.k_max;
		if (k_init)
			params.k_init = k_init;
		if (k_init && !have_max && params.mode == V05_MODE_GRESO)
			params.k_max = k_init; /* one group of G */
		if (have_step)
			params.k_step = given.k_step;
		else if (params.mode == V05_MODE_ADA ||
			 params.mode == V05_MODE_ADA_POS)
			params.k_step = params.k_init; /* rounds of k_init */
	} else {
		/* The group's own size is the k the statistics see. */
		params.k_init = k_init ? k_init :
			(uint32_t)k <= params.k_max ? (uint32_t)k : params.k_max;
		if (params.k_init == 0)
			params.k_init = 1;
	}
	params.keep_n = keep_n;

	ret = v05_params_check(&params);
	if (ret) {
		const char *msg = v05_errmsg();
		const char *name = !strncmp(msg, "cost", 4)   ? "--cost" :
				   !strncmp(msg, "k_step", 6) ? "--k-step" :
				   !strncmp(msg, "keep_n", 6) ? "--keep-n" :
				   !strncmp(msg, "k_init", 6) ? "--k-init" :
								"--k-max";
		return v05ctl_usage_error("estimate", "%s: %s", name, msg);
	}
	if ((uint32_t)k > params.k_max)
		return v05ctl_usage_error("estimate",
					  "--rewards: %d rewards exceed --k-max %u",
					  k, params.k_max);
	ret = params.mode == V05_MODE_V05_EB ?
		      v05_eb_estimate(&params, &fit, prior, rewards, (uint32_t)k,
				      &e, adv) :
		      v05_estimate(&params, prior, rewards, (uint32_t)k, &e, adv);
	if (ret) {
		const char *msg = v05_errmsg();
		const char *name = !strncmp(msg, "prior", 5) ? "--prior" :
							       "--rewards";
		return v05ctl_usage_error("estimate", "%s: %s", name, msg);
	}
	if (v05_keep(&params, rewards, (uint32_t)k, &keep))
		return v05ctl_usage_error("estimate", "--rewards: %s",
					  v05_errmsg());
	print_estimate(&e, params.mode, params.sigma, adv, keep);
	return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILED;
}
