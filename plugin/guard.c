/* SPDX-License-Identifier: MIT */
/*
 * Who may produce, and what a producer may cost the plugin: the broker
 * started with the owner's allow-list and its refusals counted; each
 * lane's records accounted as applied or rejected, and a producer's claim
 * whose records are mostly rejected cut off (docs/SHM.md, "The broker" and
 * "Cutting a lane off"). The per-record path (decide.c) is not touched:
 * the accounting wraps it, a batch at a time.
 */
#include <string.h>

#include "internal.h"
#include "../shm/broker.h"

/*
 * Runs in the broker thread, the only writer of this counter and of the
 * two words (relaxed: a count and a display value; the poll thread never
 * writes them, observers read a snapshot).
 */
static void broker_refused(void *ctx, uint32_t uid, uint32_t gid)
{
	struct v05_plugin *p = ctx;

	v05_store_relaxed(&p->st->broker_refused_uid, uid);
	v05_store_relaxed(&p->st->broker_refused_gid, gid);
	v05__count(p, V05_C_BROKER_REFUSED, 1);
}

int v05__plugin_start_broker(struct v05_plugin *p)
{
	struct v05_broker_allow a;

	if (!(p->cfg.flags & V05_CONFIG_PRODUCER_BROKER))
		return 0;
	memset(&a, 0, sizeof(a));
	memcpy(a.uids, p->cfg.broker_uids, sizeof(a.uids));
	memcpy(a.gids, p->cfg.broker_gids, sizeof(a.gids));
	a.n_uids = p->cfg.n_broker_uids;
	a.n_gids = p->cfg.n_broker_gids;
	a.refused = broker_refused;
	a.ctx = p;
	return v05__broker_start(&p->seg, &a, &p->broker);
}

/*
 * n records of lane, rejected of them rejected, handed over while its
 * owner word was the one the lanes saw last (they observe it at each
 * batch, before handing it over). The window is that claim's: it starts
 * empty at each new owner word, and both its counts are halved when they
 * reach twice the minimum, so that it weighs about the claim's last 2N
 * records: a long honest past neither shields a producer that turns to
 * flooding nor does one burst of late rewards outweigh it. The claim is
 * cut off when the window holds at least lane_cut_records records and
 * more than lane_cut_permille per 1000 of them were rejected. Relaxed
 * throughout: owner-only statistics, this thread their only writer.
 */
static void account(struct v05_plugin *p, uint32_t lane, uint32_t n,
		    uint32_t rejected)
{
	struct v05_lane_own *own = &p->seg.lane_own[lane];
	uint64_t owner = v05_load_relaxed(&own->owner_seen);
	uint64_t min = p->cfg.lane_cut_records, recs = n, rej = rejected;

	v05_store_relaxed(&own->applied, v05_load_relaxed(&own->applied) +
					 (n - rejected));
	v05_store_relaxed(&own->rejected, v05_load_relaxed(&own->rejected) +
					  rejected);
	if (owner == v05_load_relaxed(&own->win_owner)) {
		recs += v05_load_relaxed(&own->win_records);
		rej += v05_load_relaxed(&own->win_rejected);
	} else {
		v05_store_relaxed(&own->win_owner, owner);
	}
	/* Nothing rejected in this batch: the fraction only fell. */
	if (rejected && recs >= min &&
	    rej * 1000 > recs * p->cfg.lane_cut_permille &&
	    v05__lanes_cut(&p->lanes, lane, owner)) {
		v05_store_relaxed(&own->cuts, v05_load_relaxed(&own->cuts) + 1);
		v05_store_relaxed(&own->cut_records, (uint32_t)recs);
		v05_store_relaxed(&own->cut_rejected, (uint32_t)rej);
	}
	if (recs >= 2 * min || recs >= 1u << 31) {
		recs /= 2;
		rej /= 2;
	}
	v05_store_relaxed(&own->win_records, (uint32_t)recs);
	v05_store_relaxed(&own->win_rejected, (uint32_t)rej);
}

/*
 * The lanes' v05_record_fn: v05__apply_records, then the batch's count.
 * Each record is either applied (rewards_applied + 1) or rejected under
 * exactly one reason (decide.c's apply_one; the lane fuzzer checks it), so
 * the rejected ones are the records that did not move rewards_applied.
 */
void v05__apply_lane(void *ctx, const struct v05_record *recs, uint32_t n,
		     uint32_t lane)
{
	struct v05_plugin *p = ctx;
	uint64_t *applied = v05__ctr(p, V05_C_REWARDS_APPLIED);
	uint64_t before = v05_load_relaxed(applied);

	v05__apply_records(ctx, recs, n, lane);
	account(p, lane, n, n - (uint32_t)(v05_load_relaxed(applied) - before));
}

/* The lanes report, the plugin counts (its counters, its names); records
 * that failed the lanes' checks count as rejected for their lane too. */
void v05__lane_event(void *ctx, enum v05_lane_event ev, uint32_t lane,
		     uint32_t n)
{
	v05__count(ctx, v05__lane_event_counter(ev), n);
	if (ev == V05_LANE_CORRUPT)
		account(ctx, lane, n, n);
}
