/* SPDX-License-Identifier: MIT */
/*
 * The plugin's vocabulary for what it keeps in the segment: its counters,
 * and the states and flags of its prompts, batches and final slots. The
 * layouts that hold them are the segment's (shm/layout.h); what the values
 * mean is the plugin's.
 */
#ifndef V05_PLUGIN_VOCAB_H
#define V05_PLUGIN_VOCAB_H

#include <assert.h>

#include "../../shm/layout.h"

/* Counters in the state region: written by the consumer (the plugin) only,
 * relaxed; readers (v05ctl stat) read them relaxed, a snapshot. */
enum v05_counter {
	V05_C_REWARDS_APPLIED = 0,
	V05_C_REJ_NONFINITE,   /* reward NaN or infinite                 */
	V05_C_REJ_RANGE,       /* reward outside [-1, 1]                 */
	V05_C_REJ_UNKNOWN,     /* key not active                         */
	V05_C_REJ_NOT_ISSUED,  /* sample index never issued              */
	V05_C_REJ_DUPLICATE,   /* sample already received                */
	V05_C_REJ_LATE,        /* prompt already final                   */
	V05_C_REJ_CORRUPT,     /* record fails the lane's checks         */
	V05_C_PROMPTS_SUBMITTED,
	V05_C_SUBMIT_REJECTED,
	V05_C_SAMPLES_ISSUED,
	V05_C_SAMPLES_SAVED,   /* sum over finals of k_max - k           */
	V05_C_SAMPLES_PADDED,  /* samples added by padding               */
	V05_C_DEC_SAMPLE,
	V05_C_DEC_FINAL,
	V05_C_DEC_DROP,
	V05_C_ROUNDS,
	V05_C_HALTS,
	V05_C_BATCHES_SUBMITTED,
	V05_C_BATCHES_DONE,
	V05_C_RELEASES,
	V05_C_LANE_CLAIMS,     /* sum of the lanes' claim counts (polled) */
	V05_C_LANE_RECLAIMS,
	V05_C_LANE_OVERRUNS,   /* a lane claimed more records than fit   */
	V05_C_WAITS,
	V05_C_WAKEUPS,
	V05_C_JOURNAL_RECORDS,
	V05_C_JOURNAL_BYTES,
	V05_C_JOURNAL_WRITES,  /* batched writes completed               */
	V05_C_JOURNAL_ERRORS,
	V05_C_TAKEOVERS,
	V05_C_PROMPTS_OPEN,    /* gauge: submitted, not final            */
	V05_C_PROMPTS_HELD,    /* gauge: decided "more", awaiting release */
	V05_C_PROMPTS_FINAL,   /* gauge: final, slot not yet released    */
	V05_C_LATENCY_COUNT,   /* reward-to-decision latencies recorded  */
	V05_C_LATENCY_SUM_NS,
	V05_C_COMPLETIONS,     /* completion records published           */
	V05_C_COMPLETIONS_SKIPPED, /* no reader attached                 */
	V05_C_RELEASES_BAD,    /* a reader's release of a wrong slot     */
	V05_C_PROMPTS_CANCELLED, /* open prompts given up by v05_cancel  */
	V05_C_READER_RELEASES, /* groups a reader released             */
	V05_C_BROKER_REFUSED,  /* peers the broker refused (allow-list); its
				* thread is this counter's only writer  */
	V05_C_LANES_CUT_OFF,   /* producers' claims cut off: mostly rejected */
	V05_C_BROKER_BACKOFF,  /* peers the broker sent away: their uid's
				* backoff after a cut-off (broker thread) */
	V05_C_SIDE_FILES_REPLACED, /* broken side files a takeover made anew */
	V05_C_REPLACES_UNDONE, /* replaces killed between their exchanges:
				* the old segment made whole again      */
	V05_C_REPLACES_CLEANED, /* temporaries of killed replaces removed */
	V05_C_EB_PARTS_REFUSED, /* other engines' fit parts refused: a
				 * state no fold could have made         */
	V05_C_PROMPTS_SKIPPED, /* prompts the rule took no sample of (its
				* DROP with k = 0 queued at submit)       */
	V05_C_ABORTS_APPLIED,  /* abort records applied: prompts cancelled
				* (V05_CONFIG_ABORT_RECORDS)             */
	V05_C_REJ_KIND,        /* a record of a kind the segment does not
				* take (an abort without the flag)       */
	V05_C_NAMED_END,
	V05_C_K_HIST = 64,     /* 65 entries: finals by k = 0..64        */
	V05_C_LAT_HIST = 160,  /* 48 entries: [2^b, 2^(b+1)) ns          */
	V05_C_LAT_BUCKETS = 48,
};
static_assert(V05_C_NAMED_END <= V05_C_K_HIST, "counter ids overlap");
static_assert(V05_C_K_HIST + 65 <= V05_C_LAT_HIST, "k histogram overlaps");
static_assert(V05_C_LAT_HIST + V05_C_LAT_BUCKETS <= V05_COUNTERS, "latency");

/* struct v05_prompt's state. */
enum v05_prompt_state {
	V05_P_COLLECTING = 1, /* samples issued, waiting for their rewards */
	V05_P_HELD,           /* decided "more"; awaiting batch release    */
	V05_P_FINAL,          /* finalized; entry kept until release       */
};

/* struct v05_batch_rec's state. */
enum v05_batch_state {
	V05_B_FREE = 0,
	V05_B_OPEN,
	V05_B_RELEASING, /* a round's release is being applied             */
	V05_B_HALTED,    /* halted: open prompts finalize, no more samples */
	V05_B_BARRIER,   /* external halt: waiting for v05_resolve()       */
};

/* struct v05_prompt's pad8 bits, for a held prompt. */
enum v05_prompt_flag {
	V05_PF_PADDED = 1u << 0, /* its plan got padding: its SAMPLE says so */
	V05_PF_DEFER = 1u << 1,  /* stays held through the batch's release  */
	V05_PF_EARLY = 1u << 2,  /* v05-eb: k_step more issued with the first
				  * wave; its first-wave decision is pending */
	V05_PF_UNDECIDED = 1u << 3, /* v05-eb: held, first wave in, no plan */
};

/* struct v05_slot_hdr's flags. */
enum v05_slot_flag {
	V05_SF_COMPLETION = 1u << 0, /* completion record published */
	V05_SF_JOURNALED = 1u << 1,  /* in the journal's buffer       */
	V05_SF_ENGINE_DONE = 1u << 2, /* the engine released it (v05_release) */
	V05_SF_READER_DONE = 1u << 3, /* a reader released it: not offered again */
};

#endif
