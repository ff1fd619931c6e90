/* SPDX-License-Identifier: MIT */
/*
 * v05_abi(): the library's own account of its public structs, every
 * field's offset, size and type, for whoever mirrors them: the Python
 * binding compares its ctypes mirrors with it at import and refuses a
 * library that differs (engine-hooks/v05/core/_lib.py), and
 * tests/check_abi.py compares it with the committed description
 * (abi/v05-VERSION.abi) and with the library's DWARF, so a field left out
 * of the table below fails there (docs/PACKAGING.md, "One version
 * series").
 */
#include <assert.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "v05.h"

/* The smallest config a caller of this soname can have (plugin.h). */
static_assert(sizeof(struct v05_config) >= V05_CONFIG_SIZE_MIN,
	      "v05_config shrank");
static_assert(offsetof(struct v05_config, reserved_rules) + 4 ==
		      V05_CONFIG_SIZE_MIN,
	      "V05_CONFIG_SIZE_MIN is 0.5.0's v05_config");

struct field {
	const char *st;   /* struct name; name NULL: the struct itself, type
			   * "tagged" if size-tagged (v05_config: plugin.h) */
	const char *name; /* field name                                  */
	size_t off, size;
	const char *type; /* as C spells it, arrays as T[N]              */
};

#define S(T) { #T, NULL, 0, sizeof(struct T), NULL }
#define S_TAGGED(T) { #T, NULL, 0, sizeof(struct T), "tagged" }
#define F(T, f, type) \
	{ #T, #f, offsetof(struct T, f), sizeof(((struct T *)0)->f), type }

static const struct field fields[] = {
	S(v05_params),
	F(v05_params, cost, "double"),
	F(v05_params, k_init, "uint32_t"),
	F(v05_params, k_step, "uint32_t"),
	F(v05_params, k_max, "uint32_t"),
	F(v05_params, mode, "uint32_t"),
	F(v05_params, sigma, "uint32_t"),
	F(v05_params, keep_n, "uint32_t"),

	S(v05_estimate),
	F(v05_estimate, k, "uint32_t"),
	F(v05_estimate, action, "uint32_t"),
	F(v05_estimate, has_target, "bool"),
	F(v05_estimate, mean, "double"),
	F(v05_estimate, delta2, "double"),
	F(v05_estimate, weight, "double"),
	F(v05_estimate, baseline, "double"),
	F(v05_estimate, sigma, "double"),
	F(v05_estimate, k_target, "double"),

	S(v05_eb_fit),
	F(v05_eb_fit, n0, "double"),
	F(v05_eb_fit, h, "double"),
	F(v05_eb_fit, a2, "double"),
	F(v05_eb_fit, b2, "double"),

	S(v05_eb_state),
	F(v05_eb_state, ll, "double[12][16][12]"),
	F(v05_eb_state, pop, "double[12]"),
	F(v05_eb_state, weight, "double"),
	F(v05_eb_state, folded, "uint64_t"),

	S_TAGGED(v05_config),
	F(v05_config, size, "uint32_t"),
	F(v05_config, params, "struct v05_params"),
	F(v05_config, halt_fraction, "double"),
	F(v05_config, pad_multiple, "uint32_t"),
	F(v05_config, schedule, "uint32_t"),
	F(v05_config, stream_deadline_us, "uint32_t"),
	F(v05_config, max_prompts, "uint32_t"),
	F(v05_config, max_producers, "uint32_t"),
	F(v05_config, lane_capacity, "uint32_t"),
	F(v05_config, max_batches, "uint32_t"),
	F(v05_config, file_mode, "uint32_t"),
	F(v05_config, flags, "uint32_t"),
	F(v05_config, journal_sync, "uint32_t"),
	F(v05_config, journal_path, "const char*"),
	F(v05_config, broker_uids, "uint32_t[16]"),
	F(v05_config, broker_gids, "uint32_t[16]"),
	F(v05_config, n_broker_uids, "uint32_t"),
	F(v05_config, n_broker_gids, "uint32_t"),
	F(v05_config, lane_cut_records, "uint32_t"),
	F(v05_config, lane_cut_permille, "uint32_t"),
	F(v05_config, eb_window, "uint32_t"),
	F(v05_config, eb_cold, "uint32_t"),
	F(v05_config, eb_early, "uint32_t"),
	F(v05_config, eb_first, "uint32_t"),
	F(v05_config, pc_lower, "double"),
	F(v05_config, pc_upper, "double"),
	F(v05_config, ebpo_window, "uint32_t"),
	F(v05_config, reserved_rules, "uint32_t"),
	F(v05_config, pg_between, "double"),
	F(v05_config, pg_first, "uint32_t"),
	F(v05_config, pg_skip, "uint32_t"),

	S(v05_prompt_in),
	F(v05_prompt_in, uid, "const void*"),
	F(v05_prompt_in, uid_len, "uint32_t"),
	F(v05_prompt_in, prior, "double"),

	S(v05_decision),
	F(v05_decision, key, "uint64_t"),
	F(v05_decision, samples, "uint64_t"),
	F(v05_decision, batch, "uint64_t"),
	F(v05_decision, latency_ns, "uint64_t"),
	F(v05_decision, baseline, "double"),
	F(v05_decision, kind, "uint32_t"),
	F(v05_decision, slot, "uint32_t"),
	F(v05_decision, k, "uint32_t"),
	F(v05_decision, flags, "uint32_t"),
	F(v05_decision, gen, "uint32_t"),
	F(v05_decision, reserved, "uint32_t"),

	S(v05_group),
	F(v05_group, key, "uint64_t"),
	F(v05_group, seq, "uint64_t"),
	F(v05_group, batch, "uint64_t"),
	F(v05_group, rewards, "const float*"),
	F(v05_group, advantages, "const float*"),
	F(v05_group, uid, "const uint8_t*"),
	F(v05_group, prior, "double"),
	F(v05_group, baseline, "double"),
	F(v05_group, sigma, "double"),
	F(v05_group, mean, "double"),
	F(v05_group, slot, "uint32_t"),
	F(v05_group, gen, "uint32_t"),
	F(v05_group, k, "uint32_t"),
	F(v05_group, action, "uint32_t"),
	F(v05_group, uid_len, "uint32_t"),
	F(v05_group, keep, "uint64_t"),
	F(v05_group, reserved, "uint64_t[2]"),

	S(v05_support),
	F(v05_support, key, "uint64_t"),
	F(v05_support, mean, "float"),
	F(v05_support, k, "uint32_t"),

	S(v05_reward),
	F(v05_reward, key, "uint64_t"),
	F(v05_reward, gen, "uint32_t"),
	F(v05_reward, sample, "uint32_t"),
	F(v05_reward, reward, "float"),
	F(v05_reward, reserved, "uint32_t"),

	S(v05_observer_info),
	F(v05_observer_info, size_bytes, "uint64_t"),
	F(v05_observer_info, created_ns, "uint64_t"),
	F(v05_observer_info, heartbeat_age_ns, "uint64_t"),
	F(v05_observer_info, last_seq, "uint64_t"),
	F(v05_observer_info, journal_durable_seq, "uint64_t"),
	F(v05_observer_info, journal_offset, "uint64_t"),
	F(v05_observer_info, cost, "double"),
	F(v05_observer_info, halt_fraction, "double"),
	F(v05_observer_info, owner_pid, "uint32_t"),
	F(v05_observer_info, owner_alive, "uint32_t"),
	F(v05_observer_info, creator_uid, "uint32_t"),
	F(v05_observer_info, wait_path, "uint32_t"),
	F(v05_observer_info, journal_state, "uint32_t"),
	F(v05_observer_info, journal_errno, "int32_t"),
	F(v05_observer_info, lanes, "uint32_t"),
	F(v05_observer_info, lane_capacity, "uint32_t"),
	F(v05_observer_info, slots, "uint32_t"),
	F(v05_observer_info, k_max, "uint32_t"),
	F(v05_observer_info, batches, "uint32_t"),
	F(v05_observer_info, mode, "uint32_t"),
	F(v05_observer_info, schedule, "uint32_t"),
	F(v05_observer_info, k_init, "uint32_t"),
	F(v05_observer_info, k_step, "uint32_t"),
	F(v05_observer_info, pad_multiple, "uint32_t"),
	F(v05_observer_info, asym_doorbell, "uint32_t"),
	F(v05_observer_info, reserved, "uint32_t"),
	F(v05_observer_info, journal_error, "char[160]"),
	F(v05_observer_info, journal_path, "char[480]"),
	F(v05_observer_info, broker, "uint32_t"),
	F(v05_observer_info, n_broker_uids, "uint32_t"),
	F(v05_observer_info, n_broker_gids, "uint32_t"),
	F(v05_observer_info, broker_uids, "uint32_t[16]"),
	F(v05_observer_info, broker_gids, "uint32_t[16]"),
	F(v05_observer_info, broker_refused_uid, "uint32_t"),
	F(v05_observer_info, broker_refused_gid, "uint32_t"),
	F(v05_observer_info, lane_cut_records, "uint32_t"),
	F(v05_observer_info, lane_cut_permille, "uint32_t"),
	F(v05_observer_info, reserved2, "uint32_t[23]"),

	S(v05_lane_stat),
	F(v05_lane_stat, owner_pid, "uint32_t"),
	F(v05_lane_stat, owner_alive, "uint32_t"),
	F(v05_lane_stat, fill, "uint32_t"),
	F(v05_lane_stat, high_water, "uint32_t"),
	F(v05_lane_stat, consumed, "uint64_t"),
	F(v05_lane_stat, claims, "uint64_t"),
	F(v05_lane_stat, applied, "uint64_t"),
	F(v05_lane_stat, rejected, "uint64_t"),
	F(v05_lane_stat, discarded, "uint64_t"),
	F(v05_lane_stat, cut, "uint32_t"),
	F(v05_lane_stat, cut_pid, "uint32_t"),
	F(v05_lane_stat, cuts, "uint32_t"),
	F(v05_lane_stat, cut_records, "uint32_t"),
	F(v05_lane_stat, cut_rejected, "uint32_t"),
	F(v05_lane_stat, reserved, "uint32_t[5]"),

	S(v05_prompt_view),
	F(v05_prompt_view, key, "uint64_t"),
	F(v05_prompt_view, issued, "uint64_t"),
	F(v05_prompt_view, received, "uint64_t"),
	F(v05_prompt_view, gen, "uint32_t"),
	F(v05_prompt_view, state, "uint32_t"),
	F(v05_prompt_view, reserved, "uint64_t[2]"),

	S(v05_knapsack_hist),
	F(v05_knapsack_hist, epoch, "uint64_t"),
	F(v05_knapsack_hist, window, "uint32_t"),
	F(v05_knapsack_hist, filled, "uint32_t"),
	F(v05_knapsack_hist, seen, "uint32_t"),
	F(v05_knapsack_hist, last_n, "uint32_t"),
	F(v05_knapsack_hist, last_s, "uint32_t"),
	F(v05_knapsack_hist, reserved, "uint32_t"),

	S(v05_ebpo),
	F(v05_ebpo, weight, "double"),
	F(v05_ebpo, mean, "double"),
	F(v05_ebpo, m2, "double"),
	F(v05_ebpo, within, "double"),
	F(v05_ebpo, noise, "double"),
	F(v05_ebpo, groups, "uint64_t"),

	S(v05_pc_prompt),
	F(v05_pc_prompt, epoch, "uint64_t"),
	F(v05_pc_prompt, last, "uint32_t"),
	F(v05_pc_prompt, seen, "uint32_t"),

	S(v05_greso_prompt),
	F(v05_greso_prompt, z, "uint32_t"),
	F(v05_greso_prompt, kind, "uint32_t"),

	S(v05_greso),
	F(v05_greso, p_easy, "double"),
	F(v05_greso, p_hard, "double"),
	F(v05_greso, seed, "uint64_t"),
	F(v05_greso, total, "uint64_t"),
	F(v05_greso, easy, "uint64_t"),
	F(v05_greso, hard, "uint64_t"),
};

/* About 150 lines of at most 80 characters. */
static char text[16384];
static pthread_once_t text_once = PTHREAD_ONCE_INIT;

static void text_make(void)
{
	size_t at = 0;

	at += (size_t)snprintf(text + at, sizeof(text) - at, "V %s\n",
			       v05_version());
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		const struct field *f = &fields[i];

		if (!f->name)
			at += (size_t)snprintf(text + at, sizeof(text) - at,
					       "S %s %zu%s%s\n", f->st, f->size,
					       f->type ? " " : "",
					       f->type ? f->type : "");
		else
			at += (size_t)snprintf(text + at, sizeof(text) - at,
					       "F %s %s %zu %zu %s\n", f->st,
					       f->name, f->off, f->size,
					       f->type);
	}
}

/* pthread_once orders text_make's stores before every caller's reads. */
V05_API const char *v05_abi(void)
{
	pthread_once(&text_once, text_make);
	return text;
}
