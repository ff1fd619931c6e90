/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: segment attach over arbitrary bytes. Input byte 0 picks
 * how the rest becomes the segment file:
 *   0  the bytes as they are
 *   1  the bytes as the header, the file extended to the size it claims
 *   2  as 1, with the header's checksum made valid, so the fuzzer reaches
 *      every check behind the checksum
 * Attach must answer 0 or a negative errno, never crash or read outside.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "v05-internal/shm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[512];

static void setup(void)
{
	static char dir[] = "/tmp/v05-fuzz-attach-XXXXXX";

	if (path[0])
		return;
	if (!mkdtemp(dir))
		abort();
	setenv("V05_SHM_DIR", dir, 1);
	snprintf(path, sizeof(path), "%s/v05-fuzz", dir);
}

static void try_attach(enum v05_role role)
{
	struct v05_segment seg;

	if (v05__segment_attach("fuzz", role, V05_ATTACH_ANY_UID, &seg) == 0) {
		/* Touch what the role mapped: it must all be there. */
		volatile uint64_t sum = 0;

		for (int i = 0; i < V05_REGION_COUNT; i++)
			if (seg.region[i])
				sum += seg.region[i][seg.hdr.regions[i].size - 1];
		/* A producer's own mapping of the doorbell page, and each
		 * lane's last byte as it would map it, by offset. */
		if (seg.bell_map)
			sum += seg.bell_map[seg.hdr.regions[V05_REGION_DOORBELL].size - 1];
		if (role == V05_ROLE_PRODUCER) {
			size_t len = v05__lane_stride(seg.hdr.geo.lane_capacity);

			for (uint32_t l = 0; l < seg.hdr.geo.lane_count; l++) {
				int fd = v05__lane_file_open(&seg, V05_FILE_LANE, l,
							     O_RDONLY);
				uint8_t *m;

				if (fd < 0)
					continue; /* checked: refused */
				m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
				close(fd);
				if (m == MAP_FAILED)
					abort();
				sum += m[len - 1];
				munmap(m, len);
			}
		}
		(void)sum;
		v05__segment_detach(&seg);
	}
}

/*
 * A header that validates names its lanes' and doorbell's files: make them
 * (sparse, 0600, the sizes it implies) so that the owner's and the
 * inspector's attach go on to map them over their regions; or remove them
 * (make 0).
 */
static void side_files(const struct v05_shm_header *h, int make)
{
	char p[600];
	uint64_t stride = v05__lane_stride(h->geo.lane_capacity);

	snprintf(p, sizeof(p), "%s:side", path);
	if (make)
		mkdir(p, 0700);
	for (uint32_t i = 0; i <= h->geo.lane_count; i++) {
		int fd;

		if (i < h->geo.lane_count)
			snprintf(p, sizeof(p), "%s:side/lane.%u", path, i);
		else
			snprintf(p, sizeof(p), "%s:side/bell", path);
		if (!make) {
			unlink(p);
			continue;
		}
		fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 ||
		    ftruncate(fd, (off_t)(i < h->geo.lane_count ? stride : V05_PAGE)))
			abort();
		close(fd);
	}
	if (!make) {
		snprintf(p, sizeof(p), "%s:side", path);
		/* What an owner's attach added (its broker's socket). */
		v05__side_remove(path);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int files = 0;

	struct v05_shm_header h;
	uint64_t file_size;
	int mode, fd;

	setup();
	if (size == 0)
		return 0;
	mode = data[0] % 3;
	data++;
	size--;
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	if (mode == 0) {
		if (size && write(fd, data, size) != (ssize_t)size)
			abort();
	} else {
		memset(&h, 0, sizeof(h));
		memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
		if (mode == 2)
			h.checksum = v05__header_checksum(&h);
		file_size = h.total_size;
		if (file_size < sizeof(h) || file_size > (64u << 20))
			file_size = sizeof(h);
		if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
		    ftruncate(fd, (off_t)file_size))
			abort();
		/* Bounded: at most 64 MiB of (sparse) lanes. */
		files = v05__header_validate(&h, file_size) == 0 &&
			(uint64_t)h.geo.lane_count *
			v05__lane_stride(h.geo.lane_capacity) <= (64u << 20);
		if (files)
			side_files(&h, 1);
	}
	close(fd);
	try_attach(V05_ROLE_INSPECT);
	try_attach(V05_ROLE_PRODUCER);
	try_attach(V05_ROLE_OWNER);
	if (files)
		side_files(&h, 0);
	unlink(path);
	return 0;
}
