/* SPDX-License-Identifier: MIT */
/*
 * A segment header checked before anything it says is used: magic, ABI,
 * checksum, sizes, every region inside the object, page-aligned, not
 * overlapping, and exactly where the capacities put it.
 */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <stddef.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"

static const char *const names[V05_REGION_COUNT] = {
	"control", "lanes",   "table",   "arena",
	"completion", "release", "support", "batches",
	"state", "doorbell", "lane statistics",
};

const char *v05__region_name(int region)
{
	return region >= 0 && region < V05_REGION_COUNT ? names[region] : "?";
}

uint64_t v05__header_checksum(const struct v05_shm_header *h)
{
	return XXH3_64bits(h, offsetof(struct v05_shm_header, checksum));
}

static int region_inside(const struct v05_region *r, uint64_t total)
{
	return r->offset % V05_PAGE == 0 && r->size % V05_PAGE == 0 &&
	       r->size > 0 && r->offset >= V05_PAGE && r->offset <= total &&
	       r->size <= total - r->offset;
}

int v05__header_validate(const struct v05_shm_header *h, uint64_t st_size)
{
	struct v05_region want[V05_REGION_COUNT];
	struct v05_geometry geo = h->geo;
	uint64_t total;
	int ret;

	if (h->magic != V05_SHM_MAGIC)
		return v05__fail(-EBADMSG, "not a v05 segment (magic %016llx)",
				 (unsigned long long)h->magic);
	if (h->abi_version != V05_SHM_ABI || h->header_size != sizeof(*h))
		return v05__fail(-EPROTONOSUPPORT,
				 "segment ABI %u (header %u bytes); this library speaks ABI %u (%zu bytes)",
				 h->abi_version, h->header_size, V05_SHM_ABI,
				 sizeof(*h));
	if (h->checksum != v05__header_checksum(h))
		return v05__fail(-EILSEQ, "segment header checksum mismatch");
	if (h->page_size != V05_PAGE)
		return v05__fail(-EDOM, "segment page size %u, expected %u",
				 h->page_size, V05_PAGE);
	if ((h->flags & ~V05_SHM_F_ALL) || h->reserved)
		return v05__fail(-EDOM, "segment flags %#x / reserved %u unknown",
				 h->flags, h->reserved);
	if (h->total_size != st_size)
		return v05__fail(-EMSGSIZE,
				 "segment header says %llu bytes, the object has %llu",
				 (unsigned long long)h->total_size,
				 (unsigned long long)st_size);
	ret = v05__geometry_check(&geo);
	if (ret)
		return ret;
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		if (!region_inside(&h->regions[i], st_size))
			return v05__fail(-EOVERFLOW,
					 "region %s [%llu, +%llu) is not a page-aligned part of the %llu-byte segment",
					 v05__region_name(i),
					 (unsigned long long)h->regions[i].offset,
					 (unsigned long long)h->regions[i].size,
					 (unsigned long long)st_size);
	}
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		for (int j = i + 1; j < V05_REGION_COUNT; j++) {
			const struct v05_region *a = &h->regions[i];
			const struct v05_region *b = &h->regions[j];

			if (a->offset < b->offset + b->size &&
			    b->offset < a->offset + a->size)
				return v05__fail(-ENOTUNIQ,
						 "regions %s and %s overlap",
						 v05__region_name(i), v05__region_name(j));
		}
	}
	v05__layout(&geo, want, &total);
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		if (want[i].offset != h->regions[i].offset ||
		    want[i].size != h->regions[i].size)
			return v05__fail(-EMSGSIZE,
					 "region %s does not match the segment's capacities",
					 v05__region_name(i));
	}
	if (total != st_size)
		return v05__fail(-EMSGSIZE,
				 "capacities need %llu bytes, the segment has %llu",
				 (unsigned long long)total,
				 (unsigned long long)st_size);
	return 0;
}
