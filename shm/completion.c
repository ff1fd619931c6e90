/* SPDX-License-Identifier: MIT */
#include "completion.h"

#include <errno.h>
#include <string.h>

#include "error.h"
#include "proc.h"

static struct v05_completion *completion_slots(struct v05_ring_hdr *h)
{
	return (struct v05_completion *)(void *)(h + 1);
}

static struct v05_release *release_slots(struct v05_ring_hdr *h)
{
	return (struct v05_release *)(void *)(h + 1);
}

static void rings_of(struct v05_segment *seg, struct v05_ring_hdr **ch,
		     struct v05_ring_hdr **rh)
{
	*ch = V05_AT(struct v05_ring_hdr, seg->region[V05_REGION_COMPLETION], 0);
	*rh = V05_AT(struct v05_ring_hdr, seg->region[V05_REGION_RELEASE], 0);
}

void v05__completions_init(struct v05_completions *c, struct v05_segment *seg)
{
	uint32_t cap = seg->hdr.geo.ring_capacity;

	rings_of(seg, &c->ch, &c->rh);
	v05__ring_prod_init(&c->out, c->ch, completion_slots(c->ch), cap,
			    sizeof(struct v05_completion));
	v05__ring_cons_init(&c->back, c->rh, release_slots(c->rh), cap,
			    sizeof(struct v05_release));
}

uint64_t v05__completions_reader(const struct v05_completions *c)
{
	/* Acquire: pairs with the reader's claim CAS (its release half). */
	return v05_load_acquire(&c->ch->owner);
}

int v05__completion_push(struct v05_completions *c, uint64_t key,
			 uint32_t slot, uint32_t gen)
{
	struct v05_completion *e;

	if (v05__ring_prod_reserve(&c->out, 1))
		return -EAGAIN;
	e = v05__ring_prod_slot(&c->out, 0);
	e->key = key;
	e->slot = slot;
	e->gen = gen;
	v05__ring_prod_commit(&c->out, 1);
	v05__ring_prod_publish(&c->out); /* R2 */
	return 0;
}

uint32_t v05__releases_drain(struct v05_completions *c, v05_release_fn fn,
			     void *ctx)
{
	int64_t avail = v05__ring_cons_avail(&c->back);
	uint32_t n;

	if (avail < 0) {
		/* A reader claiming more releases than fit: ignore them. */
		v05__ring_cons_resync(&c->back);
		return 0;
	}
	n = (uint32_t)avail;
	for (uint32_t i = 0; i < n; i++) {
		const struct v05_release *r = v05__ring_cons_slot(&c->back, i);
		/* Copy before use: the reader may rewrite its ring. */
		uint32_t slot = r->slot, gen = r->gen;

		fn(ctx, slot, gen);
	}
	if (n)
		v05__ring_cons_release(&c->back, n); /* R1 */
	return n;
}

uint32_t v05__completions_reset(struct v05_completions *c, v05_release_fn fn,
				void *ctx)
{
	uint64_t owner = v05__completions_reader(c);
	uint32_t n = v05__releases_drain(c, fn, ctx);

	/*
	 * The dead reader mapped both rings writable, so any of their four
	 * indices may hold a stray value it stored. With it gone this process
	 * is the only writer, and it knows the true values: its own tail of
	 * the completion ring (everything unread is dropped, head = tail) and
	 * its own head of the release ring (all of it was just applied).
	 * Both indices of both rings are restored, so the next reader's
	 * cached copies start right (ring_cons_init / ring_prod_init).
	 */
	v05_store_release(&c->ch->tail, c->out.tail); /* R2 */
	v05_store_release(&c->ch->head, c->out.tail); /* R1 */
	c->out.head_cache = c->out.tail;
	c->out.published = c->out.tail;
	v05_store_release(&c->rh->head, c->back.head); /* R1 */
	v05_store_release(&c->rh->tail, c->back.head);
	c->back.tail_cache = c->back.head;
	if (owner)
		v05_cas_acq_rel(&c->ch->owner, &owner, 0); /* R3 */
	return n;
}

int v05__reader_claim(struct v05_segment *seg, struct v05_reader_rings *r)
{
	uint32_t cap = seg->hdr.geo.ring_capacity;
	uint64_t me = v05__owner_self(), cur;

	memset(r, 0, sizeof(*r));
	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	rings_of(seg, &r->ch, &r->rh);
	cur = v05_load_acquire(&r->ch->owner);
	if (cur && v05__owner_alive(cur))
		return v05__fail(-EBUSY, "segment %s has a reader: pid %u",
				 seg->name, v05__owner_pid(cur));
	if (cur)
		return v05__fail(-EBUSY,
				 "segment %s: the last reader (pid %u) died; the plugin frees its claim at its next poll",
				 seg->name, v05__owner_pid(cur));
	/* A3: acquire the previous reader's (or the plugin's reset) R3. */
	if (!v05_cas_acq_rel(&r->ch->owner, &cur, me))
		return v05__fail(-EBUSY, "segment %s: another reader won",
				 seg->name);
	r->owner = me;
	v05__ring_cons_init(&r->in, r->ch, completion_slots(r->ch), cap,
			    sizeof(struct v05_completion));
	v05__ring_prod_init(&r->rel, r->rh, release_slots(r->rh), cap,
			    sizeof(struct v05_release));
	return 0;
}

void v05__reader_unclaim(struct v05_reader_rings *r)
{
	if (r->owner) {
		v05__ring_prod_publish(&r->rel);
		v05_store_release(&r->ch->owner, 0); /* R3 */
		r->owner = 0;
	}
}

int v05__reader_next(struct v05_reader_rings *r, struct v05_completion *out)
{
	int64_t avail = v05__ring_cons_avail(&r->in);
	const struct v05_completion *e;

	if (avail < 0) {
		/* An impossible fill: the cached tail may be a stray value
		 * (the plugin rewrites the shared one at each publish and at
		 * a reset); read it again before giving up. A2. */
		r->in.tail_cache = v05_load_acquire(&r->ch->tail);
		avail = v05__ring_cons_avail(&r->in);
		if (avail < 0) {
			/* Do not keep a bad value cached: the next call reads
			 * the shared tail afresh. */
			r->in.tail_cache = r->in.head;
			return v05__fail(-EIO,
					 "completion ring: tail %u is more than %u ahead of head %u",
					 v05_load_relaxed(&r->ch->tail),
					 r->in.mask + 1, r->in.head);
		}
	}
	if (avail == 0)
		return 0;
	e = v05__ring_cons_slot(&r->in, 0);
	out->key = e->key;
	out->slot = e->slot;
	out->gen = e->gen;
	v05__ring_cons_release(&r->in, 1); /* R1 */
	return 1;
}

int v05__reader_release(struct v05_reader_rings *r, uint32_t slot, uint32_t gen)
{
	struct v05_release *e;

	if (v05__ring_prod_reserve(&r->rel, 1))
		return -EAGAIN;
	e = v05__ring_prod_slot(&r->rel, 0);
	e->slot = slot;
	e->gen = gen;
	v05__ring_prod_commit(&r->rel, 1);
	v05__ring_prod_publish(&r->rel); /* R2 */
	return 0;
}
