/* SPDX-License-Identifier: MIT */
/*
 * The rule table: one row per mode (enum v05_mode, include/v05/stats.h),
 * each defined in its rule's own file (rule.h says what a row holds).
 * A new mode is one line here.
 */
#include "rule.h"

/* mode, row (v05__rule_<row>, defined in rule_*.c) */
#define V05__RULES(X)                             \
	X(V05_MODE_V05, v05)                      \
	X(V05_MODE_V05_FIXED, v05_fixed)          \
	X(V05_MODE_GRPO, grpo)                    \
	X(V05_MODE_DAPO, dapo)                    \
	X(V05_MODE_V05_EB, eb)                    \
	X(V05_MODE_ADA, ada)                      \
	X(V05_MODE_ADA_POS, ada_pos)              \
	X(V05_MODE_KNAPSACK_PRIOR, knapsack_prior) \
	X(V05_MODE_KNAPSACK, knapsack)            \
	X(V05_MODE_GRESO, greso)                  \
	X(V05_MODE_EBPO, ebpo)                    \
	X(V05_MODE_PILOT_COMMIT, pc)              \
	X(V05_MODE_PG, pg)

#define DECLARE(mode, row) extern const struct v05__rule v05__rule_##row;
V05__RULES(DECLARE)
#undef DECLARE

#define ROW(mode, row) [mode] = &v05__rule_##row,
static const struct v05__rule *const rules[V05_MODE_COUNT] = {
	V05__RULES(ROW)
};
#undef ROW

/* Every mode has its row: a mode left out of V05__RULES would leave a
 * NULL, which no caller expects for a mode below V05_MODE_COUNT. */
#define ONE(mode, row) +1
static_assert(0 V05__RULES(ONE) == V05_MODE_COUNT,
	      "one row per mode of enum v05_mode");
#undef ONE

const struct v05__rule *v05__rule_of(uint32_t mode)
{
	return mode < V05_MODE_COUNT ? rules[mode] : NULL;
}
