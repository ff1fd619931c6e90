/* SPDX-License-Identifier: MIT */
/* Journal scanning: every byte read from the file is bounds-checked. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "journal_format.h"
#include "v05/stats.h"

const char *v05__journal_tail_name(uint32_t tail)
{
	switch (tail) {
	case V05_JTAIL_CLEAN:
		return "clean";
	case V05_JTAIL_TORN:
		return "torn";
	case V05_JTAIL_CORRUPT:
		return "corrupt";
	case V05_JTAIL_BAD_HEADER:
		return "bad header";
	}
	return "?";
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* A record at p with n bytes available: its size if valid, else 0. */
static uint32_t check_record(const uint8_t *p, size_t n, struct v05_jrec *fixed)
{
	if (n < sizeof(*fixed))
		return 0;
	memcpy(fixed, p, sizeof(*fixed)); /* aligned private copy */
	if (fixed->magic != V05_JREC_MAGIC || fixed->k > V05_K_LIMIT ||
	    fixed->uid_len > 128 || fixed->action > 2 ||
	    fixed->size != v05__jrec_size(fixed->uid_len, fixed->k) ||
	    fixed->size > n)
		return 0;
	if (XXH3_64bits(p + 16, fixed->size - 16) != fixed->checksum)
		return 0;
	return fixed->size;
}

int v05__journal_scan(const uint8_t *data, size_t size,
		      int (*fn)(void *ctx, const struct v05_jentry *e),
		      void *ctx, struct v05_jscan *res)
{
	struct v05_journal_hdr h;
	size_t pos = sizeof(h);
	/* Aligned scratch for one record's arrays. */
	_Alignas(8) uint8_t rec[V05_JREC_MAX];

	memset(res, 0, sizeof(*res));
	if (size < sizeof(h)) {
		/* Shorter than a header: a torn first header only if what is
		 * there is the start of one (magic, version, size); any other
		 * short file is not a journal, and nobody may truncate it. */
		struct v05_journal_hdr want;
		size_t n = size < offsetof(struct v05_journal_hdr, created_ns) ?
				   size : offsetof(struct v05_journal_hdr, created_ns);

		memset(&want, 0, sizeof(want));
		want.magic = V05_JOURNAL_MAGIC;
		want.version = V05_JOURNAL_VERSION;
		want.hdr_size = sizeof(want);
		if (size == 0 || memcmp(data, &want, n) != 0) {
			res->tail = V05_JTAIL_BAD_HEADER;
			return -EBADMSG;
		}
		res->tail = V05_JTAIL_TORN;
		return 0;
	}
	memcpy(&h, data, sizeof(h));
	if (h.magic == V05_JOURNAL_MAGIC)
		res->version = h.version;
	if (h.magic != V05_JOURNAL_MAGIC || h.version != V05_JOURNAL_VERSION ||
	    h.hdr_size != sizeof(h) ||
	    h.checksum != XXH3_64bits(&h, offsetof(struct v05_journal_hdr, checksum))) {
		res->tail = V05_JTAIL_BAD_HEADER;
		return -EBADMSG;
	}
	res->valid_bytes = pos;
	while (pos < size) {
		struct v05_jrec fixed;
		struct v05_jentry e;
		uint32_t n = check_record(data + pos, size - pos, &fixed);

		if (!n) {
			uint32_t claimed = 0;

			res->bad_offset = pos;
			if (size - pos >= 8)
				memcpy(&claimed, data + pos + 4, 4);
			/* The last write, cut short or not yet checksummed
			 * whole: torn. Anything with more data after it, or a
			 * full-size record that fails its checksum while
			 * records follow: corrupt. */
			if (size - pos < sizeof(fixed) ||
			    all_zero(data + pos, size - pos) ||
			    (claimed >= sizeof(fixed) && claimed <= V05_JREC_MAX &&
			     (uint64_t)pos + claimed >= size))
				res->tail = V05_JTAIL_TORN;
			else
				res->tail = V05_JTAIL_CORRUPT;
			return 0;
		}
		memcpy(rec, data + pos, n);
		e.rec = (const struct v05_jrec *)(void *)rec;
		e.uid = rec + sizeof(fixed);
		e.rewards = (const float *)(void *)(rec + sizeof(fixed) +
						    ((fixed.uid_len + 7u) & ~7u));
		e.advantages = e.rewards + fixed.k;
		if (res->records && fixed.seq <= res->last_seq)
			res->duplicates++;
		else
			res->last_seq = fixed.seq;
		res->records++;
		pos += n;
		res->valid_bytes = pos;
		if (fn && fn(ctx, &e))
			break;
	}
	res->tail = V05_JTAIL_CLEAN;
	return 0;
}
