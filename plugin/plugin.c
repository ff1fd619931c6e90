/* SPDX-License-Identifier: MIT */
/*
 * Plugin lifecycle (create, close) and poll. Everything a takeover needs is
 * in the segment; the process-local state (batch counts, held lists, free
 * lists, the decision queue) is derived from it again (takeover.c).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "top.h"
#include "journal/journal.h"
#include "../shm/broker.h"
#include "../shm/doorbell.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "mechanics/one_thread.h"

#define POLL_BUDGET 65536u /* records per poll, bounds a poll's latency */
#define DRAIN_BATCH 64u    /* records per lane per turn                 */

static uint32_t pow2_at_least(uint32_t x)
{
	uint32_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

void v05__plugin_free_local(struct v05_plugin *p)
{
	if (p->batches) {
		for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++)
			free(p->batches[b].held);
		free(p->batches);
	}
	v05__lanes_fini(&p->lanes);
	v05__arena_fini(&p->arena);
	free(p->q);
	free(p->pending_free);
	free(p->pad_items);
	free(p->eb_prior);
	free(p->eb_s);
	free(p->eb_k);
	p->eb_prior = p->eb_s = NULL;
	p->eb_k = NULL;
	p->batches = NULL;
	p->q = NULL;
	p->pending_free = NULL;
	p->pad_items = NULL;
}

/*
 * Slot generations count on from a random value drawn when the segment is
 * new: a decision of another plugin (same slot number, maybe the same uid)
 * then carries a generation this segment's slot does not have, and
 * v05_release refuses it. The counter lives in the persistent state, so a
 * takeover goes on from it. Without randomness the clock and pid serve.
 */
static uint32_t random_gen_base(const struct v05_plugin *p)
{
	uint32_t base;

	if (getrandom(&base, sizeof(base), GRND_NONBLOCK) != sizeof(base))
		base = (uint32_t)(v05__now_ns() ^ p->seg.hdr.created_ns ^
				  (uint64_t)getpid());
	return base;
}

/* Local structures over a mapped segment (create and attach). */
int v05__plugin_init_local(struct v05_plugin *p)
{
	const struct v05_geometry *g = &p->seg.hdr.geo;
	int ret;

	p->st = V05_AT(struct v05_plugin_state, p->seg.state->plugin, 0);
	p->fit = V05_AT(struct v05_fit_store, p->seg.state->fit, 0);
	/* params passed v05_params_check (create) or the stored config's
	 * check (attach): the mode has its row. */
	p->rule = v05__rule_of(p->params.mode);
	v05__config_of_shm(&p->cfg, &p->config);
	p->env = (struct v05__rule_env){
		.params = &p->params,
		.config = &p->config,
		.state = p->fit,
	};	p->batch_recs = V05_AT(struct v05_batch_rec,
			       p->seg.region[V05_REGION_BATCHES], 0);
	v05__table_init(&p->table, p->seg.region[V05_REGION_TABLE],
			g->table_capacity, &p->seg.ctl->table_seq);
	v05__completions_init(&p->compl, &p->seg);
	p->batches = calloc(g->batch_count, sizeof(*p->batches));
	/* A prompt has at most one undelivered decision (its next samples
	 * cannot be rewarded before they were handed out), so twice the
	 * slots is enough for recover() on top: no allocation while polling. */
	p->qcap = 2 * g->slot_count;
	p->q = malloc((size_t)p->qcap * sizeof(*p->q));
	p->pending_free = malloc((size_t)g->slot_count * sizeof(*p->pending_free));
	p->pad_items = malloc((size_t)g->slot_count * sizeof(*p->pad_items));
	if (p->rule->waves == V05__WAVES_FIT) {
		p->eb_prior = calloc(g->slot_count, sizeof(*p->eb_prior));
		p->eb_s = calloc(g->slot_count, sizeof(*p->eb_s));
		p->eb_k = calloc(g->slot_count, sizeof(*p->eb_k));
		if (!p->eb_prior || !p->eb_s || !p->eb_k)
			return v05__fail(-ENOMEM, "plugin: out of memory");
	}
	if (!p->batches || !p->q || !p->pending_free || !p->pad_items)
		return v05__fail(-ENOMEM, "plugin: out of memory");
	/* Touched now (a large malloc is fresh mmap), so that polling never
	 * takes the page faults. */
	memset(p->q, 0, (size_t)p->qcap * sizeof(*p->q));
	memset(p->pending_free, 0, (size_t)g->slot_count * sizeof(*p->pending_free));
	memset(p->pad_items, 0, (size_t)g->slot_count * sizeof(*p->pad_items));
	v05__clock_refresh(p);
	ret = v05__lanes_init(&p->lanes, &p->seg);
	p->lanes.event = v05__lane_event;
	p->lanes.event_ctx = p;
	if (!ret)
		ret = v05__arena_init(&p->arena, &p->seg);
	if (!ret) {
		/* 0 until the first allocation (arena.c skips 0). */
		if (p->st->last_gen == 0)
			p->st->last_gen = random_gen_base(p);
		p->arena.last_gen = &p->st->last_gen;
	}
	if (!ret) {
		ret = v05__waiter_init(&p->waiter, &p->seg.bell->doorbell,
				       (p->cfg.flags & V05_CONFIG_WAIT_THREAD) ?
					       V05_WAIT_THREAD : 0);
	}
	if (ret)
		return ret;
	p->seg.ctl->wait_path = (uint32_t)p->waiter.path;
	snprintf(p->st->wait_reason, sizeof(p->st->wait_reason), "%s",
		 p->waiter.why);
	return 0;
}

int v05__plugin_open_journal(struct v05_plugin *p)
{
	uint64_t last_seq, truncated;
	int ret;

	if (!p->cfg.journal_path[0]) {
		p->st->journal_status = V05_JOURNAL_OFF;
		return 0;
	}
	ret = v05__journal_open(p->cfg.journal_path, p->cfg.journal_sync,
				p->seg.name, p->seg.mode, &p->journal, &last_seq,
				&truncated);
	if (ret)
		return ret;
	if (truncated)
		fprintf(stderr, "v05: journal %s: torn tail of %llu bytes truncated\n",
			p->cfg.journal_path, (unsigned long long)truncated);
	/* Group numbers stay unique within a journal across runs. */
	if (last_seq > p->st->last_seq)
		p->st->last_seq = last_seq;
	p->st->journal_durable_seq = last_seq;
	p->st->journal_status = V05_JOURNAL_OK;
	return 0;
}

/* Absolute journal path, so a takeover from another directory finds it. */
static int journal_abs(const char *path, char *out, size_t len)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (!realpath(dir, real))
		return v05__fail(-errno, "journal directory %s: %s", dir,
				 v05__errstr(errno));
	if ((size_t)snprintf(out, len, "%s/%s", real, base) >= len)
		return v05__fail(-ENAMETOOLONG, "journal path too long");
	return 0;
}

/* Create the segment's files at path (NULL: the name's), the plugin
 * calling itself name (its journal, its messages); v05_plugin_replace
 * makes them in its temporary directory first. */
int v05__plugin_create_at(const char *path, const char *name,
			  const struct v05_config *in, unsigned cflags,
			  struct v05_plugin **out)
{
	char jpath[V05_JOURNAL_PATH_MAX] = "", own[PATH_MAX];
	struct v05_config full, *c = &full;
	struct v05_geometry g;
	struct v05_plugin *p;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "plugin_create: NULL out");
	/* The caller's config as this library's (its size: plugin.h). */
	ret = v05__config_load(in, &full);
	if (!ret)
		ret = v05_config_check(c);
	if (ret)
		return ret;
	if (c->journal_path) {
		ret = journal_abs(c->journal_path, jpath, sizeof(jpath));
		if (ret)
			return ret;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return v05__fail(-ENOMEM, "plugin: out of memory");
	memset(&g, 0, sizeof(g));
	g.lane_count = c->max_producers;
	g.lane_capacity = c->lane_capacity;
	g.slot_count = c->max_prompts;
	g.table_capacity = pow2_at_least(2 * c->max_prompts);
	g.ring_capacity = pow2_at_least(c->max_prompts);
	g.k_max = c->params.k_max;
	g.support_capacity = V05_SUPPORT_GROUPS;
	g.batch_count = c->max_batches;
	v05__shm_config_from(&p->cfg, c, c->journal_path ? jpath : NULL);
	p->params = c->params;
	ret = path ? 0 : v05__segment_path(name, own, sizeof(own));
	if (!ret)
		ret = v05__segment_create_at(path ? path : own, name, &g, &p->cfg,
					     sizeof(p->cfg), c->file_mode, cflags,
					     &p->seg);
	if (ret) {
		free(p);
		return ret;
	}
	snprintf(p->seg.name, sizeof(p->seg.name), "%s", name);
	ret = v05__plugin_init_local(p);
	if (!ret)
		ret = v05__plugin_open_journal(p);
	if (!ret)
		ret = v05__plugin_start_broker(p);
	if (!ret)
		v05__segment_own(&p->seg, true);
	if (!ret && !path) {
		/* The name was free: what a replace killed earlier left
		 * next to it is nobody's; removed (counted). */
		struct v05_settled st = { 0, 0 };

		v05__stage_settle(p->seg.path, p->seg.st_uid,
				  v05_load_relaxed(&p->seg.ctl->owner), &st);
		v05__count(p, V05_C_REPLACES_CLEANED, st.cleaned);
		v05__count(p, V05_C_REPLACES_UNDONE, st.undone);
	}
	if (ret) {
		if (p->journal)
			v05__journal_close(p->journal);
		v05__plugin_free_local(p);
		v05__waiter_fini(&p->waiter);
		v05__segment_remove(&p->seg); /* keeps the error message */
		v05__segment_detach(&p->seg);
		free(p);
		return ret;
	}
	*out = p;
	return 0;
}

V05_API int v05_plugin_close(struct v05_plugin *p, unsigned flags)
{
	int ret = 0;

	if (!p)
		return 0;
	if (flags & ~(V05_CLOSE_UNLINK | V05_CLOSE_KEEP_READABLE))
		return v05__fail(-EINVAL, "unknown close flags 0x%x", flags);
#ifdef V05_CHECK_THREADS
	/* Taken and never given back: the handle is freed below. */
	if (!v05__call_enter(p).ok)
		return v05__fail(-EBUSY,
				 "plugin_close: another thread is in a call on plugin %s; a plugin handle is used by one thread at a time (v05/plugin.h)",
				 p->seg.name);
#endif
	/* First: the broker's thread uses the mapping and the descriptors. */
	v05__plugin_stop_broker(p);
	v05__segment_own(&p->seg, false);
	if (p->armed)
		v05__waiter_disarm(&p->waiter);
	if (p->journal) {
		ret = v05__journal_pump(p->journal, 1);
		/* A failure v05_poll already reported is not raised again:
		 * close answers only what is new. */
		if (ret && p->st->journal_status == V05_JOURNAL_FAILED &&
		    !p->journal_error_pending)
			ret = 0;
		p->st->journal_durable_seq = v05__journal_durable(p->journal);
		v05__journal_close(p->journal);
	}
	v05__waiter_fini(&p->waiter);
	p->seg.ctl->wait_path = V05_WAIT_NONE;
	if (flags & V05_CLOSE_UNLINK) {
		/* Removed while still ours: released first, a takeover could
		 * come between and its segment be the one removed. */
		int r = v05__segment_unlink_own(&p->seg);

		if (!ret)
			ret = r;
	}
	/* R5: every store of ours before the segment is free to take over. */
	v05_store_release(&p->seg.ctl->owner, 0);
	v05__plugin_free_local(p);
	if (flags & V05_CLOSE_KEEP_READABLE)
		v05__segment_detach_readable(&p->seg);
	else
		v05__segment_detach(&p->seg);
	free(p);
	return ret;
}

V05_API int v05_plugin_create(const char *name, const struct v05_config *c,
			      struct v05_plugin **out)
{
	return v05__plugin_create_at(NULL, name, c, 0, out);
}

static __attribute__((noinline)) void journal_progress(struct v05_plugin *p)
{
	const char *msg;
	int err;

	if (!p->journal || p->st->journal_status != V05_JOURNAL_OK) {
		p->journal_work = false;
		return;
	}
	err = v05__journal_pump(p->journal, 0);
	p->journal_work = v05__journal_busy(p->journal);
	p->st->journal_offset = v05__journal_offset(p->journal);
	v05__count(p, V05_C_JOURNAL_WRITES,
		   v05__journal_writes(p->journal) - p->journal_writes_seen);
	p->journal_writes_seen = v05__journal_writes(p->journal);
	if (err) {
		v05__journal_error(p->journal, &msg);
		p->st->journal_status = V05_JOURNAL_FAILED;
		p->st->journal_errno = -err;
		snprintf(p->st->journal_error, sizeof(p->st->journal_error), "%s",
			 msg);
		v05__count(p, V05_C_JOURNAL_ERRORS, 1);
		p->journal_error_pending = err;
	}
	v05__free_journaled(p);
}

/* The poll's exits other than "0 or decisions", out of its hot path. */
static __attribute__((noinline, cold)) int
poll_refused(struct v05_plugin *p, struct v05_decision *out, uint32_t max)
{
	int err;

	if (!p || (max && !out))
		return v05__fail(-EINVAL, "poll: NULL argument");
	if (p->queue_error)
		return v05__fail(p->queue_error,
				 "a decision could not be queued (out of memory); call v05_recover for the whole state");
	err = p->journal_error_pending;
	p->journal_error_pending = 0;
	return v05__fail(err, "%.*s", (int)sizeof(p->st->journal_error),
			 p->st->journal_error);
}

/* The first poll after a wait: the doorbell is ours again, and the
 * coarse clock is read now (it may be a wait's length old). */
static __attribute__((noinline)) void poll_woken(struct v05_plugin *p)
{
	v05__disarm(p);
	p->poll_tick = 0;
}

V05_API int v05_poll(struct v05_plugin *p, struct v05_decision *out,
		     uint32_t max)
{
	V05_ONE_THREAD(p, "poll");
	/*
	 * A poll with nothing to do must cost about what scanning the lanes
	 * does (bench_poll measures the two side by side): every step below
	 * but the scans is behind an inline test of a word this process
	 * owns, and the rare ones are out of line. The precise clock is read
	 * by the first record applied (decide.c) or stream deadline found
	 * (schedule.c). The checks on intervals of 50 ms and more (reader,
	 * lane reclaim, heartbeat) take the coarse clock, read on every 8th
	 * poll and on the first after a wait: a busy loop polls far more
	 * often than every 6 ms, and an idle one comes back from a wait.
	 * A successful poll leaves v05_errmsg() as it was (common.h: its
	 * content is unspecified after a success); every failure sets it.
	 */
	if (__builtin_expect(!p || (max && !out) || p->queue_error, 0))
		return poll_refused(p, out, max);
	if (__builtin_expect(p->armed, 0))
		poll_woken(p);
	p->clock_stale = true;
	if ((p->poll_tick++ & 7) == 0) {
		p->coarse_ns = v05__coarse_ns();
		/* Relaxed: a display value (up to 8 polls and a tick old);
		 * stored when it moves, so inspectors reading it do not take
		 * the line from this core on every poll. */
		v05_store_relaxed(&p->seg.ctl->heartbeat_ns, p->coarse_ns);
	}
	if (v05__releases_pending(&p->compl))
		v05__releases_drain(&p->compl, v05__release_from_reader, p);
	if (p->coarse_ns >= p->next_reader_check_ns)
		v05__check_reader(p, p->coarse_ns);
	v05__lanes_drain(&p->lanes, POLL_BUDGET, DRAIN_BATCH, v05__apply_lane, p);
	/* A brokered producer left: its lane back at once (the broker rang). */
	if (__builtin_expect(v05__lanes_ends_pending(&p->lanes), 0))
		v05__lanes_end_grants(&p->lanes, v05__apply_lane, p);
	if (p->coarse_ns >= p->lanes.next_reclaim_ns)
		v05__lanes_reclaim_at(&p->lanes, p->coarse_ns, v05__apply_lane, p);
	if (p->cfg.schedule == V05_SCHEDULE_STREAM)
		v05__schedule_deadlines(p);
	/* journal_work: set by each append (finalize.c), cleared by the pump
	 * that leaves nothing buffered or in flight. */
	if (p->journal_work || p->npending_free)
		journal_progress(p);
	if (__builtin_expect(p->queue_error | p->journal_error_pending, 0))
		return poll_refused(p, out, max);
	return p->qlen ? (int)v05__dequeue(p, out, max) : 0;
}
