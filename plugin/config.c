/* SPDX-License-Identifier: MIT */
/* Configuration: defaults, the paper's exact settings, the checks, and its
 * copy in the segment header (written at create, checked at attach). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mechanics/internal.h"
#include "rules/rule.h"
#include "rules/stats_core.h"
#include "../shm/broker.h"
#include "../shm/error.h"

V05_API void v05_params_default(struct v05_params *p)
{
	p->cost = V05_DEFAULT_COST;
	p->k_init = V05_DEFAULT_K_INIT;
	p->k_step = V05_DEFAULT_K_STEP;
	p->k_max = V05_DEFAULT_K_MAX;
	p->mode = V05_MODE_V05;
	p->sigma = V05_SIGMA_RMS;
	p->keep_n = 0;
}

/* A mode's default cost: its row's, else V05_DEFAULT_COST. */
static double mode_cost(uint32_t mode)
{
	const struct v05__rule *r = v05__rule_of(mode);

	return r && r->cost > 0.0 ? r->cost : V05_DEFAULT_COST;
}

/*
 * A mode, its cost and its settings: what its rule's authors ran where
 * that differs (rules/rule_*.c: with them no padding and no halt, one
 * wave or rounds nothing may pad or cut short), else the library's own
 * (k 4/2/16, rms, pad 32, halt 0.25). Every field is written either way,
 * so a mode's config does not depend on the mode it replaces.
 */
static void mode_preset(struct v05_config *c, uint32_t mode)
{
	const struct v05__rule *r = v05__rule_of(mode);

	c->params.mode = mode;
	c->params.cost = mode_cost(mode);
	if (r->preset.k_init) {
		c->params.k_init = r->preset.k_init;
		c->params.k_step = r->preset.k_step;
		c->params.k_max = r->preset.k_max;
		c->params.sigma = r->preset.sigma;
		if (r->keep)
			c->params.keep_n = 0;
		c->pad_multiple = 1;
		c->halt_fraction = 0.0;
	} else {
		c->params.k_init = V05_DEFAULT_K_INIT;
		c->params.k_step = V05_DEFAULT_K_STEP;
		c->params.k_max = V05_DEFAULT_K_MAX;
		c->params.sigma = V05_SIGMA_RMS;
		c->pad_multiple = 32;
		c->halt_fraction = 0.25;
	}
}

/* The library's own config, whole: the defaults, or the paper's. */
static void defaults(struct v05_config *c, bool paper)
{
	memset(c, 0, sizeof(*c));
	c->size = sizeof(*c);
	v05_params_default(&c->params);
	c->eb_first = (1u << 2) | (1u << 4);
	c->schedule = V05_SCHEDULE_STREAM;
	c->stream_deadline_us = 2000;
	c->eb_window = 512;
	c->eb_cold = 64;
	c->pc_lower = V05_PC_LOWER;
	c->pc_upper = V05_PC_UPPER;
	c->pg_between = V05_PG_BETWEEN;
	c->pg_first = V05_PG_FIRST;
	c->pg_skip = V05_PG_SKIP;
	c->max_prompts = 4096;
	c->max_producers = 16;
	c->lane_capacity = 4096;
	c->max_batches = 64;
	c->file_mode = 0600;
	c->journal_sync = V05_JOURNAL_SYNC_NONE;
	/* docs/RULES.md, "Which mode for training", has why v05-pg (and
	 * docs/STATISTICS.md, "Defaults, from the measurements", when the
	 * baseline itself is what is wanted: v05-eb). */
	mode_preset(c, paper ? V05_MODE_V05 : V05_MODE_PG);
	if (paper) {
		c->params.sigma = V05_SIGMA_PAPER;
		c->schedule = V05_SCHEDULE_ROUNDS;
	}
}

/* A caller's config is never written past the size it says it has. */
V05_API int v05_config_init(struct v05_config *c, size_t size,
			    unsigned flags)
{
	struct v05_config full;

	v05__clear_error();
	if (!c)
		return v05__fail(-EINVAL, "config_init: NULL config");
	if (size < V05_CONFIG_SIZE_MIN || size > 65536)
		return v05__fail(-EINVAL,
				 "config_init: size %zu is not a v05_config's (%u to 65536 bytes; this library's is %zu)",
				 size, V05_CONFIG_SIZE_MIN, sizeof(full));
	if (flags & ~V05_CONFIG_INIT_PAPER)
		return v05__fail(-EINVAL, "config_init: unknown flags 0x%x", flags);
	defaults(&full, flags & V05_CONFIG_INIT_PAPER);
	if (size <= sizeof(full)) {
		memcpy(c, &full, size);
	} else {
		memcpy(c, &full, sizeof(full));
		memset((uint8_t *)c + sizeof(full), 0, size - sizeof(full));
	}
	c->size = (uint32_t)size;
	return 0;
}

/* The exported functions (for a binding that calls them by name): the
 * size every caller of this soname has. Parenthesised: the header's
 * macros of the same names pass the caller's own size. */
V05_API void (v05_config_default)(struct v05_config *c)
{
	v05_config_init(c, V05_CONFIG_SIZE_MIN, 0);
}

V05_API void (v05_config_paper)(struct v05_config *c)
{
	v05_config_init(c, V05_CONFIG_SIZE_MIN, V05_CONFIG_INIT_PAPER);
}

/*
 * The caller's config of c->size bytes as this library's (openat2's and
 * clone3's rule): an earlier header's, smaller, gets the defaults for the
 * fields it lacks; a later header's, larger, is taken when every byte this
 * library does not know is 0 (the later fields at their defaults).
 */
int v05__config_load(const struct v05_config *c, struct v05_config *full)
{
	const uint8_t *b = (const uint8_t *)c;

	if (!c)
		return v05__fail(-EINVAL, "config: NULL");
	if (c->size < V05_CONFIG_SIZE_MIN || c->size > 65536)
		return v05__fail(-EINVAL,
				 "config size %u is not a v05_config's (%u to 65536 bytes; this library's is %zu): fill it with v05_config_init or v05_config_default",
				 c->size, V05_CONFIG_SIZE_MIN, sizeof(*full));
	for (size_t i = sizeof(*full); i < c->size; i++)
		if (b[i])
			return v05__fail(-E2BIG,
					 "config byte %zu is set, past the %zu bytes of this library's (%s): its fields there are a later release's",
					 i, sizeof(*full), v05_version());
	defaults(full, false);
	memcpy(full, c, c->size < sizeof(*full) ? c->size : sizeof(*full));
	full->size = sizeof(*full);
	return 0;
}

V05_API int v05_config_mode(struct v05_config *c, uint32_t mode)
{
	const struct v05__rule *r = v05__rule_of(mode);

	if (!c)
		return v05__fail(-EINVAL, "config: NULL");
	/* Every field written here is in the V05_CONFIG_SIZE_MIN bytes. */
	if (c->size < V05_CONFIG_SIZE_MIN || c->size > 65536)
		return v05__fail(-EINVAL,
				 "config size %u is not a v05_config's: fill it with v05_config_init first",
				 c->size);
	if (!r)
		return v05__fail(-EINVAL, "mode %u is unknown", mode);
	mode_preset(c, mode);
	return 0;
}

/* eb_first, for a rule that chooses its first wave from it (others
 * ignore it): sizes 1 to k_max (bit k: k samples). */
static int first_check(const struct v05_config *c, const struct v05__rule *rule)
{
	uint32_t w = c->eb_first;

	if (!(rule->flags & V05__RULE_FIRST) || !w)
		return 0;
	if ((w & 1u) || (c->params.k_max < 31 && (w >> (c->params.k_max + 1))))
		return v05__fail(-EINVAL,
				 "eb_first 0x%x: its first waves (bit k: k samples) must be in [1, k_max = %u]",
				 w, c->params.k_max);
	return 0;
}

/* The broker's allow-list and the lane cut-off. */
static int broker_check(const struct v05_config *c)
{
	bool broker = (c->flags & V05_CONFIG_PRODUCER_BROKER) != 0;
	uint32_t ovf_uid, ovf_gid;

	if (c->n_broker_uids > V05_BROKER_ALLOW_MAX ||
	    c->n_broker_gids > V05_BROKER_ALLOW_MAX)
		return v05__fail(-EINVAL,
				 "n_broker_uids %u / n_broker_gids %u: at most %u each",
				 c->n_broker_uids, c->n_broker_gids,
				 V05_BROKER_ALLOW_MAX);
	/* An empty list would be "anyone on the host": the owner names who
	 * may push its rewards, or runs no broker. */
	if (broker && !c->n_broker_uids && !c->n_broker_gids)
		return v05__fail(-EINVAL,
				 "broker_uids and broker_gids are both empty: a producer broker (V05_CONFIG_PRODUCER_BROKER) admits only the uids and gids its owner lists");
	if (!broker && (c->n_broker_uids || c->n_broker_gids))
		return v05__fail(-EINVAL,
				 "broker_uids / broker_gids given without V05_CONFIG_PRODUCER_BROKER: no broker would use them");
	for (uint32_t i = 0; i < c->n_broker_uids; i++)
		if (c->broker_uids[i] == UINT32_MAX)
			return v05__fail(-EINVAL, "broker_uids[%u] is -1, not a uid", i);
	for (uint32_t i = 0; i < c->n_broker_gids; i++)
		if (c->broker_gids[i] == UINT32_MAX)
			return v05__fail(-EINVAL, "broker_gids[%u] is -1, not a gid", i);
	/* The overflow id is every user another user namespace does not map:
	 * listing it admits them all, so only with a flag that says so. */
	v05__overflow_ids(&ovf_uid, &ovf_gid);
	if (!(c->flags & V05_CONFIG_BROKER_OVERFLOW_IDS)) {
		for (uint32_t i = 0; i < c->n_broker_uids; i++)
			if (c->broker_uids[i] == ovf_uid || c->broker_uids[i] == 65534)
				return v05__fail(-EINVAL,
						 "broker_uids[%u] is %u, the kernel's overflow uid: in a user namespace every unmapped user looks like it; list it only with V05_CONFIG_BROKER_OVERFLOW_IDS (Python: broker_overflow_ids=True)",
						 i, c->broker_uids[i]);
		for (uint32_t i = 0; i < c->n_broker_gids; i++)
			if (c->broker_gids[i] == ovf_gid || c->broker_gids[i] == 65534)
				return v05__fail(-EINVAL,
						 "broker_gids[%u] is %u, the kernel's overflow gid: in a user namespace every unmapped group looks like it; list it only with V05_CONFIG_BROKER_OVERFLOW_IDS (Python: broker_overflow_ids=True)",
						 i, c->broker_gids[i]);
	} else if (!broker) {
		return v05__fail(-EINVAL,
				 "V05_CONFIG_BROKER_OVERFLOW_IDS without V05_CONFIG_PRODUCER_BROKER: no broker would use it");
	}
	if (c->lane_cut_permille > 1000)
		return v05__fail(-EINVAL,
				 "lane_cut_permille %u is above 1000 (1000: never cut a lane off)",
				 c->lane_cut_permille);
	return 0;
}

/* Pilot-Commit's band, EBPO's window, and the mode's own checks. */
static int rules_check(const struct v05_config *c)
{
	const struct v05__rule *r = v05__rule_of(c->params.mode);

	if (!(c->pc_lower >= 0.0 && c->pc_lower <= 1.0) ||
	    !(c->pc_upper >= 0.0 && c->pc_upper <= 1.0))
		return v05__fail(-EINVAL,
				 "pc_lower %g / pc_upper %g: each in [0, 1]",
				 c->pc_lower, c->pc_upper);
	if (c->pc_lower > 1.0 - c->pc_upper)
		return v05__fail(-EINVAL,
				 "pc_lower %g is above 1 - pc_upper %g: the band commits nothing",
				 c->pc_lower, 1.0 - c->pc_upper);
	if (c->ebpo_window > 1000000000u)
		return v05__fail(-EINVAL, "ebpo_window %u is above 10^9 groups",
				 c->ebpo_window);
	if (c->reserved_rules)
		return v05__fail(-EINVAL,
				 "reserved_rules is %u, not 0 (a field kept for a later release)",
				 c->reserved_rules);
	if (!isfinite(c->pg_between) || c->pg_between < 0.0 ||
	    c->pg_between > 1000.0)
		return v05__fail(-EINVAL, "pg_between %g is not in [0, 1000]",
				 c->pg_between);
	if (!c->pg_first || (c->pg_first & 1u))
		return v05__fail(-EINVAL,
				 "pg_first 0x%x: set bit n for a first wave of n samples, n >= 1",
				 c->pg_first);
	if (c->pg_skip > 1000)
		return v05__fail(-EINVAL, "pg_skip %u is not a per-mille in [0, 1000]",
				 c->pg_skip);
	return r->check_config ? r->check_config(r, c) : 0;
}

/* The cut-off's defaults (docs/SHM.md, "Cutting a lane off"): a claim is
 * judged on at least four times the rewards the segment can have
 * outstanding at once, the most of an honest producer's rewards one cancel
 * can make late. */
static uint32_t cut_records_default(const struct v05_config *c)
{
	uint64_t n = 4ull * c->max_prompts * c->params.k_max;

	return n < 4096 ? 4096 : n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

V05_API int v05_config_check(const struct v05_config *in)
{
	struct v05_config full, *c = &full;
	const struct v05__rule *rule;
	int ret;

	ret = v05__config_load(in, &full);
	if (ret)
		return ret;
	ret = v05_params_check(&c->params);
	if (ret)
		return ret;
	rule = v05__rule_of(c->params.mode);
	if (!isfinite(c->halt_fraction) || c->halt_fraction < 0.0 ||
	    c->halt_fraction > 1.0)
		return v05__fail(-EINVAL, "halt_fraction %g is not in [0, 1]",
				 c->halt_fraction);
	if (c->pad_multiple < 1 || c->pad_multiple > 65536)
		return v05__fail(-EINVAL, "pad_multiple %u is not in [1, 65536]",
				 c->pad_multiple);
	if (c->schedule > V05_SCHEDULE_STREAM)
		return v05__fail(-EINVAL, "schedule %u is unknown", c->schedule);
	if (c->eb_window > 1000000000u)
		return v05__fail(-EINVAL, "eb_window %u is above 10^9 first waves",
				 c->eb_window);
	if (c->eb_cold < 1 || c->eb_cold > 1000000u)
		return v05__fail(-EINVAL, "eb_cold %u is not in [1, 10^6] first waves",
				 c->eb_cold);
	if (c->eb_early > 1000)
		return v05__fail(-EINVAL, "eb_early %u is not a per-mille in [0, 1000]",
				 c->eb_early);
	ret = first_check(c, rule);
	if (ret)
		return ret;
	if (c->eb_early && (!(rule->flags & V05__RULE_EARLY) ||
			    c->schedule != V05_SCHEDULE_STREAM))
		return v05__fail(-EINVAL,
				 "eb_early is v05-eb's early start under the stream schedule (no barrier); mode %s, schedule %s have none",
				 rule->name,
				 c->schedule == V05_SCHEDULE_STREAM ? "stream" : "rounds");
	if (c->eb_early && c->params.k_init + c->params.k_step > c->params.k_max)
		return v05__fail(-EINVAL, "eb_early needs k_init + k_step <= k_max");
	if (c->eb_early && (rule->flags & V05__RULE_FIRST) && c->eb_first &&
	    32u - (uint32_t)__builtin_clz(c->eb_first) - 1u + c->params.k_step >
		    c->params.k_max)
		return v05__fail(-EINVAL,
				 "eb_early needs each first wave of eb_first 0x%x + k_step <= k_max %u",
				 c->eb_first, c->params.k_max);
	ret = rules_check(c);
	if (ret)
		return ret;
	if ((rule->flags & V05__RULE_NO_PAD_HALT) &&
	    (c->pad_multiple != 1 || c->halt_fraction != 0.0))
		return v05__fail(-EINVAL,
				 "%s needs pad_multiple 1 and halt_fraction 0 (padding would add samples to its pool, a halt would cut its rounds short): v05_config_mode sets them",
				 rule->name);
	if (c->stream_deadline_us > 10000000u)
		return v05__fail(-EINVAL, "stream_deadline_us %u is above 10 s",
				 c->stream_deadline_us);
	if (c->max_prompts < 1 || c->max_prompts > V05_SLOTS_MAX)
		return v05__fail(-EINVAL, "max_prompts %u is not in [1, %u]",
				 c->max_prompts, V05_SLOTS_MAX);
	if (c->max_producers < 1 || c->max_producers > V05_LANES_MAX)
		return v05__fail(-EINVAL, "max_producers %u is not in [1, %u]",
				 c->max_producers, V05_LANES_MAX);
	if (c->lane_capacity < V05_LANE_CAP_MIN ||
	    c->lane_capacity > V05_LANE_CAP_MAX ||
	    (c->lane_capacity & (c->lane_capacity - 1)))
		return v05__fail(-EINVAL,
				 "lane_capacity %u is not a power of two in [%u, %u]",
				 c->lane_capacity, V05_LANE_CAP_MIN,
				 V05_LANE_CAP_MAX);
	if (c->max_batches < 1 || c->max_batches > V05_BATCHES_MAX)
		return v05__fail(-EINVAL, "max_batches %u is not in [1, %u]",
				 c->max_batches, V05_BATCHES_MAX);
	if ((c->file_mode & ~0777u) || (c->file_mode & 0600u) != 0600u)
		return v05__fail(-EINVAL,
				 "file_mode %o: must be within 0777 and let the owner read and write",
				 c->file_mode);
	/* Write access to the segment file is the whole segment: the owner
	 * word, every lane, the counters. Other users may read it (readers,
	 * v05ctl); producers of another uid come through the broker. */
	if (c->file_mode & 0022u)
		return v05__fail(-EINVAL,
				 "file_mode %o lets other users write the segment; it may let them read it at most (producers of another uid: V05_CONFIG_PRODUCER_BROKER)",
				 c->file_mode);
	if (c->flags & ~(V05_CONFIG_WAIT_THREAD | V05_CONFIG_EXTERNAL_HALT |
			 V05_CONFIG_PRODUCER_BROKER |
			 V05_CONFIG_BROKER_OVERFLOW_IDS |
			 V05_CONFIG_ABORT_RECORDS))
		return v05__fail(-EINVAL, "unknown config flags 0x%x", c->flags);
	if ((c->flags & V05_CONFIG_EXTERNAL_HALT) &&
	    c->schedule != V05_SCHEDULE_ROUNDS)
		return v05__fail(-EINVAL,
				 "external halt needs the rounds schedule (barriers)");
	if ((c->flags & V05_CONFIG_EXTERNAL_HALT) &&
	    rule->waves == V05__WAVES_FIT)
		return v05__fail(-EINVAL,
				 "external halt does not apply to %s (two waves, no halt)",
				 rule->name);
	if (c->journal_sync > V05_JOURNAL_SYNC_BATCH)
		return v05__fail(-EINVAL, "journal_sync %u is unknown",
				 c->journal_sync);
	if (c->journal_path &&
	    (!c->journal_path[0] ||
	     strlen(c->journal_path) >= V05_JOURNAL_PATH_MAX - 64))
		return v05__fail(-EINVAL, "journal_path is empty or too long");
	return broker_check(c);
}

void v05__shm_config_from(struct v05_shm_config *s, const struct v05_config *c,
			  const char *journal_abs)
{
	memset(s, 0, sizeof(*s));
	s->cost = c->params.cost;
	s->k_init = c->params.k_init;
	s->k_step = c->params.k_step;
	s->k_max = c->params.k_max;
	s->mode = c->params.mode;
	s->halt_fraction = c->halt_fraction;
	s->pad_multiple = c->pad_multiple;
	s->schedule = c->schedule;
	s->stream_deadline_us = c->stream_deadline_us;
	s->eb_window = c->eb_window;
	s->eb_cold = c->eb_cold;
	s->eb_early = c->eb_early;
	s->eb_first = c->eb_first;
	s->pc_lower = c->pc_lower;
	s->pc_upper = c->pc_upper;
	s->ebpo_window = c->ebpo_window;
	s->pg_between = c->pg_between;
	s->pg_first = c->pg_first;
	s->pg_skip = c->pg_skip;
	s->journal_sync = c->journal_sync;
	s->flags = c->flags;
	s->sigma = c->params.sigma;
	memcpy(s->broker_uids, c->broker_uids, sizeof(s->broker_uids));
	memcpy(s->broker_gids, c->broker_gids, sizeof(s->broker_gids));
	s->n_broker_uids = c->n_broker_uids;
	s->n_broker_gids = c->n_broker_gids;
	s->lane_cut_records = c->lane_cut_records ? c->lane_cut_records :
			      cut_records_default(c);
	s->lane_cut_permille = c->lane_cut_permille ? c->lane_cut_permille : 900;
	if (journal_abs)
		snprintf(s->journal_path, sizeof(s->journal_path), "%s",
			 journal_abs);
}

/* The header's config passed the checksum; check it means something. */
void v05__config_of_shm(const struct v05_shm_config *s, struct v05_config *c)
{
	v05_config_default(c);
	c->params.cost = s->cost;
	c->params.k_init = s->k_init;
	c->params.k_step = s->k_step;
	c->params.k_max = s->k_max;
	c->params.mode = s->mode;
	c->params.sigma = s->sigma;
	c->halt_fraction = s->halt_fraction;
	c->pad_multiple = s->pad_multiple;
	c->schedule = s->schedule;
	c->stream_deadline_us = s->stream_deadline_us;
	c->eb_window = s->eb_window;
	c->eb_cold = s->eb_cold;
	c->eb_early = s->eb_early;
	c->eb_first = s->eb_first;
	c->pc_lower = s->pc_lower;
	c->pc_upper = s->pc_upper;
	c->ebpo_window = s->ebpo_window;
	c->pg_between = s->pg_between;
	c->pg_first = s->pg_first;
	c->pg_skip = s->pg_skip;
	c->journal_sync = s->journal_sync;
	c->flags = s->flags;
	memcpy(c->broker_uids, s->broker_uids, sizeof(c->broker_uids));
	memcpy(c->broker_gids, s->broker_gids, sizeof(c->broker_gids));
	c->n_broker_uids = s->n_broker_uids;
	c->n_broker_gids = s->n_broker_gids;
	c->lane_cut_records = s->lane_cut_records;
	c->lane_cut_permille = s->lane_cut_permille;
}

int v05__shm_config_check(struct v05_plugin *p)
{
	const struct v05_shm_config *s = &p->cfg;
	struct v05_config c;

	v05__config_of_shm(s, &c);
	if (v05_config_check(&c) || s->k_max != p->seg.hdr.geo.k_max ||
	    !s->lane_cut_records || !s->lane_cut_permille ||
	    memchr(s->journal_path, 0, sizeof(s->journal_path)) == NULL)
		return v05__fail(-EDOM, "segment %s: stored configuration is invalid",
				 p->seg.name);
	p->params = c.params;
	return 0;
}
