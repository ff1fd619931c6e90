/* SPDX-License-Identifier: MIT */
/* v05ctl estimate: the JSON it prints equals the library's answer bit for
 * bit; bad input gives one stderr line naming the argument and exit 2. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/run.h"
#include "v05.h"

static char *v05ctl_path;

/* The number after "key": in a one-object JSON line, or NAN for null. */
static double json_field(const char *json, const char *key)
{
	double v;

	if (json_number(json, key, &v))
		fail_msg("no key \"%s\" in %s", key, json);
	return v;
}

static int run_estimate(struct run_result *r, const char *a1, const char *a2,
			const char *a3, const char *a4, const char *a5,
			const char *a6)
{
	char *argv[] = { v05ctl_path, (char *)"estimate", (char *)a1, (char *)a2,
			 (char *)a3, (char *)a4, (char *)a5, (char *)a6, NULL };

	assert_int_equal(run_capture(argv, r), 0);
	return r->status;
}

static void check_against_library(double prior, const double *rw, uint32_t k,
				  const char *rewards_arg, const char *mode)
{
	struct v05_params p;
	struct v05_estimate e;
	struct run_result *r = malloc(sizeof(*r));
	double adv[V05_K_LIMIT];
	char prior_arg[64];
	const char *q;

	assert_non_null(r);
	snprintf(prior_arg, sizeof(prior_arg), "%.17g", prior);
	assert_int_equal(run_estimate(r, "--prior", prior_arg, "--rewards",
				      rewards_arg, "--mode", mode), 0);
	assert_int_equal(count_lines(r->out), 1);
	assert_int_equal(r->err_len, 0);

	v05_params_default(&p);
	p.mode = (uint32_t)v05_mode_from_name(mode);
	p.k_init = k;
	assert_int_equal(v05_estimate(&p, prior, rw, k, &e, adv), 0);
	assert_true(json_field(r->out, "k") == (double)k);
	assert_true(json_field(r->out, "mean") == e.mean);
	assert_true(json_field(r->out, "delta2") == e.delta2);
	assert_true(json_field(r->out, "weight") == e.weight);
	assert_true(json_field(r->out, "baseline") == e.baseline);
	assert_true(json_field(r->out, "sigma") == e.sigma);
	if (e.has_target)
		assert_true(json_field(r->out, "k_target") == e.k_target);
	else
		assert_true(isnan(json_field(r->out, "k_target")));
	q = strstr(r->out, "\"action\": \"");
	assert_non_null(q);
	assert_int_equal(strncmp(q + 11, v05_action_name(e.action),
				 strlen(v05_action_name(e.action))), 0);
	q = strstr(r->out, "\"advantages\": [");
	assert_non_null(q);
	q += strlen("\"advantages\": [");
	for (uint32_t i = 0; i < k; i++) {
		char *end;
		double a = strtod(q, &end);

		assert_true(a == adv[i]);
		q = end + (i + 1 < k ? 2 : 0);
	}
	assert_int_equal(*q, ']');
	free(r);
}

static void test_matches_library(void **state)
{
	const double r1[] = { 1, 1, 1, -1 };
	const double r2[] = { 1, 1, 1, 1 };
	const double r3[] = { 0.25, -0.5, 1, 0.125, -1, 0.75 };

	(void)state;
	check_against_library(0.8, r1, 4, "1,1,1,-1", "v05");
	check_against_library(-0.8, r2, 4, "1,1,1,1", "v05");
	check_against_library(0.1, r3, 6, "0.25,-0.5,1,0.125,-1,0.75", "v05");
	check_against_library(0.1, r3, 6, "0.25,-0.5,1,0.125,-1,0.75",
			      "v05-fixed");
	check_against_library(0.0, r1, 4, "1,1,1,-1", "grpo");
	check_against_library(0.0, r2, 4, "1,1,1,1", "dapo");
}

static void test_paper_example_output(void **state)
{
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	assert_int_equal(run_estimate(r, "--prior", "0.8", "--rewards",
				      "1,1,1,-1", NULL, NULL), 0);
	assert_non_null(strstr(r->out, "\"action\": \"stop\""));
	assert_non_null(strstr(r->out, "\"k_target\": null"));
	assert_true(json_field(r->out, "baseline") == 0.8);
	free(r);
}

/* --sigma and v05-eb's --fit: the printed numbers are the library's. */
static void test_sigma_and_eb(void **state)
{
	struct run_result *r = malloc(sizeof(*r));
	const double rw[4] = { 1, 1, -1, 1 };
	struct v05_eb_fit fit = { 10.0, 0.1, 1.0, 1.0 };
	struct v05_params p;
	struct v05_estimate e;
	double adv[4];
	char *eb[] = { v05ctl_path, (char *)"estimate", (char *)"--prior",
		       (char *)"0.2", (char *)"--rewards", (char *)"1,1,-1,1",
		       (char *)"--mode", (char *)"v05-eb", (char *)"--fit",
		       (char *)"10,0.1", NULL };
	char *nofit[] = { v05ctl_path, (char *)"estimate", (char *)"--prior",
			  (char *)"0.2", (char *)"--rewards", (char *)"1",
			  (char *)"--mode", (char *)"v05-eb", NULL };

	(void)state;
	assert_non_null(r);
	/* Prior 1 not rejected by 3 of 4: rms gives -2, paper -200. */
	assert_int_equal(run_estimate(r, "--prior", "1", "--rewards", "1,1,1,-1",
				      NULL, NULL), 0);
	assert_non_null(strstr(r->out, "\"sigma_mode\": \"rms\""));
	assert_non_null(strstr(r->out, "\"advantages\": [0, 0, 0, -2]"));
	assert_int_equal(run_estimate(r, "--prior", "1", "--rewards", "1,1,1,-1",
				      "--sigma", "paper"), 0);
	assert_true(json_field(r->out, "sigma") == V05_SIGMA_FLOOR);
	assert_non_null(strstr(r->out, "\"sigma_mode\": \"paper\""));
	/* v05-eb under a given fit, at its first stage (k_init = k). */
	assert_int_equal(run_capture(eb, r), 0);
	assert_int_equal(r->status, 0);
	v05_params_default(&p);
	p.mode = V05_MODE_V05_EB;
	assert_int_equal(v05_eb_estimate(&p, &fit, 0.2, rw, 4, &e, adv), 0);
	assert_true(json_field(r->out, "baseline") == e.baseline);
	assert_true(json_field(r->out, "sigma") == e.sigma);
	assert_true(json_field(r->out, "weight") == e.weight);
	/* Without the fit: a usage error naming --fit. */
	assert_int_equal(run_capture(nofit, r), 0);
	assert_int_equal(r->status, 2);
	assert_non_null(strstr(r->err, "--fit"));
	assert_int_equal(run_estimate(r, "--prior", "0.5", "--rewards", "1",
				      "--sigma", "floor"), 2);
	assert_non_null(strstr(r->err, "--sigma"));
	free(r);
}

/* The published rules with their own defaults: Reinforce-Ada's worked
 * example E1 (round of 8, 4 kept), a smaller round, and keep_n refused
 * above the round. */
static void test_rules(void **state)
{
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	assert_non_null(r);
	assert_int_equal(run_estimate(r, "--mode", "reinforce-ada", "--rewards",
				      "1,-1,-1,1,-1,-1,-1,-1", NULL, NULL), 0);
	assert_non_null(strstr(r->out, "\"action\": \"stop\""));
	assert_non_null(strstr(r->out, "\"keep\": [0, 1, 2, 3]"));
	assert_non_null(strstr(r->out,
			       "\"advantages\": [1.5, -0.5, -0.5, 1.5, 0, 0, 0, 0]"));
	/* One success of 8: the balanced exit wants two. */
	assert_int_equal(run_estimate(r, "--mode", "reinforce-ada", "--rewards",
				      "-1,-1,-1,-1,-1,1,-1,-1", NULL, NULL), 0);
	assert_non_null(strstr(r->out, "\"action\": \"more\""));
	assert_int_equal(run_estimate(r, "--mode", "reinforce-ada-pos",
				      "--rewards", "-1,-1,-1,-1,-1,1,-1,-1",
				      NULL, NULL), 0);
	assert_non_null(strstr(r->out, "\"action\": \"stop\""));
	assert_int_equal(run_estimate(r, "--mode", "reinforce-ada", "--k-init",
				      "4", "--rewards", "1,-1,-1,-1"), 0);
	assert_non_null(strstr(r->out, "\"keep\": [0, 1]"));
	assert_int_equal(run_estimate(r, "--mode", "reinforce-ada", "--keep-n",
				      "9", "--rewards", "1,-1"), 2);
	assert_non_null(strstr(r->err, "--keep-n"));
	assert_int_equal(run_estimate(r, "--mode", "reinforce-ada", "--k-init",
				      "0", "--rewards", "1,-1"), 2);
	assert_non_null(strstr(r->err, "--k-init"));
	free(r);
}

struct bad_case {
	const char *args[6];
	const char *names; /* the argument the message must name */
};

static void test_bad_input(void **state)
{
	static const struct bad_case cases[] = {
		{ { "--prior", "abc", "--rewards", "1" }, "--prior" },
		{ { "--prior", "nan", "--rewards", "1" }, "--prior" },
		{ { "--prior", "1.5", "--rewards", "1" }, "--prior" },
		{ { "--prior", "0x1p-1", "--rewards", "1" }, "--prior" },
		{ { "--prior", "0.5", "--rewards", "1,,1" }, "--rewards" },
		{ { "--prior", "0.5", "--rewards", "1,2" }, "--rewards" },
		{ { "--prior", "0.5", "--rewards", "1,inf" }, "--rewards" },
		{ { "--prior", "0.5", "--rewards", "" }, "--rewards" },
		{ { "--prior", "0.5" }, "--rewards" },
		{ { "--rewards", "1,1" }, "--prior" },
		{ { "--prior", "0.5", "--rewards", "1", "--cost", "1" }, "--cost" },
		{ { "--prior", "0.5", "--rewards", "1", "--cost", "0" }, "--cost" },
		{ { "--prior", "0.5", "--rewards", "1", "--k-max", "65" }, "--k-max" },
		{ { "--prior", "0.5", "--rewards", "1", "--k-max", "-3" }, "--k-max" },
		{ { "--prior", "0.5", "--rewards", "1", "--k-step", "0" }, "--k-step" },
		{ { "--prior", "0.5", "--rewards", "1", "--mode", "ppo" }, "--mode" },
		{ { "--prior", "0.5", "--rewards", "1,1,1", "--k-max", "2" }, "--rewards" },
		{ { "--prior", "0.5", "--rewards", "1", "--bogus" }, "--bogus" },
		{ { "--prior", "0.5", "--rewards", "1", "extra" }, "extra" },
		{ { "--prior" }, "--prior" },
	};
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;

		run_estimate(r, a[0], a[1], a[2], a[3], a[4], a[5]);
		if (r->status != 2 || r->out_len != 0 ||
		    count_lines(r->err) != 1 || !strstr(r->err, cases[i].names))
			fail_msg("case %zu (%s): status %d, stdout '%s', stderr '%s'",
				 i, cases[i].names, r->status, r->out, r->err);
	}
	free(r);
}

static void test_help(void **state)
{
	static const char *const options[] = { "--prior", "--rewards", "--cost",
					       "--k-step", "--k-max", "--mode" };
	struct run_result *r = malloc(sizeof(*r));
	char *argv1[] = { v05ctl_path, (char *)"--help", NULL };
	char *argv2[] = { v05ctl_path, NULL };
	char *argv3[] = { v05ctl_path, (char *)"nosuch", NULL };

	(void)state;
	assert_int_equal(run_estimate(r, "--help", NULL, NULL, NULL, NULL, NULL), 0);
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
		assert_non_null(strstr(r->out, options[i]));
	assert_int_equal(run_capture(argv1, r), 0);
	assert_int_equal(r->status, 0);
	assert_non_null(strstr(r->out, "estimate"));
	assert_int_equal(run_capture(argv2, r), 0);
	assert_int_equal(r->status, 2);
	assert_int_equal(run_capture(argv3, r), 0);
	assert_int_equal(r->status, 2);
	assert_non_null(strstr(r->err, "nosuch"));
	free(r);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_library),
		cmocka_unit_test(test_paper_example_output),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_sigma_and_eb),
		cmocka_unit_test(test_rules),
		cmocka_unit_test(test_help),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH-TO-v05ctl\n", argv[0]);
		return 2;
	}
	v05ctl_path = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
