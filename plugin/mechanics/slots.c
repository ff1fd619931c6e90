/* SPDX-License-Identifier: MIT */
/*
 * Final groups: zero-copy views, release, the completion ring.
 *
 * Who holds a final slot: the engine, from its FINAL/DROP decision until
 * v05_release; and the trainer's reader, from the completion record
 * published to it (V05_SF_COMPLETION) until it releases the group. The slot
 * is reused only when every holder is done (V05_SF_ENGINE_DONE and no
 * completion outstanding) and the journal has the group. A reader that dies
 * drops its holds (check_reader): the groups it read and did not release
 * are offered to the next reader, with those no reader had yet; a group a
 * reader released (V05_SF_READER_DONE) or the engine released is not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "../journal/journal.h"
#include "../../shm/error.h"
#include "../../shm/proc.h"
#include "one_thread.h"

#define READER_CHECK_NS 50000000ull

static int slot_ok(struct v05_plugin *p, uint32_t slot)
{
	return slot < p->seg.hdr.geo.slot_count;
}

void v05__fill_group(const struct v05_segment *seg, uint32_t slot,
		     struct v05_slot_hdr *h, struct v05_group *g)
{
	/* Each bounded field is read once, then checked and used: a reader
	 * process must not index with a value that changed in between. */
	uint32_t uid_len = h->uid_len, k = h->k;

	memset(g, 0, sizeof(*g));
	g->key = h->key;
	g->seq = h->seq;
	g->batch = h->batch_id;
	g->rewards = v05__slot_rewards(h);
	g->advantages = v05__slot_advantages(seg, h);
	g->uid = h->uid;
	g->uid_len = uid_len <= V05_UID_MAX ? uid_len : 0;
	g->prior = h->prior;
	g->baseline = h->baseline;
	g->sigma = h->sigma;
	g->mean = h->mean;
	g->slot = slot;
	g->gen = h->gen;
	g->k = k <= seg->hdr.geo.k_max ? k : 0;
	g->action = h->action;
	/* Bits past k would name samples that are not there. */
	g->keep = h->keep & (g->k == 64 ? ~0ull : (1ull << g->k) - 1);
}

V05_API int v05_group(struct v05_plugin *p, uint32_t slot, struct v05_group *g)
{
	V05_ONE_THREAD(p, "group");
	struct v05_slot_hdr *h;

	v05__clear_error();
	if (!p || !g || !slot_ok(p, slot))
		return v05__fail(-EINVAL, "group: bad slot %u", slot);
	h = v05__slot(&p->seg, slot);
	/* A4: pairs with R4 in finalize. */
	if (v05_load_acquire(&h->state) != V05_S_FINAL)
		return v05__fail(-EAGAIN, "slot %u holds no final group", slot);
	v05__fill_group(&p->seg, slot, h, g);
	return 0;
}

V05_API int v05_slot_uid(struct v05_plugin *p, uint32_t slot, void *buf,
			 uint32_t len)
{
	V05_ONE_THREAD(p, "slot_uid");
	struct v05_slot_hdr *h;
	uint32_t n;

	v05__clear_error();
	if (!p || !slot_ok(p, slot) || (!buf && len))
		return v05__fail(-EINVAL, "slot_uid: bad argument");
	h = v05__slot(&p->seg, slot);
	if (h->state == V05_S_FREE)
		return v05__fail(-EINVAL, "slot %u is free", slot);
	n = h->uid_len;
	if (n > V05_UID_MAX)
		n = V05_UID_MAX;
	if (len) /* len 0 asks for the length only; buf may be NULL */
		memcpy(buf, h->uid, n < len ? n : len);
	return (int)n;
}

V05_API int v05_slot_offsets(struct v05_plugin *p, uint32_t slot,
			     uint64_t *rewards_off, uint64_t *adv_off)
{
	V05_ONE_THREAD(p, "slot_offsets");
	struct v05_slot_hdr *h;

	if (!p || !slot_ok(p, slot))
		return v05__fail(-EINVAL, "slot_offsets: bad slot %u", slot);
	h = v05__slot(&p->seg, slot);
	if (rewards_off)
		*rewards_off = (uint64_t)((uint8_t *)v05__slot_rewards(h) - p->seg.base);
	if (adv_off)
		*adv_off = (uint64_t)((uint8_t *)v05__slot_advantages(&p->seg, h) -
				      p->seg.base);
	return 0;
}

/* Free slots whose groups are now in the journal (or whose journal died). */
void v05__free_journaled(struct v05_plugin *p)
{
	uint64_t durable = p->journal ? v05__journal_durable(p->journal) : UINT64_MAX;
	uint32_t kept = 0;

	if (p->journal && v05__journal_error(p->journal, NULL))
		durable = UINT64_MAX; /* it will never catch up: do not leak */
	if (p->journal)
		p->st->journal_durable_seq = v05__journal_durable(p->journal);
	for (uint32_t i = 0; i < p->npending_free; i++) {
		uint32_t slot = p->pending_free[i];

		if (v05__slot(&p->seg, slot)->seq <= durable)
			v05__arena_free(&p->arena, slot);
		else
			p->pending_free[kept++] = slot;
	}
	p->npending_free = kept;
}

/* Both holders are done: back to the arena once the journal has it. */
static void slot_free(struct v05_plugin *p, uint32_t slot)
{
	struct v05_slot_hdr *h = v05__slot(&p->seg, slot);

	if (p->journal && !v05__journal_error(p->journal, NULL) &&
	    h->seq > v05__journal_durable(p->journal)) {
		/* Holders are done, the journal is not yet: keep the data. */
		v05_store_relaxed(&h->state, (uint32_t)V05_S_RELEASED);
		p->pending_free[p->npending_free++] = slot;
		return;
	}
	v05__arena_free(&p->arena, slot);
}

void v05__slot_release(struct v05_plugin *p, uint32_t slot)
{
	struct v05_slot_hdr *h = v05__slot(&p->seg, slot);
	struct v05_prompt *e = v05__table_find(&p->table, h->key);

	/* The flag first: an owner killed before the delete leaves an entry
	 * that rebuild sees as released, not a slot it could free under a
	 * reader. Then the prompt is done for the engine: its uid may come
	 * again. */
	h->flags |= V05_SF_ENGINE_DONE;
	if (e && e->slot == slot)
		v05__table_delete(&p->table, e);
	v05__gauge(p, V05_C_PROMPTS_FINAL, -1);
	v05__count(p, V05_C_RELEASES, 1);
	if (!(h->flags & V05_SF_COMPLETION))
		slot_free(p, slot);
}

/* Free the final slots no holder has any more (after a reader's death, or
 * at takeover when their completions are gone). */
void v05__free_unheld(struct v05_plugin *p)
{
	for (uint32_t s = 0; s < p->seg.hdr.geo.slot_count; s++) {
		struct v05_slot_hdr *h = v05__slot(&p->seg, s);

		if (h->state == V05_S_FINAL &&
		    (h->flags & (V05_SF_ENGINE_DONE | V05_SF_COMPLETION)) ==
			    V05_SF_ENGINE_DONE)
			slot_free(p, s);
	}
}

V05_API int v05_release(struct v05_plugin *p, uint32_t slot, uint32_t gen,
			uint64_t key)
{
	V05_ONE_THREAD(p, "release");
	struct v05_slot_hdr *h;
	uint32_t state;

	v05__clear_error();
	if (!p || !slot_ok(p, slot))
		return v05__fail(-EINVAL, "release: bad slot %u", slot);
	h = v05__slot(&p->seg, slot);
	state = h->state;
	/* A slot keeps its generation until it is allocated again: the same
	 * generation on a free slot is a second release of this group. */
	if (h->gen == gen && (state == V05_S_FREE || state == V05_S_RELEASED ||
			      (h->flags & V05_SF_ENGINE_DONE)))
		return v05__fail(-EALREADY, "slot %u is already released", slot);
	/* A slot's generation starts at a random value at its first
	 * allocation (plugin.c, arena.c), so a decision of another plugin
	 * matches with odds of about 2^-32, and then its key must match. */
	if (h->gen != gen || h->key != key)
		return v05__fail(-ESTALE,
				 "release: slot %u now holds generation %u, not %u (a stale decision or another plugin's)",
				 slot, h->gen, gen);
	if (state != V05_S_FINAL)
		return v05__fail(-EBUSY, "slot %u is still collecting", slot);
	v05__slot_release(p, slot);
	return 0;
}

void v05__release_from_reader(void *ctx, uint32_t slot, uint32_t gen)
{
	struct v05_plugin *p = ctx;
	struct v05_slot_hdr *h;

	/* Both values come from another process: check before use. */
	if (!slot_ok(p, slot)) {
		v05__count(p, V05_C_RELEASES_BAD, 1);
		return;
	}
	h = v05__slot(&p->seg, slot);
	if (h->gen != gen || h->state != V05_S_FINAL ||
	    !(h->flags & V05_SF_COMPLETION)) {
		v05__count(p, V05_C_RELEASES_BAD, 1);
		return;
	}
	h->flags = (h->flags & ~V05_SF_COMPLETION) | V05_SF_READER_DONE;
	v05__count(p, V05_C_READER_RELEASES, 1);
	if (h->flags & V05_SF_ENGINE_DONE)
		slot_free(p, slot);
}

void v05__publish_completion(struct v05_plugin *p, uint32_t slot)
{
	struct v05_slot_hdr *h = v05__slot(&p->seg, slot);

	if (!v05__completions_reader(&p->compl)) {
		v05__count(p, V05_C_COMPLETIONS_SKIPPED, 1);
		return;
	}
	if (v05__completion_push(&p->compl, h->key, slot, h->gen) == 0) {
		h->flags |= V05_SF_COMPLETION;
		v05__count(p, V05_C_COMPLETIONS, 1);
	}
	else
		p->completion_backlog = true;
	/* Full (stale entries of slots released in process): left without
	 * the flag; v05__check_reader publishes it when room comes back. */
}

static int by_seq(const void *a, const void *b, void *seg)
{
	uint64_t x = v05__slot(seg, *(const uint32_t *)a)->seq;
	uint64_t y = v05__slot(seg, *(const uint32_t *)b)->seq;

	return x < y ? -1 : x > y;
}

void v05__sort_by_seq(const struct v05_segment *seg, uint32_t *slots,
		      uint32_t n)
{
	qsort_r(slots, n, sizeof(*slots), by_seq, (void *)seg);
}

/* Publish every final slot without a completion, in group order. */
static void republish(struct v05_plugin *p)
{
	uint32_t n = 0, cap = p->seg.hdr.geo.slot_count;
	uint32_t *list = malloc((size_t)cap * sizeof(*list));

	if (!list)
		return;
	for (uint32_t s = 0; s < cap; s++) {
		struct v05_slot_hdr *h = v05__slot(&p->seg, s);

		if (h->state == V05_S_FINAL &&
		    !(h->flags & (V05_SF_COMPLETION | V05_SF_ENGINE_DONE |
				  V05_SF_READER_DONE)))
			list[n++] = s;
	}
	v05__sort_by_seq(&p->seg, list, n);
	for (uint32_t i = 0; i < n; i++)
		v05__publish_completion(p, list[i]);
	free(list);
}

void v05__check_reader(struct v05_plugin *p, uint64_t now)
{
	uint64_t reader;

	if (now < p->next_reader_check_ns)
		return;
	p->next_reader_check_ns = now + READER_CHECK_NS;
	reader = v05__completions_reader(&p->compl);
	if (reader && !v05__owner_alive(reader)) {
		/* It read some completions it will never release: those
		 * slots get a new completion for the next reader. */
		v05__completions_reset(&p->compl, v05__release_from_reader, p);
		for (uint32_t s = 0; s < p->seg.hdr.geo.slot_count; s++)
			v05__slot(&p->seg, s)->flags &= ~V05_SF_COMPLETION;
		/* Its holds died with it. */
		v05__free_unheld(p);
		p->last_reader = 0;
		return;
	}
	/* A new reader gets every unreleased group; a backlog is retried. */
	if (reader && (reader != p->last_reader || p->completion_backlog)) {
		p->completion_backlog = false;
		republish(p);
	}
	p->last_reader = reader;
}
