/* SPDX-License-Identifier: MIT */
/*
 * The public structs' layouts, pinned: language bindings (engine-hooks/v05
 * mirrors them with ctypes and checks the same numbers) depend on them, so
 * a change here must be a deliberate ABI change.
 */
#include <assert.h>
#include <stddef.h>

#include "v05/observer.h"
#include "v05/plugin.h"
#include "v05/shm.h"
#include "v05/stats.h"

/* 32: sigma and reserved were added for the bounded normaliser. */
static_assert(sizeof(struct v05_params) == 32, "v05_params ABI");
static_assert(sizeof(struct v05_estimate) == 64, "v05_estimate ABI");
/* 240: the broker's allow-list and the lane cut-off (segment ABI 5).
 * 256: v05-eb's forgetting window, cold start and early start (ABI 6).
 * 280: Pilot-Commit's band, EBPO's window (ABI 8). */
static_assert(sizeof(struct v05_config) == 280, "v05_config ABI");
static_assert(offsetof(struct v05_config, journal_path) == 88, "v05_config ABI");
static_assert(offsetof(struct v05_config, broker_uids) == 96 &&
	      offsetof(struct v05_config, n_broker_uids) == 224 &&
	      offsetof(struct v05_config, lane_cut_records) == 232 &&
	      offsetof(struct v05_config, eb_window) == 240 &&
	      offsetof(struct v05_config, pc_lower) == 256,
	      "v05_config ABI");
static_assert(sizeof(struct v05_prompt_in) == 24, "v05_prompt_in ABI");
static_assert(sizeof(struct v05_decision) == 64, "v05_decision ABI");
/* 112: the keep mask (reinforce-ada). */
static_assert(sizeof(struct v05_group) == 112, "v05_group ABI");
static_assert(sizeof(struct v05_support) == 16, "v05_support ABI");
/* 24: gen names the prompt instance (segment ABI 4). */
static_assert(sizeof(struct v05_reward) == 24, "v05_reward ABI");
static_assert(offsetof(struct v05_reward, gen) == 8, "v05_reward ABI");
/* 936, 80: the broker's allow-list and refusals, the lanes' accounting and
 * cut-off (segment ABI 5). */
static_assert(sizeof(struct v05_observer_info) == 936, "v05_observer_info ABI");
static_assert(offsetof(struct v05_observer_info, journal_error) == 136,
	      "v05_observer_info ABI");
static_assert(offsetof(struct v05_observer_info, broker) == 776 &&
	      offsetof(struct v05_observer_info, broker_refused_uid) == 916,
	      "v05_observer_info ABI");
static_assert(sizeof(struct v05_lane_stat) == 80, "v05_lane_stat ABI");
static_assert(sizeof(struct v05_eb_state) == 5968, "v05_eb_state ABI");
static_assert(sizeof(struct v05_ebpo) == 48, "v05_ebpo ABI");
static_assert(offsetof(struct v05_lane_stat, cut) == 56, "v05_lane_stat ABI");
