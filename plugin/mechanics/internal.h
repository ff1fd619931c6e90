/* SPDX-License-Identifier: MIT */
/* The plugin's process-local state and the functions its files share. */
#ifndef V05_PLUGIN_INTERNAL_H
#define V05_PLUGIN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "../../shm/arena.h"
#include "../../shm/atomics.h"
#include "../../shm/completion.h"
#include "../../shm/lanes.h"
#include "../../shm/proc.h"
#include "../../shm/segment.h"
#include "../../shm/table.h"
#include "../../shm/waiter.h"
#include "vocab.h"
#include "../rules/rule.h"
#include "v05/plugin.h"

/* The rules' running state in the segment's state region (rules/rule.h). */
static_assert(sizeof(struct v05_fit_store) <=
		      sizeof(((struct v05_shm_state *)0)->fit),
	      "fit store fits");

/* Uids whose cut-off counts and backoff the plugin keeps (guard.c): the
 * sixteen most recent; an older one starts again from none. */
#define V05_BACKOFF_UIDS 16u
/* The backoff after a uid's first cut-off; each later one doubles it, up
 * to 2^12 times (about 68 minutes). */
#define V05_BACKOFF_BASE_NS 1000000000ull
#define V05_BACKOFF_DOUBLINGS 12u

/* The configuration as stored in the segment header (immutable). */
struct v05_shm_config {
	double cost;
	uint32_t k_init, k_step, k_max, mode;
	double halt_fraction;
	uint32_t pad_multiple;
	uint32_t schedule;
	uint32_t stream_deadline_us;
	uint32_t journal_sync;
	uint32_t flags;
	uint32_t sigma; /* enum v05_sigma */
	char journal_path[V05_JOURNAL_PATH_MAX];
	/* Segment ABI 5: the broker's allow-list, and the cut-off resolved
	 * (never 0 here: create stores the defaults it took). */
	uint32_t broker_uids[V05_BROKER_ALLOW_MAX];
	uint32_t broker_gids[V05_BROKER_ALLOW_MAX];
	uint32_t n_broker_uids, n_broker_gids;
	uint32_t lane_cut_records, lane_cut_permille;
	/* Segment ABI 6: v05-eb's forgetting window, cold and early start;
	 * 9: its first waves' sizes. */
	uint32_t eb_window, eb_cold, eb_early, eb_first;
	/* Segment ABI 8: Pilot-Commit's band, EBPO's window. */
	double pc_lower, pc_upper;
	uint32_t ebpo_window, pad_rules;
	/* Segment ABI 9: v05-pg's between-prompt share, first waves, skip. */
	double pg_between;
	uint32_t pg_first, pg_skip;
};
static_assert(sizeof(struct v05_shm_config) ==
		      48 + 8 + V05_JOURNAL_PATH_MAX + 8 * V05_BROKER_ALLOW_MAX + 72,
	      "shm config ABI");
static_assert(offsetof(struct v05_shm_config, broker_uids) ==
		      56 + V05_JOURNAL_PATH_MAX, "shm config ABI");
static_assert(sizeof(struct v05_shm_config) <= V05_CONFIG_BYTES, "config fits");

enum v05_journal_status {
	V05_JOURNAL_OFF = 0,
	V05_JOURNAL_OK = 1,
	V05_JOURNAL_FAILED = 2,
};

/* Plugin state that must survive a takeover, in the state region. Written
 * by the owner only; relaxed (the owner is the only writer; observers read
 * a snapshot). */
struct v05_plugin_state {
	uint64_t next_batch_id;       /* last batch id handed out          */
	uint64_t last_seq;            /* last group sequence number        */
	uint64_t journal_durable_seq; /* groups <= this are in the journal */
	uint64_t journal_offset;      /* bytes of valid journal            */
	uint32_t journal_status;      /* enum v05_journal_status            */
	int32_t journal_errno;
	char journal_error[160];
	char wait_reason[160];
	uint32_t last_gen;            /* slot generations (shm/arena.h)    */
	/* The last peer the broker refused (counter broker_refused says
	 * whether there was one): written by the broker thread alone. */
	uint32_t broker_refused_uid;
	uint32_t broker_refused_gid;
	uint32_t pad_b;
	/* Segment ABI 8: per uid, the producers' lanes cut off and until
	 * when the uid gets no new lane (the backoff, guard.c). Written by
	 * the poll thread alone; the broker thread reads it. */
	struct v05_uid_backoff {
		uint32_t uid;
		uint32_t cuts;
		uint64_t until_ns; /* CLOCK_MONOTONIC */
	} backoff[V05_BACKOFF_UIDS];
	uint8_t pad[1024 - 376 - 16 * V05_BACKOFF_UIDS];
};
static_assert(sizeof(struct v05_plugin_state) == 1024, "plugin state ABI");
static_assert(offsetof(struct v05_plugin_state, backoff) == 376,
	      "plugin state ABI");
static_assert(offsetof(struct v05_plugin_state, broker_refused_uid) == 364,
	      "plugin state ABI");

/* Derived per-batch state, rebuilt from the table on takeover. */
struct batch_local {
	uint32_t n_open;       /* not final                              */
	uint32_t n_collecting; /* open and waiting for rewards           */
	uint32_t n_held;       /* decided "more", not released yet       */
	uint32_t held_samples; /* stream: samples the held ones will get */
	uint64_t *held;        /* keys of held prompts                   */
	uint32_t held_cap;
};

struct v05_journal;
struct v05_broker;

/* A held prompt competing for padding samples (dispatch.c). */
struct pad_item {
	float prio;     /* k_target - planned k */
	uint64_t key;
	struct v05_prompt *e;
};

struct v05_plugin {
	struct v05_segment seg;
	struct v05_shm_config cfg;
	struct v05_params params;
	struct v05_plugin_state *st; /* in the owner-only state region */
	struct v05_fit_store *fit;   /* the rules' running state, there too */
	/* The mode's row of the rule table and what its functions read
	 * (rules/rule.h), set at create and attach: the mechanics, the
	 * schedules and the top call the rule through these. */
	const struct v05__rule *rule;
	struct v05__rule_env env;
	struct v05_config config; /* what env.config points to */
	/* Its best grid point, kept here (process-local) between the two
	 * writes of the fit (a fold, the other engines' part): a prompt's
	 * decision and its finalization each ask for it, and the argmax
	 * over the grid was a sixth of v05_poll's time per first wave. */
	struct v05_eb_fit fit_memo;
	bool fit_memo_ok;
	struct v05_batch_rec *batch_recs;
	struct batch_local *batches;
	struct v05_lanes lanes;
	struct v05_table table;
	struct v05_arena arena;
	struct v05_completions compl;
	struct v05_waiter waiter;
	struct v05_journal *journal;
	struct v05_broker *broker; /* V05_CONFIG_PRODUCER_BROKER: its thread */
	/* The brokered producers' doorbell: a sealed memfd of its own (the
	 * segment's doorbell file is for producers of its uid), mapped here
	 * and waited on with the other; NULL without a broker. */
	struct v05_shm_doorbell *bell2;
	int bell2_fd;
	int journal_error_pending; /* reported once by v05_poll */
	/* Records appended since the pump last left the journal idle: the
	 * poll pumps while set, and tests no more than this when it is not. */
	bool journal_work;
	uint64_t journal_writes_seen;
	/* CLOCK_MONOTONIC read at most once per 64 records (decide.c) and
	 * the offset that turns it into CLOCK_REALTIME for final_ns. Stale
	 * from the start of each poll until the first record or deadline
	 * needs it: a poll with nothing to do reads no precise clock. */
	uint64_t now_ns;
	int64_t wall_offset_ns;
	uint32_t clock_tick;
	bool clock_stale;
	/* Polls since the coarse clock was last read, and that reading:
	 * the interval checks (reader, lane reclaim, heartbeat) read it on
	 * every 8th poll and on a poll after a wait. */
	uint32_t poll_tick;
	uint64_t coarse_ns;
	/* Scratch for a round's padding: slot_count entries, allocated at
	 * create so that polling does not allocate. */
	struct pad_item *pad_items;
	/* The barrier fit's inputs, slot_count each (WAVES_FIT rules). */
	double *eb_prior, *eb_s;
	uint32_t *eb_k;
	bool armed;
	bool silent;               /* attach: transitions without decisions */
	bool recovered;            /* v05_recover has queued the state once */
	uint64_t next_reader_check_ns;
	uint64_t last_reader;      /* reader owner word seen last check      */
	bool completion_backlog;   /* a completion did not fit: republish    */
	/* decision queue (ring buffer) */
	struct v05_decision *q;
	uint32_t qhead, qlen, qcap;
	/* A decision could not be queued (growth failed): sticky; v05_poll
	 * answers it until v05_recover re-derives the queue from the
	 * segment's state. */
	int queue_error;
	/* slots released before the journal had them */
	uint32_t *pending_free;
	uint32_t npending_free;
	/* V05_CHECK_THREADS: the token of the thread inside a call on this
	 * handle, 0 when none (one_thread.h). */
	uintptr_t in_call;
};

static inline uint64_t *v05__ctr(struct v05_plugin *p, int c)
{
	return &p->seg.state->counters[c];
}

/* Counters: the owner is their only writer (relaxed load + store). */
static inline void v05__count(struct v05_plugin *p, int c, uint64_t n)
{
	uint64_t *x = v05__ctr(p, c);

	v05_store_relaxed(x, v05_load_relaxed(x) + n);
}

static inline void v05__gauge(struct v05_plugin *p, int c, int64_t d)
{
	uint64_t *x = v05__ctr(p, c);

	v05_store_relaxed(x, (uint64_t)((int64_t)v05_load_relaxed(x) + d));
}

/* The counter a lane event bumps (the lanes report, the plugin counts). */
static inline int v05__lane_event_counter(enum v05_lane_event ev)
{
	static const int ctr[] = {
		[V05_LANE_CORRUPT] = V05_C_REJ_CORRUPT,
		[V05_LANE_OVERRUN] = V05_C_LANE_OVERRUNS,
		[V05_LANE_RECLAIM] = V05_C_LANE_RECLAIMS,
		[V05_LANE_CLAIM] = V05_C_LANE_CLAIMS,
		[V05_LANE_CUT] = V05_C_LANES_CUT_OFF,
	};

	return ctr[ev];
}

/* The clock the decisions use, refreshed by the first record a poll
 * applies (or the first stream deadline it finds due), then every 64
 * records; here, below every layer that reads it (the per-reward path,
 * the schedules' deadlines, a resolve, create and attach). */
static inline void v05__clock_refresh(struct v05_plugin *p)
{
	p->now_ns = v05__now_ns();
	p->wall_offset_ns = (int64_t)(v05__wall_ns() - p->now_ns);
	p->clock_stale = false;
}

/* config.c: the configuration's copy in the segment header. */
/* The caller's config (c->size bytes) as this library's whole one, or
 * -EINVAL / -E2BIG (config.c). */
int v05__config_load(const struct v05_config *c, struct v05_config *full);
void v05__shm_config_from(struct v05_shm_config *s, const struct v05_config *c,
			  const char *journal_abs);
int v05__shm_config_check(struct v05_plugin *p);
/* The configuration the segment stores, as a whole struct v05_config (the
 * fields it does not store at their defaults; journal_path NULL). */
void v05__config_of_shm(const struct v05_shm_config *s, struct v05_config *c);

/* plugin.c: the process-local state, the journal's open (create, attach). */
int v05__plugin_init_local(struct v05_plugin *p);
void v05__plugin_free_local(struct v05_plugin *p);
int v05__plugin_open_journal(struct v05_plugin *p);

/* guard.c: the lane broker with the stored allow-list, where the stored
 * config asks for it (create, attach); the lanes' record function and
 * event handler, which account each lane's records and cut a lane off. */
int v05__plugin_start_broker(struct v05_plugin *p);
/* plugin.c: create a plugin called name, its segment at path (NULL: the
 * name's own, v05-NAME; a replace makes it in its temporary directory
 * first, its lanes reserved: cflags V05__CREATE_RESERVED). */
int v05__plugin_create_at(const char *path, const char *name,
			  const struct v05_config *c, unsigned cflags,
			  struct v05_plugin **out);
/* Stop it, and unmap its doorbell. */
void v05__plugin_stop_broker(struct v05_plugin *p);
void v05__apply_lane(void *ctx, const struct v05_record *recs, uint32_t n,
		     uint32_t lane);
void v05__lane_event(void *ctx, enum v05_lane_event ev, uint32_t lane,
		     uint32_t n);

/* wait.c: cancel an armed wait (poll and wait start with it). */
void v05__disarm(struct v05_plugin *p);

/* queue.c: the decision queue. Its growth allocates through this hook
 * (malloc; a test injects failures). */
extern void *(*v05__queue_malloc)(size_t n);
int v05__enqueue(struct v05_plugin *p, const struct v05_decision *d);
uint32_t v05__dequeue(struct v05_plugin *p, struct v05_decision *out,
		      uint32_t max);

/* decide.c (top.h): the lanes' v05_record_fn. */
void v05__apply_records(void *ctx, const struct v05_record *recs, uint32_t n,
			uint32_t lane);
/* Samples issued to a prompt: the bits of its issued mask. Counted here,
 * not with __builtin_popcountll, which the baseline x86-64 target turns
 * into a call to libgcc's __popcountdi2 (13 instructions per reward in
 * v05_poll, callgrind). */
static inline uint32_t v05__group_k(const struct v05_prompt *e)
{
	uint64_t x = e->issued;

	x -= (x >> 1) & 0x5555555555555555ull;
	x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
	return (uint32_t)((x * 0x0101010101010101ull) >> 56);
}

/* reject.c: a REJECT decision for a record refused for its value that a
 * live prompt waits for (the reason: V05_DF_NONFINITE or V05_DF_RANGE). */
void v05__reject_notice(struct v05_plugin *p, const struct v05_record *rec,
			uint32_t why);

/* slots.c: release, completions, readers. */
/* Slots in group order (their seq): publishing, re-journaling. */
void v05__sort_by_seq(const struct v05_segment *seg, uint32_t *slots,
		      uint32_t n);
/* The engine's release of a final slot (v05_release, cancel). */
void v05__slot_release(struct v05_plugin *p, uint32_t slot);
void v05__free_unheld(struct v05_plugin *p);
void v05__publish_completion(struct v05_plugin *p, uint32_t slot);
void v05__check_reader(struct v05_plugin *p, uint64_t now);
void v05__release_from_reader(void *ctx, uint32_t slot, uint32_t gen);
void v05__free_journaled(struct v05_plugin *p);
void v05__fill_group(const struct v05_segment *seg, uint32_t slot,
		     struct v05_slot_hdr *h, struct v05_group *g);

/* support.c */
void v05__support_add(struct v05_plugin *p, uint64_t key, float mean, uint32_t k);

#endif
