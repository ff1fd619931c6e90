/* SPDX-License-Identifier: MIT */
/*
 * Plugin lifecycle (create, attach after a crash, close), poll, recover and
 * the wait API. Everything a takeover needs is in the segment; the
 * process-local state (batch counts, held lists, free lists, the decision
 * queue) is derived from it again by rebuild().
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "plugin/internal.h"
#include "plugin/journal.h"
#include "shm/doorbell.h"
#include "shm/error.h"
#include "shm/proc.h"

#define POLL_BUDGET 65536u /* records per poll, bounds a poll's latency */
#define DRAIN_BATCH 64u    /* records per lane per turn                 */

V05_API void v05_config_default(struct v05_config *c)
{
	memset(c, 0, sizeof(*c));
	c->size = sizeof(*c);
	v05_params_default(&c->params);
	c->params.mode = V05_MODE_V05_EB;
	c->halt_fraction = 0.25;
	c->pad_multiple = 32;
	c->schedule = V05_SCHEDULE_ROUNDS;
	c->stream_deadline_us = 2000;
	c->max_prompts = 4096;
	c->max_producers = 16;
	c->lane_capacity = 4096;
	c->max_batches = 64;
	c->file_mode = 0600;
	c->journal_sync = V05_JOURNAL_SYNC_NONE;
}

V05_API void v05_config_paper(struct v05_config *c)
{
	v05_config_default(c);
	c->params.mode = V05_MODE_V05;
	c->params.sigma = V05_SIGMA_PAPER;
	c->halt_fraction = 0.25;
	c->schedule = V05_SCHEDULE_ROUNDS;
}

V05_API int v05_config_check(const struct v05_config *c)
{
	int ret;

	if (!c)
		return v05__fail(-EINVAL, "config: NULL");
	if (c->size != sizeof(*c))
		return v05__fail(-EINVAL,
				 "config size %u, this library's is %zu (use v05_config_default)",
				 c->size, sizeof(*c));
	ret = v05_params_check(&c->params);
	if (ret)
		return ret;
	if (!isfinite(c->halt_fraction) || c->halt_fraction < 0.0 ||
	    c->halt_fraction > 1.0)
		return v05__fail(-EINVAL, "halt_fraction %g is not in [0, 1]",
				 c->halt_fraction);
	if (c->pad_multiple < 1 || c->pad_multiple > 65536)
		return v05__fail(-EINVAL, "pad_multiple %u is not in [1, 65536]",
				 c->pad_multiple);
	if (c->schedule > V05_SCHEDULE_STREAM)
		return v05__fail(-EINVAL, "schedule %u is unknown", c->schedule);
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
	if (c->flags & ~(V05_CONFIG_WAIT_THREAD | V05_CONFIG_EXTERNAL_HALT))
		return v05__fail(-EINVAL, "unknown config flags 0x%x", c->flags);
	if ((c->flags & V05_CONFIG_EXTERNAL_HALT) &&
	    c->schedule != V05_SCHEDULE_ROUNDS)
		return v05__fail(-EINVAL,
				 "external halt needs the rounds schedule (barriers)");
	if ((c->flags & V05_CONFIG_EXTERNAL_HALT) &&
	    c->params.mode == V05_MODE_V05_EB)
		return v05__fail(-EINVAL,
				 "external halt does not apply to v05-eb (two waves, no halt)");
	if (c->journal_sync > V05_JOURNAL_SYNC_BATCH)
		return v05__fail(-EINVAL, "journal_sync %u is unknown",
				 c->journal_sync);
	if (c->journal_path &&
	    (!c->journal_path[0] ||
	     strlen(c->journal_path) >= V05_JOURNAL_PATH_MAX - 64))
		return v05__fail(-EINVAL, "journal_path is empty or too long");
	return 0;
}

static uint32_t pow2_at_least(uint32_t x)
{
	uint32_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

static void shm_config_from(struct v05_shm_config *s, const struct v05_config *c,
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
	s->journal_sync = c->journal_sync;
	s->flags = c->flags;
	s->sigma = c->params.sigma;
	if (journal_abs)
		snprintf(s->journal_path, sizeof(s->journal_path), "%s",
			 journal_abs);
}

/* The header's config passed the checksum; check it means something. */
static int shm_config_check(struct v05_plugin *p)
{
	const struct v05_shm_config *s = &p->cfg;
	struct v05_config c;

	v05_config_default(&c);
	c.params.cost = s->cost;
	c.params.k_init = s->k_init;
	c.params.k_step = s->k_step;
	c.params.k_max = s->k_max;
	c.params.mode = s->mode;
	c.params.sigma = s->sigma;
	c.halt_fraction = s->halt_fraction;
	c.pad_multiple = s->pad_multiple;
	c.schedule = s->schedule;
	c.stream_deadline_us = s->stream_deadline_us;
	c.journal_sync = s->journal_sync;
	c.flags = s->flags;
	if (v05_config_check(&c) || s->k_max != p->seg.hdr.geo.k_max ||
	    memchr(s->journal_path, 0, sizeof(s->journal_path)) == NULL)
		return v05__fail(-EDOM, "segment %s: stored configuration is invalid",
				 p->seg.name);
	p->params = c.params;
	return 0;
}

static void free_local(struct v05_plugin *p)
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
 * Slot generations start, at a slot's first allocation, at a random value
 * drawn per process that owns the segment: a decision of another plugin
 * (same slot number, maybe the same uid) then carries a generation this
 * segment's slot does not have, and v05_release refuses it. Drawn lazily
 * per slot (arena.c), so create does not touch every slot's page. Without
 * randomness the clock and pid serve; they differ too.
 */
static uint32_t random_gen_base(const struct v05_plugin *p)
{
	uint32_t base;

	if (getrandom(&base, sizeof(base), GRND_NONBLOCK) != sizeof(base))
		base = (uint32_t)(v05__now_ns() ^ p->seg.hdr.created_ns ^
				  (uint64_t)getpid());
	return base;
}

/* The lanes report, the plugin counts (its counters, its names). */
static void lane_event(void *ctx, enum v05_lane_event ev, uint32_t lane,
		       uint32_t n)
{
	static const int ctr[] = {
		[V05_LANE_CORRUPT] = V05_C_REJ_CORRUPT,
		[V05_LANE_OVERRUN] = V05_C_LANE_OVERRUNS,
		[V05_LANE_RECLAIM] = V05_C_LANE_RECLAIMS,
		[V05_LANE_CLAIM] = V05_C_LANE_CLAIMS,
	};

	(void)lane;
	v05__count(ctx, ctr[ev], n);
}

/* Local structures over a mapped segment (create and attach). */
static int init_local(struct v05_plugin *p)
{
	const struct v05_geometry *g = &p->seg.hdr.geo;
	int ret;

	p->st = V05_AT(struct v05_plugin_state, p->seg.state->plugin, 0);
	p->batch_recs = V05_AT(struct v05_batch_rec,
			       p->seg.region[V05_REGION_BATCHES], 0);
	v05__table_init(&p->table, p->seg.region[V05_REGION_TABLE],
			g->table_capacity);
	v05__completions_init(&p->compl, &p->seg);
	p->batches = calloc(g->batch_count, sizeof(*p->batches));
	/* A prompt has at most one undelivered decision (its next samples
	 * cannot be rewarded before they were handed out), so twice the
	 * slots is enough for recover() on top: no allocation while polling. */
	p->qcap = 2 * g->slot_count;
	p->q = malloc((size_t)p->qcap * sizeof(*p->q));
	p->pending_free = malloc((size_t)g->slot_count * sizeof(*p->pending_free));
	p->pad_items = malloc((size_t)g->slot_count * sizeof(*p->pad_items));
	if (p->params.mode == V05_MODE_V05_EB) {
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
	p->lanes.prefetch = v05__prefetch_key;
	p->lanes.event = lane_event;
	p->lanes.event_ctx = p;
	if (!ret)
		ret = v05__arena_init(&p->arena, &p->seg);
	if (!ret)
		p->arena.gen_base = random_gen_base(p);
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

static int open_journal(struct v05_plugin *p)
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
				 strerror(errno));
	if ((size_t)snprintf(out, len, "%s/%s", real, base) >= len)
		return v05__fail(-ENAMETOOLONG, "journal path too long");
	return 0;
}

V05_API int v05_plugin_create(const char *name, const struct v05_config *c,
			      struct v05_plugin **out)
{
	char jpath[V05_JOURNAL_PATH_MAX] = "";
	struct v05_geometry g;
	struct v05_plugin *p;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "plugin_create: NULL out");
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
	g.support_capacity = 512;
	g.batch_count = c->max_batches;
	shm_config_from(&p->cfg, c, c->journal_path ? jpath : NULL);
	p->params = c->params;
	ret = v05__segment_create(name, &g, &p->cfg, sizeof(p->cfg), c->file_mode,
				  &p->seg);
	if (ret) {
		free(p);
		return ret;
	}
	ret = init_local(p);
	if (!ret)
		ret = open_journal(p);
	if (ret) {
		free_local(p);
		v05__waiter_fini(&p->waiter);
		unlink(p->seg.path); /* keeps the error message, unlike the API */
		v05__segment_detach(&p->seg);
		free(p);
		return ret;
	}
	*out = p;
	return 0;
}

/* ---- takeover ------------------------------------------------------------ */

static int by_seq(const void *a, const void *b, void *seg)
{
	uint64_t x = v05__slot(seg, *(const uint32_t *)a)->seq;
	uint64_t y = v05__slot(seg, *(const uint32_t *)b)->seq;

	return x < y ? -1 : x > y;
}

/* Put final groups the journal lacks back into it, in group order. */
static void rejournal(struct v05_plugin *p, uint32_t *list, uint32_t n)
{
	qsort_r(list, n, sizeof(*list), by_seq, &p->seg);
	for (uint32_t i = 0; i < n; i++)
		v05__journal_slot(p, list[i]);
}

/* Derive every local structure from the segment, then finish whatever the
 * previous owner was in the middle of. */
static int rebuild(struct v05_plugin *p)
{
	const struct v05_geometry *g = &p->seg.hdr.geo;
	uint8_t *used = calloc(g->slot_count, 1);
	uint32_t *rej = malloc((size_t)g->slot_count * sizeof(*rej));
	uint64_t open = 0, held = 0, final = 0;
	uint64_t durable = p->st->journal_durable_seq;
	uint32_t nrej = 0;

	if (!used || !rej) {
		free(used);
		free(rej);
		return v05__fail(-ENOMEM, "rebuild: out of memory");
	}
	/* A delete the owner died in may have left an entry behind a hole or
	 * twice (table.c): every entry reachable once before anything else. */
	v05__table_repair(&p->table);
	for (uint32_t i = 0; i <= p->table.mask;) {
		struct v05_prompt *e = &p->table.e[i];
		const struct v05_slot_hdr *h;
		struct batch_local *bl;

		if (!e->key) {
			i++;
			continue;
		}
		h = e->slot < g->slot_count ? v05__slot(&p->seg, e->slot) : NULL;
		if (!h || e->batch >= g->batch_count || h->key != e->key ||
		    (e->state == V05_P_FINAL && h->state != V05_S_FINAL) ||
		    (e->state != V05_P_FINAL && h->state != V05_S_FINAL &&
		     p->batch_recs[e->batch].id == 0)) {
			/* A submit the owner died in (its batch never went
			 * live), or an entry that does not add up: the caller
			 * never got its dispatch; forget it. Deleting shifts
			 * a later entry into i: look at i again. */
			v05__table_delete(&p->table, e);
			continue;
		}
		if (e->state != V05_P_FINAL && h->state == V05_S_FINAL) {
			/* The owner died inside finalize, between the slot's
			 * FINAL and the entry's: the group is final (it has
			 * its seq, maybe its journal record); finish the
			 * transition rather than decide it again. */
			e->state = V05_P_FINAL;
		}
		used[e->slot] = 1;
		if (e->state == V05_P_FINAL) {
			final++;
			i++;
			continue;
		}
		bl = &p->batches[e->batch];
		open++;
		bl->n_open++;
		if (e->state == V05_P_HELD) {
			held++;
			bl->n_held++;
			bl->held_samples += p->params.k_step;
			v05__batch_hold(p, e->batch, e->key);
		} else {
			bl->n_collecting++;
		}
		i++;
	}
	/* Slots: orphans (no entry) are freed; groups the journal lacks are
	 * written again; released ones wait for the journal as before. */
	for (uint32_t s = 0; s < g->slot_count; s++) {
		struct v05_slot_hdr *h = v05__slot(&p->seg, s);

		h->flags &= ~V05_SF_COMPLETION; /* republished to the reader */
		if (h->state == V05_S_FREE)
			continue;
		if ((h->state == V05_S_FINAL || h->state == V05_S_RELEASED) &&
		    p->journal && h->seq > durable)
			rej[nrej++] = s;
		if (h->state == V05_S_RELEASED ||
		    (h->state == V05_S_FINAL && !used[s])) {
			v05_store_relaxed(&h->state, (uint32_t)V05_S_RELEASED);
			p->pending_free[p->npending_free++] = s;
		} else if (h->state == V05_S_ACTIVE && !used[s]) {
			v05__arena_free(&p->arena, s);
		}
	}
	if (p->journal)
		rejournal(p, rej, nrej);
	free(used);
	free(rej);
	/* A live batch with nothing open: the owner died in finalize after
	 * its last prompt's entry went final and before the record was
	 * freed. Free it now, or it would hold its record for good. */
	for (uint32_t b = 0; b < g->batch_count; b++) {
		if (p->batch_recs[b].id && p->batches[b].n_open == 0) {
			p->batch_recs[b].id = 0;
			p->batch_recs[b].state = V05_B_FREE;
			v05__count(p, V05_C_BATCHES_DONE, 1);
		}
	}
	v05_store_relaxed(v05__ctr(p, V05_C_PROMPTS_OPEN), open);
	v05_store_relaxed(v05__ctr(p, V05_C_PROMPTS_HELD), held);
	v05_store_relaxed(v05__ctr(p, V05_C_PROMPTS_FINAL), final);

	/* Finish transitions, without decisions: v05_recover() reports the
	 * state as a whole afterwards. */
	v05__clock_refresh(p);
	p->silent = true;
	for (uint32_t i = 0; i <= p->table.mask; i++) {
		struct v05_prompt *e = &p->table.e[i];

		if (e->key && e->state == V05_P_COLLECTING &&
		    e->received == e->issued)
			v05__decide(p, e);
	}
	for (uint32_t b = 0; b < g->batch_count; b++)
		v05__policy_resume(p, b);
	p->silent = false;
	p->qlen = 0;
	p->qhead = 0;
	v05__free_journaled(p);
	return 0;
}

V05_API int v05_plugin_attach(const char *name, unsigned flags,
			      struct v05_plugin **out)
{
	struct v05_plugin *p;
	uint64_t me, old;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "plugin_attach: NULL out");
	if (flags & ~V05_ATTACH_ANY_UID)
		return v05__fail(-EINVAL, "unknown attach flags 0x%x", flags);
	me = v05__owner_self();
	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	p = calloc(1, sizeof(*p));
	if (!p)
		return v05__fail(-ENOMEM, "plugin: out of memory");
	ret = v05__segment_attach(name, V05_ROLE_OWNER, flags, &p->seg);
	if (ret) {
		free(p);
		return ret;
	}
	memcpy(&p->cfg, p->seg.hdr.config, sizeof(p->cfg));
	ret = shm_config_check(p);
	if (ret)
		goto fail_detach;
	/* A5: acquire pairs with the previous owner's release at close (R5),
	 * or with nothing if it died: its stores are complete either way. */
	old = v05_load_acquire(&p->seg.ctl->owner);
	if (old == me || (old && v05__owner_alive(old))) {
		ret = v05__fail(-EBUSY, "segment %s is owned by live pid %u", name,
				v05__owner_pid(old));
		goto fail_detach;
	}
	if (!v05_cas_acq_rel(&p->seg.ctl->owner, &old, me)) {
		ret = v05__fail(-EBUSY, "segment %s: another process took it over",
				name);
		goto fail_detach;
	}
	p->seg.ctl->owner_pid = (uint32_t)getpid();
	p->seg.ctl->owner_epoch++;
	if (old)
		v05__count(p, V05_C_TAKEOVERS, 1);
	ret = init_local(p);
	if (!ret)
		ret = open_journal(p);
	if (!ret)
		ret = rebuild(p);
	if (ret)
		goto fail_owned;
	*out = p;
	return 0;
fail_owned:
	free_local(p);
	if (p->journal)
		v05__journal_close(p->journal);
	v05__waiter_fini(&p->waiter);
	v05_store_release(&p->seg.ctl->owner, 0);
fail_detach:
	v05__segment_detach(&p->seg);
	free(p);
	return ret;
}

V05_API int v05_plugin_close(struct v05_plugin *p, unsigned flags)
{
	char name[V05_NAME_MAX + 1];
	int ret = 0;

	if (!p)
		return 0;
	if (flags & ~(V05_CLOSE_UNLINK | V05_CLOSE_KEEP_READABLE))
		return v05__fail(-EINVAL, "unknown close flags 0x%x", flags);
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
	snprintf(name, sizeof(name), "%s", p->seg.name);
	p->seg.ctl->wait_path = V05_WAIT_NONE;
	/* R5: every store of ours before the segment is free to take over. */
	v05_store_release(&p->seg.ctl->owner, 0);
	free_local(p);
	if (flags & V05_CLOSE_KEEP_READABLE)
		v05__segment_detach_readable(&p->seg);
	else
		v05__segment_detach(&p->seg);
	free(p);
	if (flags & V05_CLOSE_UNLINK) {
		int r = v05_segment_unlink(name);

		if (!ret)
			ret = r;
	}
	return ret;
}

/* ---- poll ------------------------------------------------------------------ */

static void journal_progress(struct v05_plugin *p)
{
	const char *msg;
	int err;

	if (!p->journal || p->st->journal_status != V05_JOURNAL_OK)
		return;
	err = v05__journal_pump(p->journal, 0);
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

static void disarm(struct v05_plugin *p)
{
	if (!p->armed)
		return;
	v05__waiter_disarm(&p->waiter);
	v05__doorbell_done(p->seg.bell);
	p->armed = false;
}

V05_API int v05_poll(struct v05_plugin *p, struct v05_decision *out,
		     uint32_t max)
{
	uint64_t now;
	int err;

	v05__clear_error();
	if (!p || (max && !out))
		return v05__fail(-EINVAL, "poll: NULL argument");
	if (p->queue_error)
		return v05__fail(p->queue_error,
				 "a decision could not be queued (out of memory); call v05_recover for the whole state");
	disarm(p);
	v05__clock_refresh(p);
	now = p->now_ns;
	v05__releases_drain(&p->compl, v05__release_from_reader, p);
	v05__check_reader(p, now);
	v05__lanes_drain(&p->lanes, POLL_BUDGET, DRAIN_BATCH, v05__apply_record, p);
	v05__lanes_reclaim_at(&p->lanes, now, v05__apply_record, p);
	now = v05__now_ns();
	v05__policy_deadlines(p, now);
	journal_progress(p);
	/* Relaxed: a display value. */
	v05_store_relaxed(&p->seg.ctl->heartbeat_ns, now);
	if (p->queue_error)
		return v05__fail(p->queue_error,
				 "a decision could not be queued (out of memory); call v05_recover for the whole state");
	err = p->journal_error_pending;
	if (err) {
		p->journal_error_pending = 0;
		return v05__fail(err, "%.*s", (int)sizeof(p->st->journal_error),
				 p->st->journal_error);
	}
	return (int)v05__dequeue(p, out, max);
}

V05_API int v05_recover(struct v05_plugin *p, struct v05_decision *out,
			uint32_t max)
{
	v05__clear_error();
	if (!p || (max && !out))
		return v05__fail(-EINVAL, "recover: NULL argument");
	if (p->queue_error) {
		/* A decision was lost to a failed allocation: drop the queue
		 * and hand out the whole state again, as after a takeover. */
		p->queue_error = 0;
		p->qlen = 0;
		p->qhead = 0;
		p->recovered = false;
	}
	/* The state is queued once; later calls hand out the rest. */
	for (uint32_t i = 0; !p->recovered && i <= p->table.mask; i++) {
		struct v05_prompt *e = &p->table.e[i];
		struct v05_decision d;

		if (!e->key)
			continue;
		memset(&d, 0, sizeof(d));
		d.key = e->key;
		d.slot = e->slot;
		d.gen = e->slot < p->seg.hdr.geo.slot_count ?
				v05__slot(&p->seg, e->slot)->gen : 0;
		d.batch = p->batch_recs[e->batch].id;
		d.flags = V05_DF_RECOVERED;
		if (e->state == V05_P_COLLECTING && e->issued != e->received) {
			d.kind = V05_DECISION_SAMPLE;
			d.samples = e->issued & ~e->received;
			d.k = (uint32_t)__builtin_popcountll(d.samples);
		} else if (e->state == V05_P_FINAL) {
			struct v05_slot_hdr *h = v05__slot(&p->seg, e->slot);

			d.kind = h->action == V05_ACTION_DROP ? V05_DECISION_DROP :
								V05_DECISION_FINAL;
			d.k = h->k;
			d.baseline = h->baseline;
			d.batch = h->batch_id;
		} else {
			continue; /* held: its release comes by itself */
		}
		v05__enqueue(p, &d);
	}
	for (uint32_t b = 0; !p->recovered && b < p->seg.hdr.geo.batch_count; b++) {
		if (p->batch_recs[b].id && p->batch_recs[b].state == V05_B_BARRIER) {
			struct v05_decision d;

			v05__barrier_decision(p, b, &d);
			d.flags = V05_DF_RECOVERED;
			v05__enqueue(p, &d);
		}
	}
	p->recovered = true;
	if (p->queue_error)
		return v05__fail(p->queue_error,
				 "recover: out of memory for the decision queue");
	return (int)v05__dequeue(p, out, max);
}

/* ---- waiting ------------------------------------------------------------- */

V05_API int v05_fd(struct v05_plugin *p)
{
	return p ? p->waiter.fd : -EINVAL;
}

V05_API int v05_arm(struct v05_plugin *p, int timeout_ms)
{
	int64_t dl;
	uint32_t word;
	int ret;

	if (!p)
		return -EINVAL;
	disarm(p);
	if (p->qlen || p->journal_error_pending || p->queue_error)
		return 1;
	dl = v05__policy_next_deadline_ns(p, v05__now_ns());
	if (dl == 0)
		return 1;
	if (dl > 0) {
		int ms = (int)((dl + 999999) / 1000000);

		if (timeout_ms < 0 || ms < timeout_ms)
			timeout_ms = ms;
	}
	word = v05__doorbell_prepare(p->seg.bell, v05__segment_asym(&p->seg));
	if (v05__lanes_pending(&p->lanes)) {
		v05__doorbell_done(p->seg.bell);
		return 1;
	}
	ret = v05__waiter_arm(&p->waiter, word, timeout_ms);
	if (ret) {
		v05__doorbell_done(p->seg.bell);
		return v05__fail(ret, "arm the doorbell wait: %s", strerror(-ret));
	}
	p->armed = true;
	v05__count(p, V05_C_WAITS, 1);
	return 0;
}

V05_API int v05_wait(struct v05_plugin *p, int timeout_ms)
{
	int ret = v05_arm(p, timeout_ms);

	if (ret != 0)
		return ret;
	ret = v05__waiter_block(&p->waiter);
	disarm(p);
	if (ret == -EINTR)
		return v05__fail(-EINTR, "wait interrupted by a signal");
	if (v05__lanes_pending(&p->lanes) ||
	    v05__policy_next_deadline_ns(p, v05__now_ns()) == 0) {
		v05__count(p, V05_C_WAKEUPS, 1);
		return 1;
	}
	return 0;
}

V05_API int v05_pending(struct v05_plugin *p)
{
	if (!p)
		return -EINVAL;
	return p->qlen || p->journal_error_pending || p->queue_error ||
	       v05__lanes_pending(&p->lanes) ||
	       v05__policy_next_deadline_ns(p, v05__now_ns()) == 0;
}

V05_API const char *v05_wait_path(const struct v05_plugin *p)
{
	return p ? v05__wait_path_name(p->waiter.path) : "none";
}

V05_API const char *v05_wait_reason(const struct v05_plugin *p)
{
	return p ? p->waiter.why : "";
}
