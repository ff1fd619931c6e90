/* SPDX-License-Identifier: MIT */
/*
 * A program of the kind an engine embeds, built once against 0.4's headers
 * (the tree 0.4 shipped as) and once against this tree's, then run against
 * either library (tests/compat/run). It uses every struct that grew or
 * changed between them: the config, a final group, the observer's info and
 * lane statistics. It prints the header's version and the library's, and
 * checks what it reads: each struct's bytes past the fields it knows stay
 * as it filled them (nothing wrote beyond what it has).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <v05.h>

#define GUARD 0x5a

static int fail(const char *what)
{
	fprintf(stderr, "consumer: %s: %s\n", what, v05_errmsg());
	return 1;
}

static int guard_ok(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != GUARD)
			return 0;
	return 1;
}

int main(void)
{
	struct {
		struct v05_config c;
		uint8_t after[64];
	} cfg;
	struct {
		struct v05_group g;
		uint8_t after[64];
	} grp;
	struct {
		struct v05_observer_info i;
		uint8_t after[128];
	} inf;
	struct {
		struct v05_lane_stat l[2];
		uint8_t after[64];
	} lst;
	struct v05_decision d[8];
	struct v05_prompt_in in = { "u0", 2, 0.0 };
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_observer *o;
	char name[64];
	int n;

	snprintf(name, sizeof(name), "compat-%d", (int)getpid());
	memset(&cfg, GUARD, sizeof(cfg));
	v05_config_default(&cfg.c);
	if (!guard_ok(cfg.after, sizeof(cfg.after)))
		return fail("v05_config_default wrote past the config");
	cfg.c.params.mode = V05_MODE_GRPO;
	cfg.c.params.k_init = cfg.c.params.k_max = 2;
	cfg.c.max_prompts = 4;
	cfg.c.max_producers = 2;
	cfg.c.lane_capacity = 64;
	if (v05_plugin_create(name, &cfg.c, &p) < 0)
		return fail("v05_plugin_create");
	if (v05_producer_open(name, 0, &w) < 0)
		return fail("v05_producer_open");
	if (v05_submit(p, &in, 1, d, NULL) != 1)
		return fail("v05_submit");
	if (v05_producer_push(w, d[0].key, d[0].gen, 0, 1.0f) < 0 ||
	    v05_producer_push(w, d[0].key, d[0].gen, 1, -1.0f) < 0)
		return fail("v05_producer_push");
	if (v05_wait(p, 5000) != 1 || (n = v05_poll(p, d, 8)) != 1 ||
	    d[0].kind != V05_DECISION_FINAL)
		return fail("v05_poll");
	memset(&grp, GUARD, sizeof(grp));
	if (v05_group(p, d[0].slot, &grp.g) < 0 || grp.g.k != 2 ||
	    grp.g.rewards[0] != 1.0f)
		return fail("v05_group");
	if (!guard_ok(grp.after, sizeof(grp.after)))
		return fail("v05_group wrote past the group");
	if (v05_observer_open(name, 0, &o) < 0)
		return fail("v05_observer_open");
	memset(&inf, GUARD, sizeof(inf));
	if (v05_observer_info(o, &inf.i) < 0 || inf.i.k_max != 2)
		return fail("v05_observer_info");
	if (!guard_ok(inf.after, sizeof(inf.after)))
		return fail("v05_observer_info wrote past the info");
	memset(&lst, GUARD, sizeof(lst));
	if (v05_observer_lanes(o, lst.l, 2) != 2 || lst.l[0].applied +
	    lst.l[1].applied != 2)
		return fail("v05_observer_lanes");
	if (!guard_ok(lst.after, sizeof(lst.after)))
		return fail("v05_observer_lanes wrote past the array");
	v05_observer_close(o);
	v05_producer_close(w);
	if (v05_plugin_close(p, V05_CLOSE_UNLINK) < 0)
		return fail("v05_plugin_close");
	printf("header %s library %s ok\n", V05_VERSION_STRING, v05_version());
	return 0;
}
