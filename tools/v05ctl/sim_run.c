/* SPDX-License-Identifier: MIT */
/*
 * v05ctl sim's run: prompts with true success probabilities go through a
 * real plugin (segment, lane, decisions, batch halt and padding) in
 * batches, once per epoch; rewards are Bernoulli draws, fresh each epoch;
 * the baseline each group ends with is compared with the truth; one JSON
 * object out. The rules with a cross-epoch state keep it here, as a
 * trainer would (include/v05/rules.h): knapsack's per-prompt history gives
 * each prompt's prior, greso's filter picks the prompts a batch rolls out.
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

/* Gamma(a, 1) by Marsaglia and Tsang (2000); below 1 through
 * Gamma(a + 1) U^(1/a). */
static double gamma_draw(uint64_t *s, double a)
{
	double d, c;

	if (a < 1.0)
		return gamma_draw(s, a + 1.0) *
		       pow(((double)(rng_next(s) >> 11) + 1.0) /
				   9007199254740993.0, 1.0 / a);
	d = a - 1.0 / 3.0;
	c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x = normal(s), v = 1.0 + c * x, u;

		if (v <= 0.0)
			continue;
		v = v * v * v;
		u = uniform01(s);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return d * v;
	}
}

static double beta_draw(uint64_t *s, double a, double b)
{
	double x = gamma_draw(s, a), y = gamma_draw(s, b);

	return x + y > 0.0 ? x / (x + y) : 0.5;
}

/* The cross-epoch state a trainer would keep for the rules that have
 * one; the epoch this batch is in. */
struct sim_hist {
	struct v05_knapsack_hist *kh; /* knapsack: by prompt            */
	struct v05_greso_prompt *gx;  /* greso: by prompt                */
	struct v05_greso g;
	struct v05_pc_prompt *px;     /* pilot-commit: by prompt         */
	uint32_t pilot;               /* pilot-commit: its pilot's size  */
	double lower, upper, evict;   /* pilot-commit: its band, evict   */
	uint64_t epoch;
};

static float reward_of(uint64_t seed, uint64_t prompt, uint32_t sample, double p)
{
	uint64_t s = seed ^ (prompt * 0x9e3779b97f4a7c15ull) ^
		     ((uint64_t)sample << 48);

	rng_next(&s);
	return uniform01(&s) < p ? 1.0f : -1.0f;
}

int sim_fail(const char *what)
{
	fprintf(stderr, "v05ctl sim: %s: %s\n", what, v05_errmsg());
	return EXIT_FAILED;
}

/* A final group into the rules' history (rewards in sample order). */
static int fold_history(struct sim_hist *hs, uint64_t i,
			const struct v05_group *g)
{
	double r[V05_K_LIMIT];

	for (uint32_t s = 0; s < g->k; s++)
		r[s] = g->rewards[s];
	if (hs->kh && v05_knapsack_hist_fold(&hs->kh[i], hs->epoch, r, g->k))
		return sim_fail("knapsack history");
	if (hs->gx && v05_greso_fold(&hs->g, &hs->gx[i], r, g->k) < 0)
		return sim_fail("greso fold");
	/* The pilot: a group's first k_init rewards. */
	if (hs->px && v05_pc_fold(&hs->px[i], hs->epoch, r, hs->pilot, hs->lower,
				  hs->upper, hs->evict) < 0)
		return sim_fail("pilot-commit fold");
	return 0;
}

/* One decision: a SAMPLE pushes its rewards, a FINAL or DROP is scored
 * against the truth, folded into the history and its slot released. */
static int apply_decision(struct v05_plugin *pl, struct v05_producer *w,
			  const struct sim_opts *o, struct sim_hist *hs,
			  const double *p, const struct v05_decision *d,
			  struct sim_out *out, uint32_t *finals)
{
	/* The prompt's index, from the uid its slot holds. */
	char buf[24] = "";
	uint64_t seed = o->seed ^ (hs->epoch * 0xd1342543de82ef95ull);
	struct v05_group g;
	double mu;
	uint64_t i;

	if (v05_slot_uid(pl, d->slot, buf, sizeof(buf) - 1) < 0)
		return sim_fail("slot uid");
	i = strtoull(buf + 1, NULL, 10);
	/* Early-start samples not needed: their rewards were pushed with the
	 * rest and are refused (the rollouts still count as issued). */
	if (d->kind == V05_DECISION_ABORT)
		return 0;
	if (d->kind == V05_DECISION_SAMPLE) {
		for (uint32_t s = 0; s < 64; s++) {
			if (!(d->samples >> s & 1))
				continue;
			if (v05_producer_push(w, d->key, d->gen, s,
					      reward_of(seed, i, s, p[i])))
				return sim_fail("push");
		}
		return 0;
	}
	if (v05_group(pl, d->slot, &g))
		return sim_fail("group");
	/* A prompt the rule took no sample of (v05-pg's skip): no group
	 * to score, counted as not rolled out. */
	if (g.k == 0) {
		out->skipped++;
		if (v05_release(pl, d->slot, d->gen, d->key))
			return sim_fail("release");
		(*finals)++;
		return 0;
	}
	mu = 2.0 * p[i] - 1.0;
	out->sq_err += (g.baseline - mu) * (g.baseline - mu);
	out->k_sum += g.k;
	if (g.k > out->max_k)
		out->max_k = g.k;
	out->dropped += d->kind == V05_DECISION_DROP;
	out->groups++;
	if (d->kind == V05_DECISION_FINAL)
		for (uint32_t s = 0; s < g.k; s++)
			if (g.keep >> s & 1 && g.advantages[s] != 0.0f) {
				out->nonzero++;
				break;
			}
	if (sim_adv_group(out, &g))
		return sim_fail("advantages");
	if (fold_history(hs, i, &g))
		return EXIT_FAILED;
	if (v05_release(pl, d->slot, d->gen, d->key))
		return sim_fail("release");
	(*finals)++;
	return 0;
}

/* The prompts idx[0..n) (global indices) as one batch, until each is
 * final. */
static int run_batch(struct v05_plugin *pl, struct v05_producer *w,
		     const struct sim_opts *o, struct sim_hist *hs,
		     const uint64_t *idx, uint32_t n, const double *p,
		     const double *prior, struct sim_out *out,
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
	if (n == 0)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], 24, "s%llu", (unsigned long long)idx[i]);
		in[i].uid = uids[i];
		in[i].uid_len = (uint32_t)strlen(uids[i]);
		in[i].prior = prior[idx[i]];
		/* knapsack: the prompt's own estimate, NaN before it has one
		 * (the uniform share, outside the knapsack). */
		if (hs->kh) {
			double q;
			int got = v05_knapsack_hist_estimate(&hs->kh[idx[i]], &q);

			if (got < 0) {
				ret = sim_fail("knapsack estimate");
				goto out;
			}
			in[i].prior = got ? 2.0 * q - 1.0 : NAN;
		}
	}
	/* Every prompt is accepted; a prompt the rule skips gets no SAMPLE
	 * (its DROP comes from the poll). */
	m = v05_submit(pl, in, n, d, NULL);
	if (m < 0) {
		ret = sim_fail("submit");
		goto out;
	}
	for (int j = 0; j < m; j++)
		out->first_k += d[j].k;
	out->first_n += (uint64_t)m;
	while (!ret) {
		for (int j = 0; j < m && !ret; j++)
			ret = apply_decision(pl, w, o, hs, p, &d[j], out,
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

/* One batch's figures, for the JSON's "batches". */
struct batch_row {
	struct v05_eb_fit fit;
	double mse, rollouts;
	int fitted;
};

int sim_run(const struct sim_opts *o)
{
	uint32_t bsz = (uint32_t)(o->batch < o->prompts ? o->batch : o->prompts);
	double *p = calloc(o->prompts, sizeof(double));
	double *prior = calloc(o->prompts, sizeof(double));
	uint64_t *idx = calloc(bsz, sizeof(*idx));
	struct v05_decision *d = calloc(2 * (size_t)bsz, sizeof(*d));
	struct batch_row *rows = calloc((o->prompts / bsz + 1) * o->epochs,
					sizeof(*rows));
	struct v05_eb_state *st = malloc(sizeof(*st));
	uint64_t rng = o->seed, counters[V05_COUNTER_SLOTS], batches = 0;
	struct sim_hist hs = { 0 };
	struct sim_out out;
	struct v05_producer *w = NULL;
	struct v05_plugin *pl = NULL;
	struct v05_config c;
	char name[64];
	int ret = 0;

	memset(&out, 0, sizeof(out));
	if (!p || !prior || !idx || !d || !rows || !st)
		return EXIT_FAILED;
	if (o->mode == V05_MODE_KNAPSACK)
		hs.kh = calloc(o->prompts, sizeof(*hs.kh));
	if (o->mode == V05_MODE_GRESO) {
		hs.gx = calloc(o->prompts, sizeof(*hs.gx));
		v05_greso_init(&hs.g, o->seed);
	}
	if (o->mode == V05_MODE_PILOT_COMMIT && o->epochs > 1)
		hs.px = calloc(o->prompts, sizeof(*hs.px));
	if ((o->mode == V05_MODE_KNAPSACK && !hs.kh) ||
	    (o->mode == V05_MODE_GRESO && !hs.gx) ||
	    (o->mode == V05_MODE_PILOT_COMMIT && o->epochs > 1 && !hs.px))
		return EXIT_FAILED;
	for (uint64_t i = 0; i < o->prompts; i++) {
		/* The drift starts with the first batch at or after half. */
		int late = o->have_drift && i >= (o->prompts / 2 + bsz - 1) / bsz * bsz;
		double mu, v, noise = late ? o->drift_noise : o->noise;
		double h = late ? o->drift_hallucination : o->hallucination;

		p[i] = o->have_p ? o->p_fixed :
		       o->have_beta ? beta_draw(&rng, o->p_beta, o->p_beta_b) :
				       uniform01(&rng);
		mu = 2.0 * p[i] - 1.0;
		if (uniform01(&rng) < h) {
			v = -1.0 + 2.0 * uniform01(&rng);
		} else {
			v = mu + noise * normal(&rng);
			v = v > 1.0 ? 1.0 : (v < -1.0 ? -1.0 : v);
		}
		prior[i] = o->no_prior ? 0.0 : v;
	}
	v05_config_default(&c);
	/* The mode with its defaults (its cost; the published rules their
	 * own sizes), then what the options say (v05_config_check refuses
	 * what breaks a rule). */
	if (v05_config_mode(&c, o->mode))
		return sim_fail("mode");
	if (o->have_cost)
		c.params.cost = o->cost;
	if (o->have_sigma)
		c.params.sigma = o->sigma;
	c.schedule = o->schedule;
	if (o->mode >= V05_MODE_ADA) {
		c.params.k_init = o->k;
		if (o->mode == V05_MODE_ADA || o->mode == V05_MODE_ADA_POS)
			c.params.k_step = o->k; /* rounds of k_init */
		if (o->mode == V05_MODE_GRESO || o->mode == V05_MODE_EBPO)
			c.params.k_max = o->k; /* one group of G */
		if (o->mode == V05_MODE_PILOT_COMMIT)
			c.params.k_max = 4 * o->k; /* the authors' 1:3 split */
		if (o->have_k_max)
			c.params.k_max = o->k_max;
		if (o->mode == V05_MODE_PILOT_COMMIT)
			c.params.k_step = c.params.k_max - c.params.k_init;
		if (o->have_band) {
			c.pc_lower = o->pc_lower;
			c.pc_upper = o->pc_upper;
		}
		c.ebpo_window = o->ebpo_window;
		if (o->have_pg_skip)
			c.pg_skip = o->pg_skip;
		if (o->have_halt)
			c.halt_fraction = o->halt;
		if (o->have_pad)
			c.pad_multiple = o->pad;
	} else {
		c.params.k_init = o->k;
		c.params.k_max = o->mode == V05_MODE_V05 ||
					 o->mode == V05_MODE_V05_EB ? o->k_max : o->k;
		/* Fixed-k modes never step; the default step must still fit
		 * k_max (the parameters' bound), e.g. at k = 1. */
		if (c.params.k_step > c.params.k_max)
			c.params.k_step = c.params.k_max;
		c.halt_fraction = o->halt;
		c.pad_multiple = o->pad;
	}
	hs.pilot = c.params.k_init;
	hs.lower = c.pc_lower;
	hs.upper = c.pc_upper;
	hs.evict = o->pc_evict;
	c.max_prompts = bsz;
	c.max_producers = 1;
	c.max_batches = 2;
	if (o->have_eb_window)
		c.eb_window = o->eb_window;
	if (o->eb_cold)
		c.eb_cold = o->eb_cold;
	c.eb_early = o->eb_early;
	if (o->have_eb_first)
		c.eb_first = o->eb_first;
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
	for (uint64_t e = 0; e < o->epochs && !ret; e++)
	for (uint64_t first = 0; first < o->prompts && !ret; first += bsz) {
		uint32_t cand = (uint32_t)(o->prompts - first < bsz ? o->prompts - first : bsz);
		uint32_t n = 0;
		uint64_t before, issued, groups = out.groups;
		double sq = out.sq_err;
		struct batch_row *r = &rows[batches];

		hs.epoch = e;
		/* greso: each batch is a training step; its filter decides
		 * which candidates are rolled out. */
		for (uint32_t i = 0; i < cand; i++) {
			int skip = hs.gx ? v05_greso_skip(&hs.g, &hs.gx[first + i],
							  first + i, batches) :
				   hs.px ? v05_pc_skip(&hs.px[first + i], e) : 0;

			if (skip < 0) {
				ret = sim_fail(hs.gx ? "greso skip" :
						       "pilot-commit skip");
				break;
			}
			if (skip)
				out.skipped++;
			else
				idx[n++] = first + i;
		}
		if (ret)
			break;
		v05_counters(pl, counters, V05_COUNTER_SLOTS);
		before = counters[V05_C_ROUNDS];
		issued = counters[V05_C_SAMPLES_ISSUED];
		ret = run_batch(pl, w, o, &hs, idx, n, p, prior, &out, d);
		v05_counters(pl, counters, V05_COUNTER_SLOTS);
		/* The rates adapt after every step but the first epoch's. */
		if (!ret && hs.gx && e && v05_greso_step_end(&hs.g))
			ret = sim_fail("greso step end");
		if (hs.gx && !e)
			hs.g.total = hs.g.easy = hs.g.hard = 0;
		r->mse = out.groups > groups ? (out.sq_err - sq) /
						       (double)(out.groups - groups) : 0.0;
		r->rollouts = (double)(counters[V05_C_SAMPLES_ISSUED] - issued) / cand;
		/* The running fit after the batch (v05-eb without a barrier). */
		r->fitted = v05_eb_state_get(pl, st) == 0 &&
			    v05_eb_state_fit(st, &r->fit) == 0;
		/* Waves: the first dispatch plus every release. */
		if (1 + counters[V05_C_ROUNDS] - before > out.max_waves)
			out.max_waves = (uint32_t)(1 + counters[V05_C_ROUNDS] - before);
		batches++;
	}
	if (!ret) {
		double rpp;

		v05_counters(pl, counters, V05_COUNTER_SLOTS);
		rpp = (double)counters[V05_C_SAMPLES_ISSUED] /
		      (double)(o->prompts * o->epochs);
		printf("{\"mode\": \"%s\", \"k\": %u, \"k_max\": %u, \"prompts\": %llu, "
		       "\"prior_noise\": ", v05_mode_name(o->mode), o->k,
		       c.params.k_max, (unsigned long long)o->prompts);
		json_num(stdout, o->noise);
		printf(", \"hallucination\": ");
		json_num(stdout, o->hallucination);
		printf(", \"no_prior\": %s", o->no_prior ? "true" : "false");
		printf(", \"p\": ");
		if (o->have_p)
			json_num(stdout, o->p_fixed);
		else
			fputs("null", stdout);
		printf(", \"sigma\": \"%s\", \"schedule\": \"%s\"",
		       v05_sigma_name(c.params.sigma),
		       o->schedule == V05_SCHEDULE_STREAM ? "stream" : "rounds");
		printf(", \"seed\": %llu, \"cost\": ", (unsigned long long)o->seed);
		json_num(stdout, c.params.cost);
		printf(", \"eb_first\": [");
		for (uint32_t k = 1, n = 0; k < 32; k++)
			if (c.params.mode == V05_MODE_V05_EB && c.eb_first >> k & 1)
				printf(n++ ? ", %u" : "%u", k);
		printf("], \"first_wave_mean\": ");
		json_num(stdout, out.first_n ? (double)out.first_k /
						       (double)out.first_n : 0.0);
		printf(", \"halt_fraction\": ");
		json_num(stdout, c.halt_fraction);
		printf(", \"pad_multiple\": %u, \"batch\": %u, \"mse\": ",
		       c.pad_multiple, bsz);
		json_num(stdout, out.groups ? out.sq_err / (double)out.groups : 0.0);
		printf(", \"rollouts_per_prompt\": ");
		json_num(stdout, rpp);
		printf(", \"mean_k\": ");
		json_num(stdout, out.groups ? out.k_sum / (double)out.groups : 0.0);
		printf(", \"epochs\": %llu, \"skipped\": %llu, \"pg_skip\": ",
		       (unsigned long long)o->epochs,
		       (unsigned long long)out.skipped);
		if (c.params.mode == V05_MODE_PG)
			json_num(stdout, c.pg_skip / 1000.0);
		else
			fputs("null", stdout);
		printf(", \"p_beta\": ");
		if (o->have_beta)
			json_num(stdout, o->p_beta);
		else
			fputs("null", stdout);
		printf(", \"p_beta_b\": ");
		if (o->have_beta)
			json_num(stdout, o->p_beta_b);
		else
			fputs("null", stdout);
		printf(", \"max_k\": %u, \"halts\": %llu, \"rounds\": %llu, "
		       "\"waves_per_batch\": ",
		       out.max_k, (unsigned long long)counters[V05_C_HALTS],
		       (unsigned long long)counters[V05_C_ROUNDS]);
		json_num(stdout, (double)(batches + counters[V05_C_ROUNDS]) /
					 (double)batches);
		printf(", \"max_waves\": %u, \"dropped\": %llu, \"nonzero_share\": ",
		       out.max_waves, (unsigned long long)out.dropped);
		json_num(stdout, out.groups ? (double)out.nonzero / (double)out.groups : 0.0);
		printf(", \"saving_vs_g16\": ");
		json_num(stdout, 1.0 - rpp / 16.0);
		printf(", \"batches\": [");
		for (uint64_t b = 0; b < batches; b++) {
			printf("%s{\"mse\": ", b ? ", " : "");
			json_num(stdout, rows[b].mse);
			printf(", \"rollouts_per_prompt\": ");
			json_num(stdout, rows[b].rollouts);
			if (rows[b].fitted) {
				printf(", \"fit_n0\": ");
				json_num(stdout, rows[b].fit.n0);
				printf(", \"fit_h\": ");
				json_num(stdout, rows[b].fit.h);
				printf(", \"fit_a2\": ");
				json_num(stdout, rows[b].fit.a2);
				printf(", \"fit_b2\": ");
				json_num(stdout, rows[b].fit.b2);
			}
			printf("}");
		}
		printf("]");
		sim_adv_print("adv", &out.adv);
		sim_adv_print("adv_grpo", &out.grpo);
		printf("}\n");
	}
out:
	if (w)
		v05_producer_close(w);
	v05_plugin_close(pl, V05_CLOSE_UNLINK);
	free(p);
	free(prior);
	free(idx);
	free(d);
	free(rows);
	free(st);
	free(hs.kh);
	free(hs.gx);
	free(hs.px);
	free(out.adv.abs);
	free(out.grpo.abs);
	return ret;
}
