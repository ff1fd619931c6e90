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
#include "sim.h"

void help_sim(FILE *f)
{
	fputs(
		"usage: v05ctl sim --prompts N --prior-noise S --hallucination H\n"
		"                  --mode MODE [--k K] --seed X [options]\n"
		"       v05ctl sim --false-rejection [--prior V] [--k-max N]\n"
		"\n"
		"Runs N simulated prompts through a real v05 plugin (its own\n"
		"segment, a producer lane, the decisions, the batch halt and the\n"
		"padding), in batches, and prints one JSON object: mode, k, prompts,\n"
		"prior_noise, hallucination, seed, mse (mean over groups of\n"
		"(baseline - mu)^2), rollouts_per_prompt (per prompt and epoch),\n"
		"mean_k, max_k, halts,\n"
		"rounds, waves_per_batch (dispatches per batch, the first one\n"
		"included), max_waves, dropped, nonzero_share (the share of groups\n"
		"with a trained advantage that is not 0), skipped (greso,\n"
		"pilot-commit, v05-pg: prompts not rolled out), saving_vs_g16 (1 -\n"
		"rollouts per prompt / 16), and the advantages' distribution: adv (this mode's\n"
		"|A| p99, p99.9, max and mean A^2 over every sample) and adv_grpo\n"
		"(the same for verl's (r - mean) / (std + 1e-6) on the same groups).\n"
		"\n"
		"Each prompt's true success probability p is uniform on [0, 1]\n"
		"(or --p); its true mean is mu = 2p - 1; its prior is\n"
		"clip(mu + N(0, S^2), -1, 1), or, with probability H, uniform on\n"
		"[-1, 1]; each reward is +1 with probability p, else -1.\n"
		"\n", f);
	/* Two literals: C99 promises only 4095 characters in one. */
	fputs(
		"options:\n"
		"  --prompts N         prompts (default 10000)\n"
		"  --prior-noise S     prior noise std, >= 0 (default 0.1)\n"
		"  --hallucination H   share of random priors, in [0, 1] (default 0)\n"
		"  --no-prior          every prior 0 (no value model: what the rules\n"
		"                      that need none are compared on)\n"
		"  --mode MODE         v05-eb (empirical Bayes, two waves; the\n"
		"                      default), v05 (the paper's OSLA), v05-fixed,\n"
		"                      grpo, dapo, v05-pg (first waves of 1, 2\n"
		"                      or 4 and the skip by the gradient's error\n"
		"                      per rollout; --k 2 while its fit is cold,\n"
		"                      up to --k-max 16); the published rules\n"
		"                      (docs/RULES.md), each with its own defaults:\n"
		"                      reinforce-ada, reinforce-ada-pos (rounds of\n"
		"                      --k 8 up to --k-max 32, pad 1, no halt),\n"
		"                      knapsack-prior (--k 8 per prompt on average,\n"
		"                      up to --k-max 64, p from the prior),\n"
		"                      knapsack (the same, p from each prompt's\n"
		"                      own past rewards: --epochs), greso (dapo's\n"
		"                      groups of --k 8 and its skip filter over\n"
		"                      --epochs; each batch is a training step),\n"
		"                      ebpo (one wave of --k 8, each group's mean\n"
		"                      shrunk toward the running mean of the\n"
		"                      groups'), pilot-commit (a pilot of --k 8,\n"
		"                      then up to --k-max 32 for a pilot success\n"
		"                      rate in the band, else dropped; solved\n"
		"                      prompts evicted over --epochs)\n"
		"  --epochs E          visit the prompts E times, fresh rewards\n"
		"                      each time (default 1); knapsack, greso and\n"
		"                      pilot-commit carry their history across\n"
		"                      epochs\n"
		"  --pc-lower L, --pc-upper U\n"
		"                      pilot-commit's band [L, 1 - U] (default\n"
		"                      0.125, 0.25)\n"
		"  --pc-evict E        pilot-commit: a pilot success rate >= E\n"
		"                      evicts the prompt from later epochs\n"
		"                      (default 1; 'never' to keep every prompt)\n"
		"  --ebpo-window W     ebpo: its statistics forget with a window\n"
		"                      of W groups (default 0: never)\n"
		"  --pg-skip S         v05-pg: skip a prompt whose expected signal\n"
		"                      is below S (0 to 1) of the mean over the\n"
		"                      prompts submitted (default 0.75; 0 never)\n"
		"  --p-beta A, --p-beta A:B\n"
		"                      each p from Beta(A, A) (A < 1 piles prompts\n"
		"                      near 0 and 1) or Beta(A, B) (A < B skews them\n"
		"                      toward 0) instead of uniform\n"
		"  --paper             the paper's exact behaviour: mode v05, halt\n"
		"                      0.25, --sigma paper, rounds (later options\n"
		"                      still override)\n"
		, f);
	fprintf(f,
		"  --sigma NORM        rms (bounded) or paper (fused modes, v05-pg);\n"
		"                      default the mode's: paper for v05-pg, else rms\n"
		"  --schedule S        rounds (default) or stream\n"
		"  --k K               group size: v05's and v05-eb's k_init (default 4),\n"
		"                      v05-fixed's k (default 4), grpo/dapo's G\n"
		"                      (default 16), the rules' (above)\n"
		"  --k-max N           v05's and v05-eb's cap (default 16), the rules'\n"
		"  --cost C            cost per rollout (default %g; v05-eb's %g)\n"
		"  --halt-fraction F   batch halt (default 0.25)\n"
		"  --pad N             dispatch multiple (default 32)\n"
		"  --batch B           prompts per batch (default 512)\n"
		"  --eb-window W       v05-eb, stream: the running fit forgets\n"
		"                      with window W first waves (0: never;\n"
		"                      default the library's, 512)\n"
		"  --eb-cold C         v05-eb, stream: first waves before the\n"
		"                      running fit decides alone (default 64)\n"
		"  --eb-early E        v05-eb, stream: early start for prompts\n"
		"                      whose chance of more samples is >= E/1000\n"
		"                      (default 0: off)\n"
		"  --eb-first LIST     v05-eb: the first waves the fit chooses from\n"
		"                      (default 2,4; 'off': --k always)\n"
		"  --drift-noise S2, --drift-hallucination H2\n"
		"                      a value model that changes: from the\n"
		"                      batch at half the prompts on, priors have\n"
		"                      noise S2 and hallucination share H2 (each\n"
		"                      defaults to the first half's); the JSON's\n"
		"                      \"batches\" shows how each batch fares\n"
		"  --p P               every prompt's true success probability\n"
		"  --seed X            seed (default 0)\n"
		"  --false-rejection   instead: the exact rate at which an exact\n"
		"                      prior --prior (default 0.8) is rejected at\n"
		"                      k = 1..--k-max (default 8), by enumerating\n"
		"                      the binomial distribution of successes\n"
		"  -h, --help          this text\n"
		"\n"
		"Bad arguments: one line on stderr naming the argument, exit 2.\n",
		V05_DEFAULT_COST, V05_EB_DEFAULT_COST);
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

/* --p-beta A or A:B, each in [0.01, 100]. */
static int opt_beta(const char *arg, double *a, double *b)
{
	const char *colon = strchr(arg, ':');
	size_t n = colon ? (size_t)(colon - arg) : 0;
	char head[64] = "";

	if (!colon) {
		if (opt_double("--p-beta", arg, 0.01, 100, a))
			return EXIT_USAGE;
		*b = *a;
		return 0;
	}
	if (n < sizeof(head))
		memcpy(head, arg, n);
	if (n >= sizeof(head) || v05ctl_parse_double(head, a) ||
	    v05ctl_parse_double(colon + 1, b) || !(*a >= 0.01 && *a <= 100) ||
	    !(*b >= 0.01 && *b <= 100))
		return v05ctl_usage_error("sim",
			"--p-beta: '%s' is not A or A:B with A and B numbers in [0.01, 100]",
			arg);
	return 0;
}

/* --eb-first "2,4" (sizes 1 to 31) or "off" (k_init always): a mask. */
static int opt_first(const char *arg, uint32_t *mask)
{
	double v[31];
	unsigned bad = 0;
	int n;

	*mask = 0;
	if (strcmp(arg, "off") == 0)
		return 0;
	n = v05ctl_parse_double_list(arg, v, 31, &bad);
	for (int i = 0; i < n; i++) {
		if (!(v[i] >= 1 && v[i] <= 31 && v[i] == floor(v[i])))
			n = -1;
		else
			*mask |= 1u << (uint32_t)v[i];
	}
	if (n < 1)
		return v05ctl_usage_error("sim",
			"--eb-first: '%s' is not 'off' or a list of first-wave sizes in [1, 31]",
			arg);
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
		{ "eb-window", required_argument, NULL, 'W' },
		{ "eb-cold", required_argument, NULL, 'C' },
		{ "eb-early", required_argument, NULL, 'G' },
		{ "eb-first", required_argument, NULL, 'I' },
		{ "drift-noise", required_argument, NULL, 'D' },
		{ "drift-hallucination", required_argument, NULL, 'E' },
		{ "seed", required_argument, NULL, 'S' },
		{ "false-rejection", no_argument, NULL, 'F' },
		{ "prior", required_argument, NULL, 'V' },
		{ "no-prior", no_argument, NULL, 'N' },
		{ "epochs", required_argument, NULL, 'Y' },
		{ "p-beta", required_argument, NULL, 'B' },
		{ "pc-lower", required_argument, NULL, 'L' },
		{ "pc-upper", required_argument, NULL, 'U' },
		{ "pc-evict", required_argument, NULL, 'X' },
		{ "ebpo-window", required_argument, NULL, 'O' },
		{ "pg-skip", required_argument, NULL, 'Q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sim_opts o = { .prompts = 10000, .seed = 0, .batch = 512,
			      .noise = 0.1, .hallucination = 0.0,
			      .cost = V05_DEFAULT_COST, .halt = 0.25,
			      .mode = V05_MODE_V05_EB, .k_max = 16, .pad = 32,
			      .drift_noise = -1.0, .drift_hallucination = -1.0,
			      .epochs = 1, .pc_lower = V05_PC_LOWER,
			      .pc_upper = V05_PC_UPPER, .pc_evict = 1.0 };
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
					"--mode: %s",
					v05_errmsg());
			o.mode = (uint32_t)ret;
			break;
		case 'A':
			o.mode = V05_MODE_V05;
			o.halt = 0.25;
			o.sigma = V05_SIGMA_PAPER;
			o.have_sigma = 1;
			o.schedule = V05_SCHEDULE_ROUNDS;
			break;
		case 'g':
			ret = v05_sigma_from_name(optarg);
			if (ret < 0)
				return v05ctl_usage_error("sim",
					"--sigma: '%s' is not rms or paper", optarg);
			o.sigma = (uint32_t)ret;
			o.have_sigma = 1;
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
			o.have_k_max = 1;
			break;
		case 'c':
			if (v05ctl_parse_double(optarg, &o.cost) || !(o.cost > 0) ||
			    !(o.cost < 1))
				return v05ctl_usage_error("sim",
					"--cost: '%s' is not a number in (0, 1)", optarg);
			o.have_cost = 1;
			break;
		case 'f':
			if (opt_double("--halt-fraction", optarg, 0, 1, &o.halt))
				return EXIT_USAGE;
			o.have_halt = 1;
			break;
		case 'P':
			if (opt_u64("--pad", optarg, 1, 65536, &v))
				return EXIT_USAGE;
			o.pad = (uint32_t)v;
			o.have_pad = 1;
			break;
		case 'b':
			if (opt_u64("--batch", optarg, 1, 1u << 20, &o.batch))
				return EXIT_USAGE;
			break;
		case 'W':
			if (opt_u64("--eb-window", optarg, 0, 1000000000, &v))
				return EXIT_USAGE;
			o.eb_window = (uint32_t)v;
			o.have_eb_window = 1;
			break;
		case 'C':
			if (opt_u64("--eb-cold", optarg, 1, 1000000, &v))
				return EXIT_USAGE;
			o.eb_cold = (uint32_t)v;
			break;
		case 'G':
			if (opt_u64("--eb-early", optarg, 0, 1000, &v))
				return EXIT_USAGE;
			o.eb_early = (uint32_t)v;
			break;
		case 'D':
			if (opt_double("--drift-noise", optarg, 0, 100, &o.drift_noise))
				return EXIT_USAGE;
			o.have_drift = 1;
			break;
		case 'E':
			if (opt_double("--drift-hallucination", optarg, 0, 1,
				       &o.drift_hallucination))
				return EXIT_USAGE;
			o.have_drift = 1;
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
		case 'N':
			o.no_prior = 1;
			break;
		case 'Y':
			if (opt_u64("--epochs", optarg, 1, 1000, &o.epochs))
				return EXIT_USAGE;
			break;
		case 'B':
			if (opt_beta(optarg, &o.p_beta, &o.p_beta_b))
				return EXIT_USAGE;
			o.have_beta = 1;
			break;
		case 'I':
			if (opt_first(optarg, &o.eb_first))
				return EXIT_USAGE;
			o.have_eb_first = 1;
			break;
		case 'L':
			if (opt_double("--pc-lower", optarg, 0, 1, &o.pc_lower))
				return EXIT_USAGE;
			o.have_band = 1;
			break;
		case 'U':
			if (opt_double("--pc-upper", optarg, 0, 1, &o.pc_upper))
				return EXIT_USAGE;
			o.have_band = 1;
			break;
		case 'X':
			if (strcmp(optarg, "never") == 0)
				o.pc_evict = NAN;
			else if (opt_double("--pc-evict", optarg, 0, 1, &o.pc_evict))
				return EXIT_USAGE;
			break;
		case 'O':
			if (opt_u64("--ebpo-window", optarg, 0, 1000000000, &v))
				return EXIT_USAGE;
			o.ebpo_window = (uint32_t)v;
			break;
		case 'Q': {
			double s;

			if (opt_double("--pg-skip", optarg, 0, 1, &s))
				return EXIT_USAGE;
			o.pg_skip = (uint32_t)lround(s * 1000.0);
			o.have_pg_skip = 1;
			break;
		}
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
	if (!o.have_k) {
		/* The mode's own k_init (its rule's preset, v05_config_mode;
		 * else the default 4); grpo and dapo: the paper's G = 16. */
		struct v05_config mc;

		v05_config_default(&mc);
		if (v05_config_mode(&mc, o.mode))
			return v05ctl_usage_error("sim", "--mode: %s", v05_errmsg());
		o.k = o.mode == V05_MODE_GRPO || o.mode == V05_MODE_DAPO ?
			      16 : mc.params.k_init;
	}
	if (o.have_p && o.have_beta)
		return v05ctl_usage_error("sim", "--p and --p-beta: give one");
	if ((o.mode == V05_MODE_V05 || o.mode == V05_MODE_V05_EB) && o.k > o.k_max)
		return v05ctl_usage_error("sim", "--k: %u is above --k-max %u",
					  o.k, o.k_max);
	if (o.pc_lower > 1.0 - o.pc_upper)
		return v05ctl_usage_error("sim",
			"--pc-lower %g is above 1 - --pc-upper %g: the band commits nothing",
			o.pc_lower, 1.0 - o.pc_upper);
	if (!isnan(o.pc_evict) && !(o.pc_evict > 1.0 - o.pc_upper))
		return v05ctl_usage_error("sim",
			"--pc-evict %g is not above 1 - --pc-upper %g (a solved prompt is above the band)",
			o.pc_evict, 1.0 - o.pc_upper);
	if (o.drift_noise < 0.0)
		o.drift_noise = o.noise;
	if (o.drift_hallucination < 0.0)
		o.drift_hallucination = o.hallucination;
	return sim_run(&o);
}