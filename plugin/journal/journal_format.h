/* SPDX-License-Identifier: MIT */
/*
 * The journal's file format and its reader (v05ctl journal, takeover,
 * fuzzing); the writer is journal.h.
 *
 * File: a 256-byte header, then records back to back. All little-endian.
 *   record = fixed part (112 bytes, struct v05_jrec), the uid padded to 8
 *            bytes, k float32 rewards, k float32 advantages.
 *   checksum = XXH3_64 of the record's bytes after the checksum field.
 */
#ifndef V05_PLUGIN_JOURNAL_FORMAT_H
#define V05_PLUGIN_JOURNAL_FORMAT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define V05_JOURNAL_MAGIC 0x314c4e524a353076ull /* "v05JRNL1" */
#define V05_JREC_MAGIC 0x4a353076u             /* "v05J"     */
#define V05_JOURNAL_VERSION 2u /* 2: the keep mask (reinforce-ada) */

struct v05_journal_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_size; /* 256 */
	uint64_t created_ns;
	char segment[224];
	uint64_t checksum; /* XXH3_64 of the bytes before it */
};
static_assert(sizeof(struct v05_journal_hdr) == 256, "journal header ABI");

struct v05_jrec {
	uint32_t magic;
	uint32_t size;     /* whole record, multiple of 8 */
	uint64_t checksum; /* of bytes [16, size) */
	uint64_t seq;
	uint64_t key;
	uint64_t batch;
	double prior, baseline, sigma, mean;
	uint64_t submit_ns, final_ns; /* CLOCK_REALTIME */
	uint32_t k, action, mode, uid_len;
	uint64_t keep; /* bit i: sample i is trained on */
};
static_assert(sizeof(struct v05_jrec) == 112, "journal record ABI");

#define V05_JREC_MAX (112u + 128u + 8u * 64u)

static inline uint32_t v05__jrec_size(uint32_t uid_len, uint32_t k)
{
	return 112u + ((uid_len + 7u) & ~7u) + 8u * k;
}

enum v05_journal_tail {
	V05_JTAIL_CLEAN = 0, /* ends exactly after a valid record             */
	V05_JTAIL_TORN,      /* ends in an incomplete or unchecked last record */
	V05_JTAIL_CORRUPT,   /* a bad record with more data after it          */
	V05_JTAIL_BAD_HEADER,/* not a v05 journal                              */
};

struct v05_jentry {
	const struct v05_jrec *rec; /* fixed part, 8-byte aligned copy */
	const uint8_t *uid;
	const float *rewards, *advantages;
};

struct v05_jscan {
	uint64_t records;
	uint64_t valid_bytes; /* header + whole valid records              */
	uint64_t last_seq;
	uint64_t duplicates;  /* records whose seq was not above the last   */
	uint32_t tail;        /* enum v05_journal_tail                      */
	uint64_t bad_offset;  /* where the scan stopped, if not clean       */
	uint32_t version;     /* the header's, once its magic matched: a
			       * journal of another format version is
			       * named as such, not as "not a journal"      */
};

/*
 * Scan a journal image. fn (may be NULL) sees each valid record in order;
 * returning non-zero stops the scan. Never reads outside [data, data+size).
 */
int v05__journal_scan(const uint8_t *data, size_t size,
		      int (*fn)(void *ctx, const struct v05_jentry *e),
		      void *ctx, struct v05_jscan *res);

const char *v05__journal_tail_name(uint32_t tail);

#endif
