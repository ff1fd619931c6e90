/* SPDX-License-Identifier: MIT */
/*
 * The v05 plugin: lives in the rollout engine's process, owns a segment,
 * turns rewards into decisions. No thread of its own (except the fallback
 * waiter thread when io_uring's futex wait is refused): the engine calls
 * v05_submit() and v05_poll(), and waits on v05_fd() between polls.
 *
 *   v05_submit(batch)  -> first dispatch: SAMPLE k_init per prompt
 *   ... reward workers push (key, sample, reward) through their lanes ...
 *   v05_poll()         -> SAMPLE (more samples), FINAL (advantages written
 *                         in the slot), DROP (dapo: no signal)
 *   v05_group(slot)    -> zero-copy view of rewards and advantages
 *   v05_release(slot)  -> the slot may be reused
 *
 * The decision flow and both schedules are explained, with a worked
 * example, in docs/PLUGIN.md.
 *
 * Threads: a plugin handle is used by one thread at a time. Its calls must
 * not overlap: make them from one thread (the engine's loop), or serialise
 * them yourself; there is no lock inside. Handing the handle from one
 * thread to another between calls is fine. Another thread with something
 * for the plugin hands it to the owning thread (the Python package:
 * Plugin.post_eb_remote, applied by the next poll). Exceptions, callable
 * from any thread at any time: v05_fd, v05_wait_path, v05_wait_reason (set
 * at create) and v05_counters (relaxed snapshots). Builds with debug info
 * check the rule: a call made while another thread is inside one on the
 * same handle is refused with -EBUSY and does nothing (release builds do
 * not check). Producers, readers and observers are handles of their own,
 * each also used by one thread at a time.
 */
#ifndef V05_PLUGIN_H
#define V05_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

enum v05_schedule {
	V05_SCHEDULE_ROUNDS = 0, /* the paper's: a round's SAMPLEs go together */
	V05_SCHEDULE_STREAM = 1, /* each prompt on its own, padded by holding  */
};

enum v05_journal_sync {
	V05_JOURNAL_SYNC_NONE = 0,  /* write, let the kernel flush           */
	V05_JOURNAL_SYNC_BATCH = 1, /* fdatasync after every batched write   */
};

/* Config flags. */
#define V05_CONFIG_WAIT_THREAD (1u << 0) /* force the fallback waiter */
/*
 * rounds only: at each round barrier, do not apply the halt rule locally;
 * emit a BARRIER decision and wait for v05_resolve(). Several engines, each
 * with part of a batch, sum their counts and resolve alike (v05.distributed).
 */
#define V05_CONFIG_EXTERNAL_HALT (1u << 1)
/*
 * Let reward workers of other uids in (v05_producer_open with
 * V05_PRODUCER_ANY_UID): the plugin runs a broker thread that hands each
 * one a lane and a doorbell of its own over a unix socket, as sealed
 * memfds no one can resize, never a file of the segment (docs/SHM.md, "The
 * broker"). Without it, only processes of the plugin's uid can produce.
 * The broker admits only the users the config names (broker_uids,
 * broker_gids; at least one is required) and the plugin's own uid; it
 * refuses everyone else.
 */
#define V05_CONFIG_PRODUCER_BROKER (1u << 2)
/*
 * The kernel's overflow uid and gid (65534: /proc/sys/kernel/overflowuid)
 * are what every user of another user namespace that this one does not map
 * looks like, so a broker refuses a peer with either, and the config may
 * not list them, unless this flag says the owner knows: then they are ids
 * like any other (a listed overflow uid admits every unmapped user).
 */
#define V05_CONFIG_BROKER_OVERFLOW_IDS (1u << 3)
/*
 * Take abort records (v05_producer_abort): a producer may end a prompt
 * instance it names by key and gen, and the plugin hands its caller a
 * V05_DECISION_CANCEL for it (docs/SHM.md, "Abort records"). Without it
 * an abort record is rejected and counted (rejected_kind), so a caller
 * that does not know that decision kind never gets one.
 */
#define V05_CONFIG_ABORT_RECORDS (1u << 4)

/* Most uids, and most gids, a broker's allow-list holds. */
#define V05_BROKER_ALLOW_MAX 16u

#define V05_UID_MAX_BYTES 128u
#define V05_JOURNAL_PATH_MAX 480u

/*
 * The config is size-tagged (docs/PACKAGING.md, "One version series"):
 * `size` is the caller's sizeof(struct v05_config), set by
 * v05_config_init. A later release may add fields at its end without a
 * new soname: a config from an earlier header of this soname (smaller)
 * gets the library's defaults for the fields it lacks, one from a later
 * header (larger) is accepted when the fields this library does not know
 * are all 0 (else -E2BIG). Never below V05_CONFIG_SIZE_MIN.
 */
struct v05_config {
	uint32_t size;              /* the caller's sizeof(struct v05_config) */
	struct v05_params params;   /* cost, k_init, k_step, k_max, mode      */
	double halt_fraction;       /* in [0, 1]                               */
	uint32_t pad_multiple;      /* dispatch multiple, >= 1 (1: no padding) */
	uint32_t schedule;          /* enum v05_schedule                      */
	uint32_t stream_deadline_us;/* stream: longest hold (v05-eb: unpadded) */
	uint32_t max_prompts;       /* prompts active (not released) at once  */
	uint32_t max_producers;     /* reward-worker processes at once        */
	uint32_t lane_capacity;     /* records per lane, power of two         */
	uint32_t max_batches;       /* batches in flight at once              */
	uint32_t file_mode;         /* segment file's mode (default 0600); may
				     * let others read (readers, v05ctl), never
				     * write; lanes' files are always 0600    */
	uint32_t flags;             /* V05_CONFIG_*                           */
	uint32_t journal_sync;      /* enum v05_journal_sync                  */
	const char *journal_path;   /* NULL: no journal                       */
	/*
	 * V05_CONFIG_PRODUCER_BROKER: the users its broker hands lanes to,
	 * besides the plugin's own uid: a peer whose uid (SO_PEERCRED) is in
	 * broker_uids, or whose effective gid or one of whose supplementary
	 * groups (SO_PEERGROUPS, both as the kernel took them at connect) is
	 * in broker_gids. Required with the flag (at least one entry),
	 * refused without it. Stored in the segment: a takeover's broker
	 * admits the same users.
	 */
	uint32_t broker_uids[V05_BROKER_ALLOW_MAX];
	uint32_t broker_gids[V05_BROKER_ALLOW_MAX];
	uint32_t n_broker_uids;     /* entries of broker_uids in use          */
	uint32_t n_broker_gids;     /* entries of broker_gids in use          */
	/*
	 * The cut-off of a lane whose records are mostly rejected (docs/SHM.md,
	 * "Cutting a lane off"): once a producer's claim has handed over at
	 * least lane_cut_records records and more than lane_cut_permille per
	 * 1000 of them were rejected, the plugin stops reading its lane and its
	 * next push fails with -ECONNABORTED. 0 takes the default: records
	 * 4 x max_prompts x k_max (at least 4096), 900 per mille. A permille
	 * of 1000 never cuts.
	 */
	uint32_t lane_cut_records;
	uint32_t lane_cut_permille;
	/*
	 * v05-eb under the stream schedule (no barrier; docs/STATISTICS.md,
	 * "v05-eb without a barrier"): the fit is kept across batches, a
	 * first wave folded j first waves ago weighing (1 - 1/eb_window)^j
	 * (0: nothing is forgotten); until eb_cold first waves are in (this
	 * engine's and those handed in from others), first waves wait for
	 * them as at a barrier, or for their batch's last first wave if that
	 * comes sooner.
	 */
	uint32_t eb_window;
	uint32_t eb_cold;
	/*
	 * v05-eb under stream: early start. At submit, once the running fit
	 * is warm, a prompt whose probability of being given more samples
	 * after its first wave (the prior predictive's) is at least
	 * eb_early / 1000 gets k_step samples more with its first wave; if
	 * its first wave then says it needs none, they are aborted
	 * (V05_DECISION_ABORT) and their tokens are wasted. 0: off (the
	 * default; bench/ENGINE.md says why).
	 */
	uint32_t eb_early;
	/*
	 * v05-eb: the first wave from the fit. Bit k set: a first wave of k
	 * samples may be chosen (1 <= k <= k_max). Once the fit is warm
	 * (stream: eb_cold first waves folded; rounds: a batch of at least
	 * eb_cold first waves fitted at its barrier), each prompt's first
	 * wave is the size in this set with the least expected final risk
	 * under the fit and its prior (v05_eb_first_wave); k_init while cold.
	 * 0: always k_init. Default (1 << 2) | (1 << 4): 2 or 4.
	 */
	uint32_t eb_first;
	/*
	 * Pilot-Commit (mode "pilot-commit", docs/RULES.md): a prompt whose
	 * pilot success rate lies in [pc_lower, 1 - pc_upper] gets its
	 * commit samples, any other is dropped (defaults V05_PC_LOWER,
	 * V05_PC_UPPER, the authors'). EBPO (mode "ebpo"): its running
	 * statistics forget with a window of ebpo_window groups (each fold
	 * first multiplies the old weight by 1 - 1/ebpo_window); 0, the
	 * default, forgets nothing (the paper's Welford).
	 */
	double pc_lower;
	double pc_upper;
	uint32_t ebpo_window;
	uint32_t reserved_rules; /* 0 */
	/*
	 * v05-pg (mode "v05-pg", docs/STATISTICS.md): pg_between is the
	 * between-prompt variance of the normalised per-prompt gradient
	 * relative to one sample's within-prompt variance (default
	 * V05_PG_BETWEEN, measured on bench/train's probe; a trainer that
	 * measures its own sets it); pg_first, bit n set: a first wave of n
	 * samples may be chosen (default bits 1, 2, 4); pg_skip: a prompt
	 * whose expected signal sqrt(4 p (1 - p)) under the running fit is
	 * below pg_skip per mille of the mean over the prompts submitted
	 * (skipped ones included) is skipped (its DROP, k = 0, comes from
	 * the next poll; default V05_PG_SKIP; 0 never skips).
	 */
	double pg_between;
	uint32_t pg_first;
	uint32_t pg_skip;
};

/* sizeof(struct v05_config) in 0.5.0, the first release of libv05.so.1:
 * the smallest config any caller of this soname has. */
#define V05_CONFIG_SIZE_MIN 280u

/* v05_config_init flags. */
#define V05_CONFIG_INIT_PAPER (1u << 0) /* the paper's settings: below */

/*
 * Fill the caller's config of `size` bytes (sizeof(*c)) with the defaults
 * below (with V05_CONFIG_INIT_PAPER: v05_config_paper's), bytes past this
 * library's config zeroed, and set c->size. -EINVAL, writing nothing, for
 * a size below V05_CONFIG_SIZE_MIN (or above 64 KiB) or an unknown flag.
 * v05_config_default and v05_config_paper are macros that pass sizeof(*c).
 */
V05_API int v05_config_init(struct v05_config *c, size_t size,
			    unsigned flags);

/* Defaults: mode v05-pg (samples and prompts by the gradient's error per
 * rollout; docs/RULES.md, "Which mode for training", has the measurements
 * that chose it) with its preset, v05_config_mode's: the paper's
 * normaliser, k 2/2/16 (first waves of 1, 2 or 4 from the fit once it is
 * warm), the skip bar pg_skip 750, pad 1, no halt; stream, eb_window 512,
 * eb_cold 64, deadline 2000 us, 4096 prompts, 16 producers, lanes of
 * 4096, 64 batches, file mode 0600, no journal, no broker (its allow-list
 * empty), the default cut-off. v05_config_mode(c, V05_MODE_V05_EB) gives
 * the baseline's-MSE mode (docs/STATISTICS.md) with the library's k
 * 4/2/16, rms, pad 32. */
V05_API void v05_config_default(struct v05_config *c);
/* The defaults, then the paper's exact behaviour: mode v05 (fusion + OSLA)
 * with its cost V05_DEFAULT_COST, its 25% batch halt and the paper's
 * normaliser sqrt(1 - mu^2). */
V05_API void v05_config_paper(struct v05_config *c);
/* Both through v05_config_init with the caller's size. The functions
 * themselves (what a binding without the macros reaches) fill
 * V05_CONFIG_SIZE_MIN bytes. */
#define v05_config_default(c) ((void)v05_config_init((c), sizeof(*(c)), 0))
#define v05_config_paper(c) \
	((void)v05_config_init((c), sizeof(*(c)), V05_CONFIG_INIT_PAPER))
/* Set the mode, its default cost (v05-eb's V05_EB_DEFAULT_COST, every
 * other mode's V05_DEFAULT_COST: set a cost after this call) and its
 * settings, whatever mode the config had (set others after this call):
 * v05, v05-fixed, grpo, dapo and v05-eb the library's own (k 4/2/16,
 * rms, pad 32, halt 0.25, the halt used by mode v05 only); the others
 * what their authors ran (docs/RULES.md): reinforce-ada
 * and reinforce-ada-pos k 8/8/32, keep_n 0 (4), pad 1, halt 0;
 * knapsack-prior k_init 8 (the budget per prompt), k_max 64, pad 1, halt
 * 0; greso k 8/1/8, pad 1, halt 0; ebpo k 8/1/8 (one wave), pad 1, halt
 * 0; pilot-commit a pilot of 8 and a commit of 24 (k 8/24/32), pad 1,
 * halt 0; v05-pg k 2/2/16, pad 1, halt 0 and the paper's normaliser
 * (V05_SIGMA_PAPER; the published rules rms, which they do not read).
 * 0 or -EINVAL (unknown mode, or a config whose size v05_config_init did
 * not set). */
V05_API int v05_config_mode(struct v05_config *c, uint32_t mode);
/* 0, or -EINVAL naming the field in v05_errmsg(). */
V05_API int v05_config_check(const struct v05_config *c);

struct v05_plugin;

/* Create segment NAME (O_EXCL) and own it. */
V05_API int v05_plugin_create(const char *name, const struct v05_config *c,
			      struct v05_plugin **out);

/*
 * Take over segment NAME: its owner is gone (closed, or died). All state is
 * in the segment and is kept; call v05_recover() next for what the previous
 * owner had handed out and may not have seen through. -EBUSY if the owner
 * lives.
 */
V05_API int v05_plugin_attach(const char *name, unsigned flags,
			      struct v05_plugin **out);

/*
 * Create segment NAME in place of one whose owner is gone, never removing
 * what cannot be replaced: the old segment is claimed (no one can take it
 * over meanwhile), the new one made whole under a name of its own and
 * swapped in with atomic exchanges (at no moment is NAME free for another
 * process to take); the old one is removed only then. On any failure the
 * old segment is as it was. What is left of a name whose segment file is
 * gone (its side files) is removed and the segment created. -EBUSY if the
 * owner lives; v05_plugin_attach keeps a dead owner's groups instead.
 */
V05_API int v05_plugin_replace(const char *name, const struct v05_config *c,
			       struct v05_plugin **out);

#define V05_CLOSE_UNLINK (1u << 0)
/*
 * Leave the segment's address range readable after close: the mapping is
 * replaced, atomically (mmap MAP_FIXED), by private anonymous read-only
 * memory of the same size, so a view still held into a slot (zero-copy
 * bindings) reads zeros instead of faulting. The range stays reserved for
 * the life of the process; the segment itself is released as usual.
 */
#define V05_CLOSE_KEEP_READABLE (1u << 1)

/* Flush the journal, give up ownership, unmap (and unlink if asked). */
V05_API int v05_plugin_close(struct v05_plugin *p, unsigned flags);

/* ---- submit and poll ---------------------------------------------------- */

struct v05_prompt_in {
	const void *uid;  /* the prompt's uid bytes (e.g. verl's uuid)    */
	uint32_t uid_len; /* 1..V05_UID_MAX_BYTES                         */
	double prior;     /* value-model prior on [-1, 1]; in mode
			   * knapsack NaN too: no estimate yet (the
			   * prompt gets k_init, outside the knapsack;
			   * its group records a prior of 0)            */
};

enum v05_decision_kind {
	V05_DECISION_SAMPLE = 1, /* generate the samples in `samples`        */
	V05_DECISION_FINAL = 2,  /* advantages are in `slot`                 */
	V05_DECISION_DROP = 3,   /* dapo: zero-variance group, slot still held */
	V05_DECISION_BARRIER = 4,/* external halt: a round barrier is reached;
				  * k = prompts that need more, samples =
				  * prompts in the batch; call v05_resolve() */
	V05_DECISION_REJECT = 5, /* a reward for an issued sample without one
				  * was refused for its value (flags:
				  * V05_DF_NONFINITE or V05_DF_RANGE;
				  * baseline: the value as received; samples:
				  * the sample's bit): unless its producer
				  * pushes a valid one, that sample will never
				  * be rewarded, so the group cannot finish */
	V05_DECISION_ABORT = 6,  /* v05-eb's early start: the samples in
				  * `samples` (k of them) are not needed after
				  * all; stop generating them, push no reward
				  * for them (one pushed is refused) */
	V05_DECISION_CANCEL = 7, /* V05_CONFIG_ABORT_RECORDS: a producer
				  * aborted the prompt (v05_producer_abort):
				  * it is out of the table and its slot freed,
				  * as v05_cancel does; stop generating the
				  * samples in `samples` (issued, not
				  * rewarded; k of them). No final follows;
				  * nothing to release */
};

/* Decision flags. */
#define V05_DF_PADDED (1u << 0)    /* SAMPLE includes padding samples       */
#define V05_DF_HALTED (1u << 1)    /* FINAL because the batch halted        */
#define V05_DF_RECOVERED (1u << 2) /* from v05_recover()                    */
#define V05_DF_NONFINITE (1u << 3) /* REJECT: the reward was NaN or infinite */
#define V05_DF_RANGE (1u << 4)     /* REJECT: the reward was outside [-1, 1] */

struct v05_decision {
	uint64_t key;        /* v05_key(uid)                                */
	uint64_t samples;    /* SAMPLE: bit s set = generate sample s       */
	uint64_t batch;      /* batch id (from 1)                           */
	uint64_t latency_ns; /* from the apply of the reward that completed
			      * the group's samples (plugin clock) to this
			      * decision: its wait for a round; 0 if none  */
	double baseline;     /* FINAL/DROP                                  */
	uint32_t kind;       /* enum v05_decision_kind                      */
	uint32_t slot;       /* the prompt's slot (also for SAMPLE)         */
	uint32_t k;          /* FINAL/DROP: group size; SAMPLE: new samples */
	uint32_t flags;      /* V05_DF_*                                    */
	uint32_t gen;        /* the slot's generation for this prompt: with
			      * key and slot, what v05_release checks     */
	uint32_t reserved;   /* 0                                           */
};

/*
 * Register n prompts as one batch; out (n entries) receives the first
 * dispatch, k_init samples per accepted prompt. status[i] (may be NULL) is
 * 0 or the prompt's error: -EEXIST (uid active), -ENOSPC (no free slot),
 * -EINVAL (uid length), -EDOM (prior). Returns the number of decisions.
 */
V05_API int v05_submit(struct v05_plugin *p, const struct v05_prompt_in *in,
		       uint32_t n, struct v05_decision *out, int *status);

/*
 * Drain rewards, decide, and return up to max decisions. A journal failure
 * is returned once as its negative errno (journaling stops; polling goes
 * on). Decisions not returned stay queued for the next call. -ENOMEM: a
 * decision could not be queued; sticky (every call answers it) until
 * v05_recover() hands out the whole state again.
 */
V05_API int v05_poll(struct v05_plugin *p, struct v05_decision *out,
		     uint32_t max);

/*
 * v05-eb without a barrier (schedule stream): the running fit's state.
 * v05_eb_state_get copies this plugin's own part (the first waves it
 * folded, forgetting applied), for other engines to merge;
 * v05_eb_state_set_remote hands in the sum of the other engines' own
 * parts, replacing the one handed in before (so an exchange repeated
 * counts nothing twice); the next decision fits own + remote. Both are
 * kept in the segment (a takeover keeps them). -EINVAL unless the plugin
 * runs v05-eb with the stream schedule; -EDOM for a state with a value
 * that is not finite or a weight outside [0, folded].
 */
V05_API int v05_eb_state_get(struct v05_plugin *p, struct v05_eb_state *own);
V05_API int v05_eb_state_set_remote(struct v05_plugin *p,
				    const struct v05_eb_state *others);
/*
 * v05_eb_state_set_own replaces this plugin's own part with `own`, one
 * that v05_eb_state_get returned before (maybe in another process): a
 * run resumed from a checkpoint goes on deciding under the fit it had
 * (forgetting then applies to it as to the first waves folded here).
 * Same errors as v05_eb_state_set_remote.
 */
V05_API int v05_eb_state_set_own(struct v05_plugin *p,
				 const struct v05_eb_state *own);

/*
 * Resolve batch `batch` (its id) waiting at a round barrier: halt it (its
 * held prompts finalize) or release its round. -ENOENT: no such batch;
 * -EINVAL: not waiting at a barrier.
 */
V05_API int v05_resolve(struct v05_plugin *p, uint64_t batch, int halt);

/*
 * Give up batch `batch` (its id), e.g. when generation or scoring failed:
 * its open prompts leave the table and their slots are freed (no final, no
 * journal record, nothing for a reader); its decisions not yet returned
 * are discarded (a FINAL/DROP among them has its slot released). FINAL
 * groups already returned stay the caller's to release. Later rewards for
 * its prompts are rejected as unknown. Returns the number of prompts
 * cancelled; -ENOENT: no such live batch.
 */
V05_API int v05_cancel(struct v05_plugin *p, uint64_t batch);

/* After attach, or after v05_poll answered -ENOMEM: SAMPLE decisions for
 * every issued sample without a reward, FINAL/DROP for every final slot
 * not yet released, BARRIER for every batch waiting at one (flag
 * RECOVERED). The set is taken once; call until it returns 0 (v05_poll
 * also hands out what is left). */
V05_API int v05_recover(struct v05_plugin *p, struct v05_decision *out,
			uint32_t max);

/* ---- waiting ------------------------------------------------------------- */

/* Pollable fd: readable after v05_arm() once rewards (or a deadline) came. */
V05_API int v05_fd(struct v05_plugin *p);
/* 1: work is already there (do not wait), 0: armed, wait for v05_fd() to
 * be readable (at most timeout_ms, -1 forever), then call v05_poll(). */
V05_API int v05_arm(struct v05_plugin *p, int timeout_ms);
/* Block until work or timeout: 1 work, 0 timeout, -EINTR. */
V05_API int v05_wait(struct v05_plugin *p, int timeout_ms);
/* 1 if v05_poll has something to do now (queued decisions, rewards in
 * the lanes, a stream deadline due), else 0. */
V05_API int v05_pending(struct v05_plugin *p);
/* For a caller that knows when rewards arrive because it pushes them
 * itself (the Python driver scoring in-process) and so waits without the
 * doorbell: *ns = 0 when v05_poll has work now without a new reward
 * (queued decisions, an error to report, a stream deadline due), the
 * nanoseconds until the next stream deadline, or -1 when none is set.
 * 0, or -EINVAL. Rewards pushed by anyone else are not looked at. */
V05_API int v05_next_deadline(struct v05_plugin *p, int64_t *ns);
/* "io_uring" or "thread", and why. */
V05_API const char *v05_wait_path(const struct v05_plugin *p);
V05_API const char *v05_wait_reason(const struct v05_plugin *p);

/* ---- groups (zero-copy) -------------------------------------------------- */

struct v05_group {
	uint64_t key;
	uint64_t seq;   /* group sequence number (journal order), from 1 */
	uint64_t batch;
	const float *rewards;    /* k entries, in the segment      */
	const float *advantages; /* k entries, beside the rewards  */
	const uint8_t *uid;
	double prior, baseline, sigma, mean;
	uint32_t slot, gen, k, action, uid_len;
	uint64_t keep; /* bit i: sample i is trained on (every k bits but
			* for reinforce-ada; its other advantages are 0) */
	uint64_t reserved[2]; /* 0: room for later fields (docs/PACKAGING.md) */
};

/* The final group in slot: -EINVAL (bad slot), -EAGAIN (not final yet). */
V05_API int v05_group(struct v05_plugin *p, uint32_t slot, struct v05_group *g);
/*
 * Let the slot be reused (after the journal has it). slot, gen and key come
 * from the decision (or group) being released: a stale one, whose slot now
 * holds another prompt, or one from another plugin is refused with
 * -ESTALE and frees nothing. -EALREADY if already released; -EBUSY if the
 * group is still collecting.
 */
V05_API int v05_release(struct v05_plugin *p, uint32_t slot, uint32_t gen,
			uint64_t key);
/* The uid of the prompt in slot (active or final): copies up to len bytes
 * into buf and returns the uid's length; -EINVAL for a free slot. */
V05_API int v05_slot_uid(struct v05_plugin *p, uint32_t slot, void *buf,
			 uint32_t len);

/* Byte offset of a slot's rewards and advantages in the segment file, for
 * mapping them elsewhere (either pointer may be NULL). */
V05_API int v05_slot_offsets(struct v05_plugin *p, uint32_t slot,
			     uint64_t *rewards_off, uint64_t *adv_off);

/* ---- readers: the trainer in another process ----------------------------- */

struct v05_reader;
V05_API int v05_reader_open(const char *name, unsigned flags,
			    struct v05_reader **out);
/* 1 and *g, 0 when no new final group is there, -EIO when the completion
 * ring's indices are impossible even after a fresh read (a stray write;
 * the plugin restores them when it resets a dead reader's claim). */
V05_API int v05_reader_next(struct v05_reader *r, struct v05_group *g);
V05_API int v05_reader_release(struct v05_reader *r, const struct v05_group *g);
V05_API int v05_reader_close(struct v05_reader *r);

/* ---- support buffer and counters ---------------------------------------- */

/* The support buffer keeps the last V05_SUPPORT_GROUPS final groups. */
#define V05_SUPPORT_GROUPS 512u

struct v05_support {
	uint64_t key;
	float mean; /* mean reward of the finalized group, [-1, 1] */
	uint32_t k;
};

/* Up to n entries sampled without replacement from the last (up to
 * V05_SUPPORT_GROUPS) finalized groups, reproducibly for a seed. Returns
 * the count. */
V05_API int v05_support_sample(struct v05_plugin *p, struct v05_support *out,
			       uint32_t n, uint64_t seed);

#define V05_COUNTER_SLOTS 256u
/* Copy every counter (V05_COUNTER_SLOTS of them). */
V05_API int v05_counters(struct v05_plugin *p, uint64_t *out, uint32_t n);
/* A counter's name ("rewards_applied", "k_hist_16", ...) or NULL. */
V05_API const char *v05_counter_name(uint32_t i);

#ifdef __cplusplus
}
#endif

#endif /* V05_PLUGIN_H */
