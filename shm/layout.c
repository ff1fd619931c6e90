/* SPDX-License-Identifier: MIT */
/* Region sizes and offsets from the geometry: the single source of truth
 * used by create (to lay out) and by attach (to verify). */
#include <errno.h>

#include "error.h"
#include "layout.h"

static int is_pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

static uint64_t page_up(uint64_t x)
{
	return (x + V05_PAGE - 1) & ~(uint64_t)(V05_PAGE - 1);
}

int v05__geometry_check(struct v05_geometry *g)
{
	if (g->lane_count < 1 || g->lane_count > V05_LANES_MAX)
		return v05__fail(-EDOM, "lane count %u is outside [1, %u]",
				 g->lane_count, V05_LANES_MAX);
	if (!is_pow2(g->lane_capacity) || g->lane_capacity < V05_LANE_CAP_MIN ||
	    g->lane_capacity > V05_LANE_CAP_MAX)
		return v05__fail(-EDOM,
				 "lane capacity %u is not a power of two in [%u, %u]",
				 g->lane_capacity, V05_LANE_CAP_MIN,
				 V05_LANE_CAP_MAX);
	if (g->slot_count < 1 || g->slot_count > V05_SLOTS_MAX)
		return v05__fail(-EDOM, "slot count %u is outside [1, %u]",
				 g->slot_count, V05_SLOTS_MAX);
	/* Linear probing stays short at load <= 0.5. */
	if (!is_pow2(g->table_capacity) ||
	    g->table_capacity < 2 * g->slot_count)
		return v05__fail(-EDOM,
				 "table capacity %u is not a power of two >= 2 x %u slots",
				 g->table_capacity, g->slot_count);
	if (g->k_max < 1 || g->k_max > 64)
		return v05__fail(-EDOM, "k_max %u is outside [1, 64]", g->k_max);
	if (!is_pow2(g->ring_capacity) || g->ring_capacity < g->slot_count)
		return v05__fail(-EDOM,
				 "ring capacity %u is not a power of two >= %u slots",
				 g->ring_capacity, g->slot_count);
	if (g->support_capacity < 1 || g->support_capacity > V05_SUPPORT_MAX)
		return v05__fail(-EDOM, "support capacity %u is outside [1, %u]",
				 g->support_capacity, V05_SUPPORT_MAX);
	if (g->batch_count < 1 || g->batch_count > V05_BATCHES_MAX)
		return v05__fail(-EDOM, "batch count %u is outside [1, %u]",
				 g->batch_count, V05_BATCHES_MAX);
	if (g->slot_stride == 0)
		g->slot_stride = v05__slot_stride(g->k_max);
	if (g->slot_stride != v05__slot_stride(g->k_max))
		return v05__fail(-EDOM, "slot stride %u does not match k_max %u",
				 g->slot_stride, g->k_max);
	if (g->reserved != 0)
		return v05__fail(-EDOM, "reserved geometry field is %u", g->reserved);
	return 0;
}

void v05__layout(const struct v05_geometry *g,
		 struct v05_region r[V05_REGION_COUNT], uint64_t *total)
{
	uint64_t size[V05_REGION_COUNT];
	uint64_t off = V05_PAGE; /* the header page */

	size[V05_REGION_CONTROL] = sizeof(struct v05_shm_control);
	size[V05_REGION_LANES] =
		(uint64_t)g->lane_count * v05__lane_stride(g->lane_capacity);
	size[V05_REGION_TABLE] =
		(uint64_t)g->table_capacity * sizeof(struct v05_prompt);
	size[V05_REGION_ARENA] = (uint64_t)g->slot_count * g->slot_stride;
	size[V05_REGION_COMPLETION] =
		sizeof(struct v05_ring_hdr) +
		(uint64_t)g->ring_capacity * sizeof(struct v05_completion);
	size[V05_REGION_RELEASE] =
		sizeof(struct v05_ring_hdr) +
		(uint64_t)g->ring_capacity * sizeof(struct v05_release);
	size[V05_REGION_SUPPORT] =
		sizeof(struct v05_support_hdr) +
		(uint64_t)g->support_capacity * sizeof(struct v05_support_entry);
	size[V05_REGION_BATCHES] =
		(uint64_t)g->batch_count * sizeof(struct v05_batch_rec);
	size[V05_REGION_STATE] = sizeof(struct v05_shm_state);
	size[V05_REGION_DOORBELL] = sizeof(struct v05_shm_doorbell);
	size[V05_REGION_LANE_STATS] =
		(uint64_t)g->lane_count * sizeof(struct v05_lane_own);
	/* All bounds are below 2^40, so none of this can overflow a u64. */
	for (int i = 0; i < V05_REGION_COUNT; i++) {
		r[i].offset = off;
		r[i].size = page_up(size[i]);
		off += r[i].size;
	}
	*total = off;
}
