/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a reader writes any values into the ring indices it
 * can reach (the completion ring's head and tail, the release ring's head
 * and tail), then either dies (the plugin resets its claim) or stays.
 * Input:
 *   byte 0       bit 0 set = the reader dies and the plugin resets;
 *                clear = the same reader goes on reading
 *   bytes 1-16   four u32: completion tail, completion head, release
 *                head, release tail (little endian), as the reader stores
 *   byte 17      how many completions the plugin publishes before (mod 8)
 * Afterwards, whatever the values: the plugin applied at most a ring's
 * worth of the reader's releases (a release tail claiming more is
 * ignored, not walked: ring.h's guard); a reader (the next one, or the
 * same) gets every completion the plugin publishes from then on, in
 * order, and its releases reach the plugin; a read answers 1, 0 or -EIO
 * and never reads outside the ring.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "v05-internal/shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_reader: invariant broken: %s\n", what);
		abort();
	}
}

static void setup(void)
{
	static char dir[] = "/tmp/v05-fuzz-reader-XXXXXX";
	static int done;

	if (done)
		return;
	if (!mkdtemp(dir))
		abort();
	setenv("V05_SHM_DIR", dir, 1);
	done = 1;
}

struct got {
	uint32_t n, slot, gen, max;
};

static void on_release(void *ctx, uint32_t slot, uint32_t gen)
{
	struct got *g = ctx;

	g->n++;
	/* At once, not after walking 2^31 of them. */
	check(g->n <= g->max, "a reset applies at most a ring's worth of releases");
	g->slot = slot;
	g->gen = gen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct v05_geometry geo;
	struct v05_segment seg, rseg;
	struct v05_completions c;
	struct v05_reader_rings r;
	struct v05_completion e;
	struct got got = { 0, 0, 0, 0 };
	uint32_t v[4], before;
	int ret;

	setup();
	if (size < 18)
		return 0;
	memcpy(v, data + 1, 16);
	before = data[17] % 8u;
	memset(&geo, 0, sizeof(geo));
	geo.lane_count = 1;
	geo.lane_capacity = 16;
	geo.slot_count = 8;
	geo.table_capacity = 16;
	geo.k_max = 4;
	geo.ring_capacity = 8;
	got.max = geo.ring_capacity;
	geo.support_capacity = 1;
	geo.batch_count = 1;
	if (v05__segment_create("fuzz", &geo, NULL, 0, 0600, &seg))
		abort();
	v05__completions_init(&c, &seg);
	for (uint32_t i = 0; i < before; i++)
		check(v05__completion_push(&c, 100 + i, i, 1) == 0, "push before");
	check(v05__segment_attach("fuzz", V05_ROLE_READER, 0, &rseg) == 0, "attach");
	check(v05__reader_claim(&rseg, &r) == 0, "claim");
	/* The reader's stray stores. */
	r.ch->tail = v[0];
	r.ch->head = v[1];
	r.rh->head = v[2];
	r.rh->tail = v[3];
	if (data[0] & 1) {
		/* It dies: the plugin applies what it can and resets. */
		r.owner = 0; /* (its claim word stays; reset clears it) */
		v05__completions_reset(&c, on_release, &got);
		check(v05__reader_claim(&rseg, &r) == 0, "next reader claims");
	} else {
		/* It stays: reads answer 1, 0 or -EIO, within the ring. */
		for (int i = 0; i < 16; i++) {
			ret = v05__reader_next(&r, &e);
			check(ret == 1 || ret == 0 || ret == -EIO, "read answers");
			if (ret <= 0)
				break;
		}
		/* The plugin's next publish rewrites the tail it owns; the
		 * reader still cannot trust head, which it wrote itself:
		 * only a reset (the dies branch) restores that. */
		v05__reader_unclaim(&r);
		v05__completions_reset(&c, on_release, &got);
		check(v05__reader_claim(&rseg, &r) == 0, "reclaim");
	}
	/* From here on, everything published arrives, in order. */
	for (uint32_t i = 0; i < 3; i++)
		check(v05__completion_push(&c, 500 + i, i, 7 + i) == 0, "push after");
	for (uint32_t i = 0; i < 3; i++) {
		ret = v05__reader_next(&r, &e);
		check(ret == 1 && e.key == 500 + i && e.slot == i && e.gen == 7 + i,
		      "the next reader gets what is published after the reset");
		check(v05__reader_release(&r, e.slot, e.gen) == 0, "release");
	}
	check(v05__reader_next(&r, &e) == 0, "nothing more");
	got.n = 0;
	check(v05__releases_drain(&c, on_release, &got) == 3 && got.n == 3 &&
	      got.slot == 2 && got.gen == 9, "releases reach the plugin");
	v05__reader_unclaim(&r);
	v05__segment_detach(&rseg);
	v05__segment_detach(&seg);
	v05_segment_unlink("fuzz");
	return 0;
}
