/* SPDX-License-Identifier: MIT */
/*
 * ABI discipline (docs/PACKAGING.md, "One version series"): the library
 * never writes a caller's config past the size the caller said it has
 * (v05_config_init refuses a size below V05_CONFIG_SIZE_MIN writing
 * nothing; the exported v05_config_default writes exactly that minimum);
 * a config from a later header (larger) is taken when its unknown bytes
 * are 0 and refused with -E2BIG otherwise; v05_abi() describes each public
 * struct at the size this program was compiled with; reserved words come
 * back 0.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/plugin_fx.h"
#include "util/seg.h"
#include "v05.h"

#define GUARD 0xa5

/* A config inside a buffer of guard bytes: nothing may touch them. */
struct guarded {
	uint8_t before[64];
	union {
		struct v05_config c;
		uint8_t bytes[512];
	} u;
};

static void guard(struct guarded *g)
{
	memset(g, GUARD, sizeof(*g));
}

static void assert_untouched(const struct guarded *g, size_t from)
{
	for (size_t i = 0; i < sizeof(g->before); i++)
		assert_int_equal(g->before[i], GUARD);
	for (size_t i = from; i < sizeof(g->u.bytes); i++)
		assert_int_equal(g->u.bytes[i], GUARD);
}

static void test_init_writes_only_size(void **state)
{
	struct guarded g;

	(void)state;
	/* Too small: refused, nothing written. */
	guard(&g);
	assert_int_equal(v05_config_init(&g.u.c, V05_CONFIG_SIZE_MIN - 8, 0),
			 -EINVAL);
	assert_untouched(&g, 0);
	assert_int_equal(v05_config_init(&g.u.c, sizeof(g.u.c), 1u << 7),
			 -EINVAL);
	assert_untouched(&g, 0);
	/* The exported function: exactly the soname's minimum. */
	guard(&g);
	(v05_config_default)(&g.u.c);
	assert_untouched(&g, V05_CONFIG_SIZE_MIN);
	assert_int_equal(g.u.c.size, V05_CONFIG_SIZE_MIN);
	assert_int_equal(v05_config_check(&g.u.c), 0);
	guard(&g);
	(v05_config_paper)(&g.u.c);
	assert_untouched(&g, V05_CONFIG_SIZE_MIN);
	assert_int_equal(g.u.c.params.mode, V05_MODE_V05);
	/* A later header's larger config: this library's fields, then 0. */
	guard(&g);
	assert_int_equal(v05_config_init(&g.u.c, sizeof(g.u.c) + 40, 0), 0);
	assert_untouched(&g, sizeof(g.u.c) + 40);
	for (size_t i = sizeof(g.u.c); i < sizeof(g.u.c) + 40; i++)
		assert_int_equal(g.u.bytes[i], 0);
	assert_int_equal(g.u.c.size, sizeof(g.u.c) + 40);
	/* The macro passes the caller's own size. */
	guard(&g);
	v05_config_default(&g.u.c);
	assert_untouched(&g, sizeof(g.u.c));
	assert_int_equal(g.u.c.size, sizeof(g.u.c));
}

static void test_later_config(void **state)
{
	struct guarded g;
	struct v05_plugin *p;
	char name[64];

	(void)state;
	test_name(name, sizeof(name), "abi");
	guard(&g);
	assert_int_equal(v05_config_init(&g.u.c, sizeof(g.u.c) + 16, 0), 0);
	g.u.c.max_prompts = 8;
	/* Unknown fields at 0: taken, as this library's defaults. */
	assert_int_equal(v05_config_check(&g.u.c), 0);
	assert_int_equal(v05_plugin_create(name, &g.u.c, &p), 0);
	assert_int_equal(v05_plugin_close(p, V05_CLOSE_UNLINK), 0);
	/* One of them set: a later release's field this one cannot honour. */
	g.u.bytes[sizeof(g.u.c) + 9] = 1;
	assert_int_equal(v05_config_check(&g.u.c), -E2BIG);
	assert_non_null(strstr(v05_errmsg(), "later release"));
	assert_int_equal(v05_plugin_create(name, &g.u.c, &p), -E2BIG);
	/* A size no caller of this soname has. */
	g.u.c.size = 96;
	assert_int_equal(v05_config_check(&g.u.c), -EINVAL);
	assert_int_equal(v05_config_mode(&g.u.c, V05_MODE_GRPO), -EINVAL);
	assert_int_equal(v05_plugin_create(name, &g.u.c, &p), -EINVAL);
}

/* Each struct's line in v05_abi(): "S name size". */
static size_t abi_size(const char *text, const char *name)
{
	char key[64];
	const char *at;
	size_t size = 0;

	snprintf(key, sizeof(key), "\nS %s ", name);
	at = strstr(text, key);
	assert_non_null(at);
	assert_int_equal(sscanf(at + strlen(key), "%zu", &size), 1);
	return size;
}

static void test_abi_text(void **state)
{
	const char *t = v05_abi();
	char first[64];

	(void)state;
	snprintf(first, sizeof(first), "V %s\n", V05_VERSION_STRING);
	assert_int_equal(strncmp(t, first, strlen(first)), 0);
	assert_string_equal(v05_version(), V05_VERSION_STRING);
	assert_int_equal(abi_size(t, "v05_params"), sizeof(struct v05_params));
	assert_int_equal(abi_size(t, "v05_estimate"), sizeof(struct v05_estimate));
	assert_int_equal(abi_size(t, "v05_eb_fit"), sizeof(struct v05_eb_fit));
	assert_int_equal(abi_size(t, "v05_eb_state"), sizeof(struct v05_eb_state));
	assert_int_equal(abi_size(t, "v05_config"), sizeof(struct v05_config));
	assert_int_equal(abi_size(t, "v05_prompt_in"), sizeof(struct v05_prompt_in));
	assert_int_equal(abi_size(t, "v05_decision"), sizeof(struct v05_decision));
	assert_int_equal(abi_size(t, "v05_group"), sizeof(struct v05_group));
	assert_int_equal(abi_size(t, "v05_support"), sizeof(struct v05_support));
	assert_int_equal(abi_size(t, "v05_reward"), sizeof(struct v05_reward));
	assert_int_equal(abi_size(t, "v05_observer_info"),
			 sizeof(struct v05_observer_info));
	assert_int_equal(abi_size(t, "v05_lane_stat"), sizeof(struct v05_lane_stat));
	assert_int_equal(abi_size(t, "v05_knapsack_hist"),
			 sizeof(struct v05_knapsack_hist));
	assert_int_equal(abi_size(t, "v05_greso_prompt"),
			 sizeof(struct v05_greso_prompt));
	assert_int_equal(abi_size(t, "v05_greso"), sizeof(struct v05_greso));
	assert_non_null(strstr(t, "\nS v05_config 296 tagged\n"));
	assert_non_null(strstr(t, "\nF v05_group keep 104 8 uint64_t\n"));
	assert_ptr_equal(v05_abi(), t); /* one static string */
}

/* Reserved words are written 0, whatever the caller's memory held. */
static void test_reserved_zero(void **state)
{
	struct fx f;
	struct v05_observer *o;
	struct v05_observer_info info;
	struct v05_lane_stat ls[2];
	struct v05_group g;
	double prior = 0.0;
	float r[64];
	uint64_t key;

	(void)state;
	memset(&f, 0, sizeof(f));
	fx_config(&f);
	f.c.params.mode = V05_MODE_GRPO;
	f.c.params.k_init = f.c.params.k_max = 4;
	fx_open(&f);
	for (uint32_t i = 0; i < 64; i++)
		r[i] = i % 2 ? 1.0f : -1.0f;
	assert_int_equal(submit(&f, &prior, 1, &key), 1);
	push_samples(&f, key, f.d[0].samples, r);
	assert_int_equal(v05_wait(f.p, 5000), 1);
	assert_int_equal(v05_poll(f.p, f.d, MAXD), 1);
	memset(&g, 0xff, sizeof(g));
	assert_int_equal(v05_group(f.p, f.d[0].slot, &g), 0);
	assert_true(g.reserved[0] == 0 && g.reserved[1] == 0);
	assert_int_equal(v05_observer_open(f.name, 0, &o), 0);
	memset(&info, 0xff, sizeof(info));
	assert_int_equal(v05_observer_info(o, &info), 0);
	for (size_t i = 0; i < sizeof(info.reserved2) / sizeof(info.reserved2[0]); i++)
		assert_int_equal(info.reserved2[i], 0);
	memset(ls, 0xff, sizeof(ls));
	assert_int_equal(v05_observer_lanes(o, ls, 2), 2);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(ls[1].reserved[i], 0);
	assert_int_equal(v05_observer_close(o), 0);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_writes_only_size),
		cmocka_unit_test(test_later_config),
		cmocka_unit_test(test_abi_text),
		cmocka_unit_test(test_reserved_zero),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
