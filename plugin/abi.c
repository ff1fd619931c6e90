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
static_assert(sizeof(struct v05_config) == 96, "v05_config ABI");
static_assert(offsetof(struct v05_config, journal_path) == 88, "v05_config ABI");
static_assert(sizeof(struct v05_prompt_in) == 24, "v05_prompt_in ABI");
static_assert(sizeof(struct v05_decision) == 64, "v05_decision ABI");
static_assert(sizeof(struct v05_group) == 104, "v05_group ABI");
static_assert(sizeof(struct v05_support) == 16, "v05_support ABI");
/* 24: gen names the prompt instance (segment ABI 4). */
static_assert(sizeof(struct v05_reward) == 24, "v05_reward ABI");
static_assert(offsetof(struct v05_reward, gen) == 8, "v05_reward ABI");
static_assert(sizeof(struct v05_observer_info) == 776, "v05_observer_info ABI");
static_assert(offsetof(struct v05_observer_info, journal_error) == 136,
	      "v05_observer_info ABI");
static_assert(sizeof(struct v05_lane_stat) == 32, "v05_lane_stat ABI");
