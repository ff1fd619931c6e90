/* SPDX-License-Identifier: MIT */
/*
 * Observer: a read-only mapping of a live segment (the INSPECT role:
 * everything but the arena, read-only) and relaxed snapshots of what the
 * owner publishes. Strings the owner writes are copied with a bound and
 * terminated here: a snapshot may catch one mid-write.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mechanics/internal.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "../shm/segment.h"
#include "../shm/waiter.h"
#include "v05/observer.h"

static_assert(V05_JOURNAL_STATE_OFF == (int)V05_JOURNAL_OFF &&
	      V05_JOURNAL_STATE_OK == (int)V05_JOURNAL_OK &&
	      V05_JOURNAL_STATE_FAILED == (int)V05_JOURNAL_FAILED,
	      "public journal states mirror the plugin's");

struct v05_observer {
	struct v05_segment seg;
};

V05_API int v05_observer_open(const char *name, unsigned flags,
			      struct v05_observer **out)
{
	struct v05_observer *o;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "observer_open: NULL out");
	if (flags & ~V05_ATTACH_ANY_UID)
		return v05__fail(-EINVAL, "unknown observer flags 0x%x", flags);
	o = calloc(1, sizeof(*o));
	if (!o)
		return v05__fail(-ENOMEM, "observer: out of memory");
	ret = v05__segment_attach(name, V05_ROLE_INSPECT, flags, &o->seg);
	if (ret) {
		free(o);
		return ret;
	}
	*out = o;
	return 0;
}

V05_API int v05_observer_close(struct v05_observer *o)
{
	if (!o)
		return 0;
	v05__segment_detach(&o->seg);
	free(o);
	return 0;
}

V05_API int v05_observer_counters(struct v05_observer *o, uint64_t *out,
				  uint32_t n)
{
	if (!o || (n && !out))
		return v05__fail(-EINVAL, "observer_counters: NULL argument");
	if (n > V05_COUNTERS)
		n = V05_COUNTERS;
	/* Relaxed: statistics, written relaxed by the owner. */
	for (uint32_t i = 0; i < n; i++)
		out[i] = v05_load_relaxed(&o->seg.state->counters[i]);
	return (int)n;
}

static void copy_string(char *dst, size_t cap, const char *src, size_t src_cap)
{
	size_t n = src_cap < cap - 1 ? src_cap : cap - 1;

	memcpy(dst, src, n);
	dst[n] = '\0';
}

V05_API int v05_observer_info(struct v05_observer *o,
			      struct v05_observer_info *out)
{
	const struct v05_shm_header *h;
	const struct v05_shm_control *ctl;
	const struct v05_plugin_state *st;
	struct v05_shm_config cfg;
	uint64_t owner, hb, now;

	if (!o || !out)
		return v05__fail(-EINVAL, "observer_info: NULL argument");
	h = &o->seg.hdr; /* the validated private copy */
	ctl = o->seg.ctl;
	st = V05_AT(const struct v05_plugin_state, o->seg.state->plugin, 0);
	/* The config is opaque to the transport: the plugin's bytes, in the
	 * checksummed header. */
	memcpy(&cfg, h->config, sizeof(cfg));

	memset(out, 0, sizeof(*out));
	out->size_bytes = h->total_size;
	out->created_ns = h->created_ns;
	out->creator_uid = h->creator_uid;
	out->lanes = h->geo.lane_count;
	out->lane_capacity = h->geo.lane_capacity;
	out->slots = h->geo.slot_count;
	out->k_max = h->geo.k_max;
	out->batches = h->geo.batch_count;
	out->asym_doorbell = (h->flags & V05_SHM_F_ASYM_DOORBELL) != 0;
	out->cost = cfg.cost;
	out->halt_fraction = cfg.halt_fraction;
	out->mode = cfg.mode;
	out->schedule = cfg.schedule;
	out->k_init = cfg.k_init;
	out->k_step = cfg.k_step;
	out->pad_multiple = cfg.pad_multiple;
	copy_string(out->journal_path, sizeof(out->journal_path),
		    cfg.journal_path, sizeof(cfg.journal_path));
	out->broker = (cfg.flags & V05_CONFIG_PRODUCER_BROKER) != 0;
	/* The header passed its checksum, but only the plugin's attach
	 * checks what its config means: bounded here. */
	out->n_broker_uids = cfg.n_broker_uids < V05_BROKER_ALLOW_MAX ?
			     cfg.n_broker_uids : V05_BROKER_ALLOW_MAX;
	out->n_broker_gids = cfg.n_broker_gids < V05_BROKER_ALLOW_MAX ?
			     cfg.n_broker_gids : V05_BROKER_ALLOW_MAX;
	memcpy(out->broker_uids, cfg.broker_uids, sizeof(out->broker_uids));
	memcpy(out->broker_gids, cfg.broker_gids, sizeof(out->broker_gids));
	out->lane_cut_records = cfg.lane_cut_records;
	out->lane_cut_permille = cfg.lane_cut_permille;

	/* Relaxed: single-writer fields, read as a snapshot. */
	owner = v05_load_relaxed(&ctl->owner);
	out->owner_pid = owner ? v05__owner_pid(owner) : 0;
	out->owner_alive = owner && v05__owner_alive(owner) == 1;
	hb = v05_load_relaxed(&ctl->heartbeat_ns);
	now = v05__now_ns();
	out->heartbeat_age_ns = hb && now > hb ? now - hb : 0;
	out->wait_path = v05_load_relaxed(&ctl->wait_path);
	out->last_seq = v05_load_relaxed(&st->last_seq);
	out->journal_durable_seq = v05_load_relaxed(&st->journal_durable_seq);
	out->journal_offset = v05_load_relaxed(&st->journal_offset);
	out->journal_state = v05_load_relaxed(&st->journal_status);
	out->journal_errno = v05_load_relaxed(&st->journal_errno);
	copy_string(out->journal_error, sizeof(out->journal_error),
		    st->journal_error, sizeof(st->journal_error));
	out->broker_refused_uid = v05_load_relaxed(&st->broker_refused_uid);
	out->broker_refused_gid = v05_load_relaxed(&st->broker_refused_gid);
	return 0;
}

V05_API int v05_observer_lanes(struct v05_observer *o,
			       struct v05_lane_stat *out, uint32_t n)
{
	uint32_t lanes;

	if (!o || (n && !out))
		return v05__fail(-EINVAL, "observer_lanes: NULL argument");
	lanes = o->seg.hdr.geo.lane_count;
	if (n > lanes)
		n = lanes;
	for (uint32_t i = 0; i < n; i++) {
		const struct v05_lane_own *own = &o->seg.lane_own[i];
		uint64_t owner, cut;
		uint32_t fill = 0;

		/* Relaxed: each field has one writer; a snapshot. The counts
		 * come from the owner's memory, not from the lane's page.
		 * Where the lanes' files are closed to us (another uid's
		 * segment), the owner word the plugin saw last, no fill. */
		if (v05__lane_granted(own)) {
			/* A memfd the broker granted: not ours to map; its
			 * producer as the broker recorded it. */
			owner = 0;
			out[i].owner_pid = v05_load_relaxed(&own->grant_pid);
			out[i].owner_alive = out[i].owner_pid != 0;
		} else {
			if (o->seg.lanes_mapped) {
				const struct v05_ring_hdr *r = v05__lane(&o->seg, i);

				owner = v05_load_relaxed(&r->owner);
				fill = v05_load_relaxed(&r->tail) -
				       v05_load_relaxed(&own->head);
			} else {
				owner = v05_load_relaxed(&own->owner_seen);
			}
			if (owner == V05_OWNER_CUT || owner == V05_OWNER_MOVED)
				owner = 0;
			out[i].owner_pid = owner ? v05__owner_pid(owner) : 0;
			out[i].owner_alive = owner && v05__owner_alive(owner) == 1;
		}
		/* A producer may claim anything: clamp to what the lane holds. */
		out[i].fill = fill <= o->seg.hdr.geo.lane_capacity ? fill :
			      o->seg.hdr.geo.lane_capacity;
		out[i].high_water = v05_load_relaxed(&own->high_water);
		out[i].consumed = v05_load_relaxed(&own->consumed);
		out[i].claims = v05_load_relaxed(&own->claims);
		out[i].applied = v05_load_relaxed(&own->applied);
		out[i].rejected = v05_load_relaxed(&own->rejected);
		out[i].discarded = v05_load_relaxed(&own->discarded);
		cut = v05_load_relaxed(&own->cut);
		out[i].cut = cut != 0;
		out[i].cut_pid = cut ? v05_load_relaxed(&own->cut_pid) : 0;
		out[i].cuts = v05_load_relaxed(&own->cuts);
		out[i].cut_records = v05_load_relaxed(&own->cut_records);
		out[i].cut_rejected = v05_load_relaxed(&own->cut_rejected);
		memset(out[i].reserved, 0, sizeof(out[i].reserved));
	}
	return (int)n;
}

V05_API const char *v05_wait_path_name(uint32_t path)
{
	return v05__wait_path_name((int)path);
}

V05_API const char *v05_journal_state_name(uint32_t state)
{
	switch (state) {
	case V05_JOURNAL_STATE_OFF:
		return "off";
	case V05_JOURNAL_STATE_OK:
		return "ok";
	case V05_JOURNAL_STATE_FAILED:
		return "failed";
	}
	return "?";
}

V05_API const char *v05_schedule_name(uint32_t schedule)
{
	switch (schedule) {
	case V05_SCHEDULE_ROUNDS:
		return "rounds";
	case V05_SCHEDULE_STREAM:
		return "stream";
	}
	return "?";
}
