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
#include "rules/stats_core.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "../shm/segment.h"
#include "../shm/waiter.h"
#include "v05/observer.h"

static_assert(V05_JOURNAL_STATE_OFF == (int)V05_JOURNAL_OFF &&
	      V05_JOURNAL_STATE_OK == (int)V05_JOURNAL_OK &&
	      V05_JOURNAL_STATE_FAILED == (int)V05_JOURNAL_FAILED,
	      "public journal states mirror the plugin's");
static_assert(V05_PROMPT_COLLECTING == (int)V05_P_COLLECTING &&
	      V05_PROMPT_HELD == (int)V05_P_HELD &&
	      V05_PROMPT_FINAL == (int)V05_P_FINAL,
	      "public prompt states mirror the plugin's");

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

/* ---- what the owner moves, copied under its sequence words ---------- */

V05_API int v05_observer_prompt(struct v05_observer *o, uint64_t key,
				struct v05_prompt_view *out)
{
	struct v05_prompt e;
	int ret;

	if (!o || !out)
		return v05__fail(-EINVAL, "observer_prompt: NULL argument");
	memset(out, 0, sizeof(*out));
	/* The table and the control block are the inspector's, read-only
	 * (segment_map.c); the owner bumps table_seq around every move. */
	ret = v05__table_peek(V05_AT(const struct v05_prompt,
				     o->seg.region[V05_REGION_TABLE], 0),
			      o->seg.hdr.geo.table_capacity - 1,
			      &o->seg.ctl->table_seq, key, &e);
	if (ret < 0)
		return v05__fail(ret, "observer_prompt: segment %s: its owner kept moving table entries; ask again",
				 o->seg.name);
	if (ret == 0)
		return 0;
	out->key = e.key;
	out->issued = e.issued;
	out->received = e.received;
	out->gen = e.gen;
	/* The owner's states (vocab.h) are the public ones. */
	out->state = e.state;
	return 1;
}

/* How many times a copy of own starts again before -EAGAIN: a fold
 * takes microseconds, so only an owner folding without a pause fails. */
#define EB_COPY_ATTEMPTS 64

V05_API int v05_observer_eb_state(struct v05_observer *o,
				  struct v05_eb_state *own)
{
	const struct v05_fit_store *fit;
	const struct v05__rule *rule;
	struct v05_shm_config cfg;

	if (!o || !own)
		return v05__fail(-EINVAL, "observer_eb_state: NULL argument");
	memcpy(&cfg, o->seg.hdr.config, sizeof(cfg));
	rule = v05__rule_of(cfg.mode);
	if (!rule || !(rule->flags & V05__RULE_MERGES) ||
	    cfg.schedule != V05_SCHEDULE_STREAM)
		return v05__fail(-EINVAL,
				 "observer_eb_state: the running fit is v05-eb's under the stream schedule; segment %s runs mode %s, schedule %s",
				 o->seg.name, rule ? rule->name : "?",
				 v05_schedule_name(cfg.schedule));
	fit = V05_AT(const struct v05_fit_store, o->seg.state->fit, 0);
	for (int a = 0; a < EB_COPY_ATTEMPTS; a++) {
		uint32_t s = v05_seq_read(&fit->own_seq);

		if (s & 1) {
			v05_cpu_relax();
			continue;
		}
		memcpy(own, &fit->own, sizeof(*own));
		if (v05_seq_retry(&fit->own_seq, s))
			continue;
		/* Whole: what the owner folded. Checked all the same, as
		 * every state that crosses a process is. */
		return v05__eb_state_check(own, "observer_eb_state");
	}
	return v05__fail(-EAGAIN, "observer_eb_state: segment %s: its owner kept folding; ask again",
			 o->seg.name);
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
