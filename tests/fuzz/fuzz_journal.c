/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the journal reader over arbitrary bytes (a journal is
 * a file anyone with write access to its directory may have altered).
 * Byte 0's low two bits pick how the rest becomes the image:
 *   0  the bytes as they are
 *   1  a valid header, then the bytes
 *   2  as 1, and every record the bytes frame (by their size field) gets
 *      a right magic and checksum, so the scan reaches the field checks
 * The scan must never read outside the image and its answer must be
 * consistent: valid_bytes within the image, records seen by the callback
 * equal to the count, a clean tail only when every byte was valid, and
 * every record's arrays inside the bounds its size states.
 *
 * Bit 2 of byte 0 also runs the writer's open path on the image, as a file
 * (v05__journal_open, what a plugin does with journal=): it either refuses
 * and leaves the file byte for byte as it was, or opens it and leaves a
 * journal that scans clean, header first, with every valid byte of the
 * image still in place (only a torn tail may go).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "v05-internal/journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_journal: invariant broken: %s\n", what);
		abort();
	}
}

struct seen {
	uint64_t records;
};

static int on_record(void *ctx, const struct v05_jentry *e)
{
	struct seen *s = ctx;
	const uint8_t *base = (const uint8_t *)e->rec;
	const uint8_t *end = base + e->rec->size;

	check(e->rec->k <= 64 && e->rec->uid_len <= 128, "record fields bounded");
	check(e->uid >= base + sizeof(struct v05_jrec) &&
	      e->uid + e->rec->uid_len <= (const uint8_t *)e->rewards,
	      "uid inside the record");
	check((const uint8_t *)(e->advantages + e->rec->k) <= end,
	      "arrays inside the record");
	s->records++;
	return 0;
}

/* The image as a file; the writer opens it; what is there afterwards. */
static void open_path(const uint8_t *img, size_t n, const struct v05_jscan *img_res)
{
	static char dir[] = "/tmp/v05-fuzz-journal-XXXXXX";
	static int made;
	char path[64];
	struct v05_journal *j;
	struct v05_jscan after;
	uint64_t last_seq, truncated;
	uint8_t *back;
	struct stat st;
	int fd, ret;

	if (!made && !mkdtemp(dir))
		abort();
	made = 1;
	snprintf(path, sizeof(path), "%s/j", dir);
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	check(fd >= 0 && write(fd, img, n) == (ssize_t)n, "write the image");
	close(fd);
	ret = v05__journal_open(path, 0, "fuzz", 0600, &j, &last_seq, &truncated);
	fd = open(path, O_RDONLY);
	check(fd >= 0 && fstat(fd, &st) == 0, "the file is still there");
	back = malloc((size_t)st.st_size + 1);
	check(back && read(fd, back, (size_t)st.st_size) == st.st_size, "read back");
	close(fd);
	if (ret) {
		check((size_t)st.st_size == n && !memcmp(back, img, n),
		      "a refused file is left as it was");
	} else {
		v05__journal_close(j);
		check(v05__journal_scan(back, (size_t)st.st_size, NULL, NULL,
					&after) == 0, "opened: a journal");
		check(after.tail == V05_JTAIL_CLEAN, "opened: scans clean");
		check(after.valid_bytes >= sizeof(struct v05_journal_hdr),
		      "opened: has a header");
		if (img_res->valid_bytes >= sizeof(struct v05_journal_hdr))
			check((size_t)st.st_size >= img_res->valid_bytes &&
			      !memcmp(back, img, img_res->valid_bytes),
			      "opened: every valid byte kept");
		check(last_seq == (img_res->valid_bytes ? img_res->last_seq : 0),
		      "opened: last sequence number as scanned");
	}
	free(back);
	unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct v05_jscan res;
	struct seen seen = { 0 };
	uint8_t *img;
	unsigned mode;
	size_t n;
	int ret;

	if (size == 0)
		return 0;
	mode = data[0] & 3u;
	n = mode == 0 ? size - 1 : sizeof(struct v05_journal_hdr) + size - 1;
	img = malloc(n ? n : 1);
	if (!img)
		abort();
	if (mode == 0) {
		memcpy(img, data + 1, n);
	} else {
		struct v05_journal_hdr h;

		memset(&h, 0, sizeof(h));
		h.magic = V05_JOURNAL_MAGIC;
		h.version = V05_JOURNAL_VERSION;
		h.hdr_size = sizeof(h);
		snprintf(h.segment, sizeof(h.segment), "fuzz");
		h.checksum = XXH3_64bits(&h, offsetof(struct v05_journal_hdr, checksum));
		memcpy(img, &h, sizeof(h));
		memcpy(img + sizeof(h), data + 1, size - 1);
		if (mode >= 2) {
			size_t pos = sizeof(h);

			while (n - pos >= sizeof(struct v05_jrec)) {
				uint32_t magic = V05_JREC_MAGIC, sz;
				uint64_t sum;

				memcpy(&sz, img + pos + 4, 4);
				if (sz < sizeof(struct v05_jrec) || sz > n - pos)
					break;
				memcpy(img + pos, &magic, 4);
				sum = XXH3_64bits(img + pos + 16, sz - 16);
				memcpy(img + pos + 8, &sum, 8);
				pos += sz;
			}
		}
	}

	ret = v05__journal_scan(img, n, on_record, &seen, &res);
	check(ret == 0 || ret == -EBADMSG, "scan answers 0 or -EBADMSG");
	check(res.valid_bytes <= n, "valid bytes inside the image");
	check(seen.records == res.records, "callback saw every record");
	check(res.tail <= V05_JTAIL_BAD_HEADER, "tail state known");
	if (res.tail == V05_JTAIL_CLEAN)
		check(res.valid_bytes == n, "a clean tail covers the image");
	else if (res.tail != V05_JTAIL_BAD_HEADER && n >= sizeof(struct v05_journal_hdr))
		check(res.bad_offset == res.valid_bytes, "stops where validity ends");
	check(res.duplicates <= res.records, "duplicates counted among records");
	if (data[0] & 4u)
		open_path(img, n, &res);
	free(img);
	return 0;
}
