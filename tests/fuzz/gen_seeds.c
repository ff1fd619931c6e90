/* SPDX-License-Identifier: MIT */
/*
 * Writes the attach corpus seeds from real segments: the mode byte and the
 * header of a segment created by this library, for a few geometries.
 *   gen_seeds DIR
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shm/segment.h"

static int seed(const char *dir, const char *file, unsigned char mode,
		struct v05_geometry g)
{
	struct v05_segment seg;
	char name[64], path[4096];
	FILE *f;

	snprintf(name, sizeof(name), "seed-%d", (int)getpid());
	if (v05__segment_create(name, &g, "seed", 4, 0600, &seg))
		return 1;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
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
	       seed(argv[1], "typical-header", 1, typical);
}
