/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed corpora of the fuzz targets from real objects made by
 * this library:
 *   attach/   the mode byte and the header of a real segment, for a few
 *             geometries
 *   lane/     records a real producer would write (shaped and raw), a
 *             duplicate, a sample not issued, an overrun tail
 *   journal/  a real journal of one batch: whole, cut short, records only,
 *             and with a byte flipped mid-file
 *   num/      option values, good and bad
 *   reader/   a reader's stray ring indices: none, one bad word in each
 *             place, all of them, with and without the reader's death
 *   gen_seeds CORPUS_DIR      (its attach/, lane/, journal/, num/, reader/
 *                             must exist)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "v05-internal/journal.h"
#include "v05-internal/shm.h"
#include "v05.h"

static int write_file(const char *dir, const char *sub, const char *file,
		      const void *a, size_t alen, const void *b, size_t blen)
{
	char path[4096];
	FILE *f;
	int bad;

	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, file);
	f = fopen(path, "wb");
	if (!f)
		return 1;
	bad = fwrite(a, 1, alen, f) != alen ||
	      (blen && fwrite(b, 1, blen, f) != blen);
	return fclose(f) | bad;
}

static int seed(const char *dir, const char *file, unsigned char mode,
		struct v05_geometry g)
{
	struct v05_segment seg;
	char name[64], path[4096];
	FILE *f;

	snprintf(name, sizeof(name), "seed-%d", (int)getpid());
	if (v05__segment_create(name, &g, "seed", 4, 0600, &seg))
		return 1;
	snprintf(path, sizeof(path), "%s/attach/%s", dir, file);
	f = fopen(path, "wb");
	if (!f)
		return 1;
	fputc(mode, f);
	fwrite(&seg.hdr, sizeof(seg.hdr), 1, f);
	fclose(f);
	v05__segment_detach(&seg);
	v05_segment_unlink(name);
	return 0;
}

/* Lane inputs: mode, tail advance, then 32-byte records (fuzz_lane.c). */
static int lane_seed(const char *dir, const char *file, uint8_t mode,
		     uint32_t adv, const struct v05_record *r, uint32_t n)
{
	uint8_t head[5] = { mode };

	memcpy(head + 1, &adv, 4);
	return write_file(dir, "lane", file, head, 5, r, n * sizeof(*r));
}

static int lane_seeds(const char *dir)
{
	struct v05_record r[8];
	int bad = 0;

	/* Shaped: key = prompt index; each prompt's samples 0 and 1. */
	for (uint32_t i = 0; i < 8; i++)
		r[i] = (struct v05_record){ .key = i / 2, .sample = i % 2,
					    .reward = i % 3 ? 1.0f : -1.0f };
	bad |= lane_seed(dir, "shaped-all-rewards", 1, 8, r, 8);
	/* A takeover after the polls; and the producer's other words (the
	 * last 16 bytes: its published head, its owner word, the doorbell
	 * and the sleeping flag), with and without a takeover. */
	bad |= lane_seed(dir, "shaped-takeover", 1 | 4, 8, r, 8);
	bad |= lane_seed(dir, "shaped-page-words", 1 | 2, 8, r, 8);
	bad |= lane_seed(dir, "shaped-page-words-takeover", 1 | 2 | 4, 8, r, 8);
	r[1] = r[0];
	bad |= lane_seed(dir, "shaped-duplicate", 1, 8, r, 8);
	r[2].sample = 5;
	r[3].key = 4; /* the key nobody submitted */
	r[4].reward = 2.0f;
	bad |= lane_seed(dir, "shaped-bad-records", 1, 8, r, 8);
	/* Raw: the seq a real producer writes at a fresh lane (0, 1, ...). */
	for (uint32_t i = 0; i < 8; i++)
		r[i].seq = i;
	bad |= lane_seed(dir, "raw-records", 0, 8, r, 8);
	bad |= lane_seed(dir, "raw-overrun", 0, 1000, r, 8);
	bad |= lane_seed(dir, "raw-overrun-page-takeover", 2 | 4, 1000, r, 8);
	/* Abort records (mode bit 3: the segment takes them): prompt 0
	 * rewarded once, aborted, rewarded after it; prompt 1 aborted with
	 * another instance's gen (odd: late); the key nobody submitted; an
	 * abort with a sample (corrupt); prompt 2 aborted. */
	memset(r, 0, sizeof(r));
	r[0] = (struct v05_record){ .key = 0, .sample = 0, .reward = 1.0f };
	r[1] = (struct v05_record){ .key = 0, .flags = V05_RECORD_ABORT };
	r[2] = (struct v05_record){ .key = 0, .sample = 1, .reward = 1.0f };
	r[3] = (struct v05_record){ .key = 1, .gen = 3,
				    .flags = V05_RECORD_ABORT };
	r[4] = (struct v05_record){ .key = 4, .flags = V05_RECORD_ABORT };
	r[5] = (struct v05_record){ .key = 3, .sample = 1,
				    .flags = V05_RECORD_ABORT };
	r[6] = (struct v05_record){ .key = 2, .flags = V05_RECORD_ABORT };
	r[7] = (struct v05_record){ .key = 3, .sample = 0, .reward = -1.0f };
	bad |= lane_seed(dir, "shaped-aborts", 1 | 8, 8, r, 8);
	bad |= lane_seed(dir, "shaped-aborts-takeover", 1 | 4 | 8, 8, r, 8);
	/* Raw aborts at the right seq: in a segment that does not take
	 * them (rejected for their kind), and in one that does. */
	for (uint32_t i = 0; i < 8; i++)
		r[i].seq = i;
	bad |= lane_seed(dir, "raw-aborts-off", 0, 8, r, 8);
	bad |= lane_seed(dir, "raw-aborts-on", 8, 8, r, 8);
	return bad;
}

/* One batch through a plugin with a journal; the journal's bytes. */
static uint8_t *real_journal(size_t *len)
{
	char name[64], path[128];
	struct v05_plugin *p;
	struct v05_producer *w;
	struct v05_decision d[64];
	struct v05_prompt_in in[4];
	struct v05_config c;
	uint8_t *buf = NULL;
	uint32_t finals = 0;
	FILE *f;
	long n;
	int m;

	snprintf(name, sizeof(name), "seed-j-%d", (int)getpid());
	snprintf(path, sizeof(path), "/tmp/v05-seed-%d.v05j", (int)getpid());
	v05_config_default(&c);
	c.max_prompts = 4;
	c.max_producers = 1;
	c.pad_multiple = 1;
	c.journal_path = path;
	if (v05_plugin_create(name, &c, &p))
		return NULL;
	if (v05_producer_open(name, 0, &w))
		return NULL;
	for (uint32_t i = 0; i < 4; i++)
		in[i] = (struct v05_prompt_in){ .uid = &"abcd"[i], .uid_len = 1,
						.prior = 0.6 - 0.4 * i };
	m = v05_submit(p, in, 4, d, NULL);
	while (m >= 0 && finals < 4) {
		for (int j = 0; j < m; j++) {
			if (d[j].kind != V05_DECISION_SAMPLE) {
				v05_release(p, d[j].slot, d[j].gen, d[j].key);
				finals++;
				continue;
			}
			for (uint32_t s = 0; s < 64; s++)
				if (d[j].samples >> s & 1)
					v05_producer_push(w, d[j].key, d[j].gen, s,
							  (s + j) % 3 ? 1.0f : -1.0f);
		}
		m = v05_poll(p, d, 64);
	}
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	f = fopen(path, "rb");
	if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) > 0 &&
	    !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)n)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n)
		*len = (size_t)n;
	else
		*len = 0;
	if (f)
		fclose(f);
	unlink(path);
	return *len ? buf : NULL;
}

static int journal_seeds(const char *dir)
{
	const size_t hdr = sizeof(struct v05_journal_hdr);
	uint8_t zero = 0, one = 1, two = 2;
	size_t n;
	uint8_t *j = real_journal(&n);
	int bad = 0;

	if (!j || n <= hdr + 40)
		return 1;
	bad |= write_file(dir, "journal", "whole", &zero, 1, j, n);
	bad |= write_file(dir, "journal", "torn", &zero, 1, j, n - 20);
	bad |= write_file(dir, "journal", "records-only", &one, 1, j + hdr, n - hdr);
	bad |= write_file(dir, "journal", "records-reframed", &two, 1, j + hdr, n - hdr);
	/* The same through the writer's open path (bit 2 of byte 0), and
	 * what a journal path may name by mistake or on purpose: a short
	 * unrelated file, a torn first header, an empty file. */
	{
		uint8_t four = 4, five = 5, six = 6;

		bad |= write_file(dir, "journal", "open-whole", &four, 1, j, n);
		bad |= write_file(dir, "journal", "open-torn", &four, 1, j, n - 20);
		bad |= write_file(dir, "journal", "open-records-only", &five, 1,
				  j + hdr, n - hdr);
		bad |= write_file(dir, "journal", "open-records-reframed", &six, 1,
				  j + hdr, n - hdr);
		bad |= write_file(dir, "journal", "open-short-unrelated", &four, 1,
				  "hello world\n", 12);
		bad |= write_file(dir, "journal", "open-torn-header", &four, 1, j, 100);
		bad |= write_file(dir, "journal", "open-empty", &four, 1, NULL, 0);
	}
	j[hdr + 40] ^= 0x5a;
	bad |= write_file(dir, "journal", "flipped", &zero, 1, j, n);
	bad |= write_file(dir, "journal", "open-flipped", &(uint8_t){ 4 }, 1, j, n);
	free(j);
	return bad;
}

static int reader_seeds(const char *dir)
{
	int bad = 0;

	for (int die = 0; die < 2; die++) {
		for (int which = -1; which < 5; which++) {
			uint8_t in[18] = { (uint8_t)die };
			uint32_t v[4] = { 3, 3, 0, 0 }; /* what is true: 3 published */
			char file[32];

			if (which >= 0 && which < 4)
				v[which] = 0x7fff0000u;
			if (which == 4)
				v[0] = v[1] = v[2] = v[3] = UINT32_MAX;
			memcpy(in + 1, v, 16);
			in[17] = 3;
			snprintf(file, sizeof(file), "%s-%s", die ? "dies" : "stays",
				 which < 0 ? "clean" : which == 4 ? "all-bad" :
				 (const char *[]){ "ctail", "chead", "rhead",
						   "rtail" }[which]);
			bad |= write_file(dir, "reader", file, in, sizeof(in), NULL, 0);
		}
	}
	return bad;
}

static int num_seeds(const char *dir)
{
	static const char *const v[] = {
		"0.5", "-1", "+3.25e-2", "16", "1,1,1,-1", "0.25,-0.5,1",
		"1e308", "1e309", "nan", "inf", "0x1p3", " 1", "1.", ".5", "1,,2",
		"18446744073709551615", "18446744073709551616", "", "-", "1e",
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char file[32];

		snprintf(file, sizeof(file), "value-%02zu", i);
		bad |= write_file(dir, "num", file, v[i], strlen(v[i]), NULL, 0);
	}
	return bad;
}

int main(int argc, char **argv)
{
	struct v05_geometry small = { .lane_count = 1, .lane_capacity = 16,
				      .table_capacity = 2, .slot_count = 1,
				      .k_max = 1, .ring_capacity = 1,
				      .support_capacity = 1, .batch_count = 1 };
	struct v05_geometry typical = { .lane_count = 8, .lane_capacity = 1024,
					.table_capacity = 1024, .slot_count = 512,
					.k_max = 16, .ring_capacity = 512,
					.support_capacity = 512, .batch_count = 16 };

	if (argc < 2)
		return 2;
	return seed(argv[1], "small-raw-header", 1, small) |
	       seed(argv[1], "small-fixed", 2, small) |
	       seed(argv[1], "typical-fixed", 2, typical) |
	       seed(argv[1], "typical-header", 1, typical) |
	       lane_seeds(argv[1]) | journal_seeds(argv[1]) | num_seeds(argv[1]) |
	       reader_seeds(argv[1]);
}
