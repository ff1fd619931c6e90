/* SPDX-License-Identifier: MIT */
/*
 * Observer: a read-only view of a live segment from any process of its
 * uid (v05ctl ls/stat/top, the Prometheus exporter). It maps the segment
 * read-only, writes nothing, and every value it returns is a relaxed
 * snapshot: safe to use against a running plugin at any rate.
 */
#ifndef V05_OBSERVER_H
#define V05_OBSERVER_H

#include <stdint.h>

#include "common.h"
#include "plugin.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

struct v05_observer;

/* flags: V05_ATTACH_ANY_UID to look at another uid's segment (its mode
 * must allow reading). */
V05_API int v05_observer_open(const char *name, unsigned flags,
			      struct v05_observer **out);
V05_API int v05_observer_close(struct v05_observer *o);

/* Copy up to n counters (see v05_counter_name); returns how many. */
V05_API int v05_observer_counters(struct v05_observer *o, uint64_t *out,
				  uint32_t n);

enum v05_journal_state {
	V05_JOURNAL_STATE_OFF = 0,
	V05_JOURNAL_STATE_OK = 1,
	V05_JOURNAL_STATE_FAILED = 2,
};

struct v05_observer_info {
	uint64_t size_bytes;
	uint64_t created_ns;          /* CLOCK_REALTIME                      */
	uint64_t heartbeat_age_ns;    /* since the owner's last poll         */
	uint64_t last_seq;            /* last group sequence number          */
	uint64_t journal_durable_seq; /* groups <= this are in the journal   */
	uint64_t journal_offset;      /* bytes of valid journal              */
	double cost, halt_fraction;
	uint32_t owner_pid;           /* 0: no owner                         */
	uint32_t owner_alive;         /* 1: the owner process is alive      */
	uint32_t creator_uid;
	uint32_t wait_path;           /* 0 none, 1 io_uring, 2 thread        */
	uint32_t journal_state;       /* enum v05_journal_state              */
	int32_t journal_errno;
	uint32_t lanes, lane_capacity, slots, k_max, batches;
	uint32_t mode, schedule, k_init, k_step, pad_multiple;
	uint32_t asym_doorbell;       /* 1: producers publish without a fence */
	uint32_t reserved;
	char journal_error[160];
	char journal_path[V05_JOURNAL_PATH_MAX];
	/* The producer broker (V05_CONFIG_PRODUCER_BROKER) and whom it
	 * admits besides the owner's uid (the stored config). */
	uint32_t broker;              /* 1: the plugin runs one               */
	uint32_t n_broker_uids, n_broker_gids;
	uint32_t broker_uids[V05_BROKER_ALLOW_MAX];
	uint32_t broker_gids[V05_BROKER_ALLOW_MAX];
	/* The last peer it refused, when counter broker_refused is not 0. */
	uint32_t broker_refused_uid, broker_refused_gid;
	/* The cut-off in force: a lane's window of at least
	 * lane_cut_records records, more than lane_cut_permille per 1000
	 * rejected. */
	uint32_t lane_cut_records, lane_cut_permille;
	/* 0: room for later fields (docs/PACKAGING.md) */
	uint32_t reserved2[23];
};

V05_API int v05_observer_info(struct v05_observer *o,
			      struct v05_observer_info *out);

struct v05_lane_stat {
	uint32_t owner_pid;   /* 0: free                                     */
	uint32_t owner_alive; /* 1: its producer process is alive           */
	uint32_t fill;        /* records published and not yet drained       */
	uint32_t high_water;  /* the largest fill the plugin has seen        */
	uint64_t consumed;    /* records drained, all time                   */
	uint64_t claims;      /* claims the plugin observed (owner-only)     */
	uint64_t applied;     /* records the plugin applied, all time        */
	uint64_t rejected;    /* records it rejected (any reason), all time  */
	uint64_t discarded;   /* records of cut claims dropped unread        */
	uint32_t cut;         /* 1: cut off now: its records are not read    */
	uint32_t cut_pid;     /* the producer cut off (while cut), else 0    */
	uint32_t cuts;        /* claims cut off, all time                    */
	uint32_t cut_records; /* the last cut's window: records handed over  */
	uint32_t cut_rejected;/*   ... and rejected among them               */
	uint32_t reserved[5]; /* 0: room for later fields (docs/PACKAGING.md) */
};

/* Up to n lanes' statistics; returns how many (the segment's lane count
 * at most). */
V05_API int v05_observer_lanes(struct v05_observer *o,
			       struct v05_lane_stat *out, uint32_t n);

/*
 * A prompt as the owner's table holds it at the moment of the lookup:
 * its instance (gen) and progress (issued, received).
 */
enum v05_prompt_view_state {
	V05_PROMPT_COLLECTING = 1, /* samples out, waiting for rewards   */
	V05_PROMPT_HELD = 2,       /* decided "more", waiting for its wave */
	V05_PROMPT_FINAL = 3,      /* final, its slot not released yet   */
};

struct v05_prompt_view {
	uint64_t key;
	uint64_t issued;   /* bit s: sample s handed out                */
	uint64_t received; /* bit s: its reward applied                 */
	uint32_t gen;      /* the instance (a decision's gen)           */
	uint32_t state;    /* enum v05_prompt_view_state                */
	uint64_t reserved[2]; /* 0 */
};

/*
 * Look key (v05_key of a uid) up in the segment's prompt table while its
 * owner runs (another process: a server's front end answering for the
 * owner of a group, docs/SERVERS.md): 1 and *out, 0 (no such prompt now),
 * -EAGAIN (every attempt overlapped the owner moving entries: ask again).
 * Each word of *out is one the owner wrote, at most one change old: a
 * hint for an early answer, never the decision (the owner checks every
 * record itself).
 */
V05_API int v05_observer_prompt(struct v05_observer *o, uint64_t key,
				struct v05_prompt_view *out);

/*
 * v05-eb under the stream schedule: the owner's own part of the running
 * fit, what v05_eb_state_get returns to the owner, copied whole while it
 * runs (the front ends of one server each read the others' parts and hand
 * their sum in with v05_eb_state_set_remote). -EINVAL for a segment of
 * another mode or schedule; -EAGAIN when the owner kept folding; -EDOM
 * for a state no folds make (checked as v05_eb_state_add checks).
 */
V05_API int v05_observer_eb_state(struct v05_observer *o,
				  struct v05_eb_state *own);

/* Name helpers for display. */
V05_API const char *v05_wait_path_name(uint32_t path);
V05_API const char *v05_journal_state_name(uint32_t state);
V05_API const char *v05_schedule_name(uint32_t schedule);

#ifdef __cplusplus
}
#endif

#endif /* V05_OBSERVER_H */
