/* SPDX-License-Identifier: MIT */
/*
 * Who may produce, and what a producer may cost the plugin: the broker
 * started with the owner's allow-list, its refusals counted and its grants
 * held back for a uid whose lanes were cut off (a backoff that doubles
 * with each cut-off); each lane's records accounted as applied or
 * rejected, and a lane whose records are mostly rejected cut off
 * (docs/SHM.md, "The broker" and "Cutting a lane off"). Every decision
 * here reads owner-only state (the lane statistics, the plugin state),
 * never a word a producer writes. The per-record path (decide.c) is not
 * touched: the accounting wraps it, a batch at a time.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mechanics/internal.h"
#include "../shm/broker.h"
#include "../shm/error.h"
#include "../shm/memfd.h"
#include "../shm/proc.h"

/*
 * Runs in the broker thread, the only writer of these counters and of
 * the two words (relaxed: a count and a display value; the poll thread
 * never writes them, observers read a snapshot).
 */
static void broker_refused(void *ctx, int err, uint32_t uid, uint32_t gid)
{
	struct v05_plugin *p = ctx;

	if (err == -EAGAIN) {
		v05__count(p, V05_C_BROKER_BACKOFF, 1);
		return;
	}
	v05_store_relaxed(&p->st->broker_refused_uid, uid);
	v05_store_relaxed(&p->st->broker_refused_gid, gid);
	v05__count(p, V05_C_BROKER_REFUSED, 1);
}

/* The broker thread's look at a uid's backoff. Relaxed: the poll thread
 * writes the entries; a torn read (one entry's uid, another's time) costs
 * one grant made or refused early, nothing else. */
static uint64_t broker_backoff(void *ctx, uint32_t uid, uint32_t *cuts)
{
	struct v05_plugin *p = ctx;

	for (uint32_t i = 0; i < V05_BACKOFF_UIDS; i++) {
		struct v05_uid_backoff *b = &p->st->backoff[i];

		if (v05_load_relaxed(&b->cuts) && v05_load_relaxed(&b->uid) == uid) {
			*cuts = v05_load_relaxed(&b->cuts);
			return v05_load_relaxed(&b->until_ns);
		}
	}
	return 0;
}

/*
 * A lane of uid's was cut off: one more cut for uid, and its backoff
 * doubled (1 s after the first). Returns until when. The poll thread's
 * (relaxed: it is the only writer). A uid not yet in the table takes the
 * entry whose backoff ended first.
 */
static uint64_t backoff_cut(struct v05_plugin *p, uint32_t uid, uint64_t now)
{
	struct v05_uid_backoff *b = NULL;
	uint32_t cuts;
	uint64_t until;

	for (uint32_t i = 0; i < V05_BACKOFF_UIDS && !b; i++)
		if (p->st->backoff[i].cuts && p->st->backoff[i].uid == uid)
			b = &p->st->backoff[i];
	for (uint32_t i = 0; i < V05_BACKOFF_UIDS && !b; i++)
		if (!p->st->backoff[i].cuts)
			b = &p->st->backoff[i];
	if (!b) {
		b = &p->st->backoff[0];
		for (uint32_t i = 1; i < V05_BACKOFF_UIDS; i++)
			if (p->st->backoff[i].until_ns < b->until_ns)
				b = &p->st->backoff[i];
		v05_store_relaxed(&b->cuts, 0u);
	}
	cuts = v05_load_relaxed(&b->cuts) + 1;
	until = now + (V05_BACKOFF_BASE_NS <<
		       (cuts - 1 < V05_BACKOFF_DOUBLINGS ? cuts - 1 :
			V05_BACKOFF_DOUBLINGS));
	v05_store_relaxed(&b->uid, uid);
	v05_store_relaxed(&b->until_ns, until);
	v05_store_relaxed(&b->cuts, cuts);
	return until;
}

int v05__plugin_start_broker(struct v05_plugin *p)
{
	struct v05_broker_allow a;
	void *m;
	int fd, ret;

	if (!(p->cfg.flags & V05_CONFIG_PRODUCER_BROKER))
		return 0;
	memset(&a, 0, sizeof(a));
	memcpy(a.uids, p->cfg.broker_uids, sizeof(a.uids));
	memcpy(a.gids, p->cfg.broker_gids, sizeof(a.gids));
	a.n_uids = p->cfg.n_broker_uids;
	a.n_gids = p->cfg.n_broker_gids;
	a.overflow_ok = (p->cfg.flags & V05_CONFIG_BROKER_OVERFLOW_IDS) != 0;
	v05__overflow_ids(&a.overflow_uid, &a.overflow_gid);
	a.refused = broker_refused;
	a.backoff_until = broker_backoff;
	a.ctx = p;
	/* The brokered producers' doorbell: a memfd no one can resize, not
	 * the segment's doorbell file (which producers of its uid share). */
	fd = v05__memfd_sealed("v05-bell", V05_PAGE);
	if (fd < 0)
		return fd;
	m = mmap(NULL, V05_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		ret = v05__fail(-errno, "mmap the brokered doorbell: %s",
				v05__errstr(errno));
		close(fd);
		return ret;
	}
	p->bell2 = m;
	p->bell2_fd = fd;
	v05__waiter_set_word2(&p->waiter, &p->bell2->doorbell);
	ret = v05__broker_start(&p->seg, &a, fd, &p->broker);
	if (ret)
		v05__plugin_stop_broker(p);
	return ret;
}

void v05__plugin_stop_broker(struct v05_plugin *p)
{
	v05__broker_stop(p->broker);
	p->broker = NULL;
	if (!p->bell2)
		return;
	v05__waiter_set_word2(&p->waiter, NULL);
	munmap(p->bell2, V05_PAGE);
	close(p->bell2_fd);
	p->bell2 = NULL;
}

/*
 * n records of lane, rejected of them rejected. The window belongs to the
 * lane and to the grant the broker made of it (a new grant starts an
 * empty window; a file lane's window goes on across its producers, and
 * starts again only when a cut-off or the end of a grant empties it):
 * nothing a producer writes starts a new one. Both its counts are halved
 * when they reach twice the minimum, so that it weighs about the last 2N
 * records: a long honest past neither shields a producer that turns to
 * flooding nor does one burst of late rewards outweigh it. The lane is
 * cut off when the window holds at least lane_cut_records records and
 * more than lane_cut_permille per 1000 of them were rejected. Relaxed
 * throughout: owner-only statistics, this thread their only writer (the
 * grant is the one the view maps, which this thread installs: a new
 * grant's records are counted in a new window).
 */
static void account(struct v05_plugin *p, uint32_t lane, uint32_t n,
		    uint32_t rejected)
{
	struct v05_lane_own *own = &p->seg.lane_own[lane];
	/* The grant whose memfd the records came from (0: the lane's file),
	 * not the broker's latest: a grant made since is not yet read. */
	uint32_t grant = v05__lanes_view_grant(&p->lanes, lane);
	uint64_t min = p->cfg.lane_cut_records, recs = n, rej = rejected;

	v05_store_relaxed(&own->applied, v05_load_relaxed(&own->applied) +
					 (n - rejected));
	v05_store_relaxed(&own->rejected, v05_load_relaxed(&own->rejected) +
					  rejected);
	if (grant == v05_load_relaxed(&own->win_grant)) {
		recs += v05_load_relaxed(&own->win_records);
		rej += v05_load_relaxed(&own->win_rejected);
	} else {
		v05_store_relaxed(&own->win_grant, grant);
	}
	/* Nothing rejected in this batch: the fraction only fell. */
	if (rejected && recs >= min &&
	    rej * 1000 > recs * p->cfg.lane_cut_permille) {
		uint64_t now = v05__now_ns();
		/* Whose lane: the grant's peer, or (a file lane) the
		 * segment's own uid. */
		uint32_t uid = grant ? v05__lanes_view_uid(&p->lanes, lane) :
			       p->seg.st_uid;

		if (v05__lanes_cut(&p->lanes, lane)) {
			uint64_t until = backoff_cut(p, uid, now);

			v05_store_relaxed(&own->cut_until_ns, until);
			v05_store_relaxed(&own->cuts, v05_load_relaxed(&own->cuts) + 1);
			v05_store_relaxed(&own->cut_records,
					  recs > UINT32_MAX ? UINT32_MAX : (uint32_t)recs);
			v05_store_relaxed(&own->cut_rejected,
					  rej > UINT32_MAX ? UINT32_MAX : (uint32_t)rej);
			/* The window ends with the cut. */
			recs = rej = 0;
		}
	}
	if (recs >= 2 * min) {
		recs /= 2;
		rej /= 2;
	}
	v05_store_relaxed(&own->win_records, recs);
	v05_store_relaxed(&own->win_rejected, rej);
}

/*
 * The lanes' v05_record_fn: v05__apply_records, then the batch's count.
 * Each record is either applied (a reward: rewards_applied + 1; an abort:
 * aborts_applied + 1) or rejected under exactly one reason (decide.c's
 * apply_one, cancel.c's apply_abort; the lane fuzzer checks it), so the
 * rejected ones are the records that moved neither.
 */
static uint64_t applied_now(struct v05_plugin *p)
{
	return v05_load_relaxed(v05__ctr(p, V05_C_REWARDS_APPLIED)) +
	       v05_load_relaxed(v05__ctr(p, V05_C_ABORTS_APPLIED));
}

void v05__apply_lane(void *ctx, const struct v05_record *recs, uint32_t n,
		     uint32_t lane)
{
	struct v05_plugin *p = ctx;
	uint64_t before = applied_now(p);

	v05__apply_records(ctx, recs, n, lane);
	account(p, lane, n, n - (uint32_t)(applied_now(p) - before));
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
