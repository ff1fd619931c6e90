/* SPDX-License-Identifier: MIT */
/* Readers: the trainer's process reads final groups without a copy and
 * hands the slots back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mechanics/internal.h"
#include "../shm/error.h"

struct v05_reader {
	struct v05_segment seg;
	struct v05_reader_rings rings;
	uint64_t *delivered; /* generation last delivered per slot, +1 (64-bit:
			      * generations use all 32 bits) */
};

V05_API int v05_reader_open(const char *name, unsigned flags,
			    struct v05_reader **out)
{
	struct v05_reader *r;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "reader_open: NULL out");
	r = calloc(1, sizeof(*r));
	if (!r)
		return v05__fail(-ENOMEM, "reader: out of memory");
	ret = v05__segment_attach(name, V05_ROLE_READER, flags, &r->seg);
	if (ret)
		goto fail;
	r->delivered = calloc(r->seg.hdr.geo.slot_count, sizeof(*r->delivered));
	if (!r->delivered) {
		ret = v05__fail(-ENOMEM, "reader: out of memory");
		goto fail_detach;
	}
	ret = v05__reader_claim(&r->seg, &r->rings);
	if (ret)
		goto fail_detach;
	*out = r;
	return 0;
fail_detach:
	v05__segment_detach(&r->seg);
fail:
	free(r->delivered);
	free(r);
	return ret;
}

V05_API int v05_reader_next(struct v05_reader *r, struct v05_group *g)
{
	struct v05_completion c;
	int ret;

	v05__clear_error();
	if (!r || !g)
		return v05__fail(-EINVAL, "reader_next: NULL argument");
	while ((ret = v05__reader_next(&r->rings, &c)) == 1) {
		struct v05_slot_hdr *h;

		/* The entry comes from shared memory: check the slot index
		 * before using it, then the slot against the entry. */
		if (c.slot >= r->seg.hdr.geo.slot_count)
			continue;
		h = v05__slot(&r->seg, c.slot);
		/* A4: pairs with the plugin's R4 (the completion's own R2/A2
		 * already ordered it; this also catches reuse). */
		if (v05_load_acquire(&h->state) != V05_S_FINAL ||
		    h->gen != c.gen || h->key != c.key)
			continue; /* stale: the slot was reused since (an entry
				   * from before a takeover or a reset) */
		if (r->delivered[c.slot] == (uint64_t)c.gen + 1)
			continue; /* republished after a takeover: seen */
		r->delivered[c.slot] = (uint64_t)c.gen + 1;
		v05__fill_group(&r->seg, c.slot, h, g);
		return 1;
	}
	return ret; /* 0, or -EIO: the ring's indices are impossible */
}

V05_API int v05_reader_release(struct v05_reader *r, const struct v05_group *g)
{
	if (!r || !g || g->slot >= r->seg.hdr.geo.slot_count)
		return v05__fail(-EINVAL, "reader_release: bad group");
	if (v05__reader_release(&r->rings, g->slot, g->gen))
		return v05__fail(-EAGAIN, "reader_release: the release ring is full (the plugin has not polled)");
	return 0;
}

V05_API int v05_reader_close(struct v05_reader *r)
{
	if (!r)
		return 0;
	v05__reader_unclaim(&r->rings);
	v05__segment_detach(&r->seg);
	free(r->delivered);
	free(r);
	return 0;
}
