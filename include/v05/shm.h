/* SPDX-License-Identifier: MIT */
/*
 * v05 shared-memory transport, the public part: segment names, producers
 * (reward workers) and readers (the trainer) in other processes.
 *
 * A segment named NAME is the file "v05-NAME" in $V05_SHM_DIR (default
 * /dev/shm), created by the plugin. Names are 1 to V05_NAME_MAX characters
 * from [A-Za-z0-9._-], not starting with '.'.
 */
#ifndef V05_SHM_H
#define V05_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define V05_NAME_MAX 200

/* Attach flags. */
#define V05_ATTACH_ANY_UID (1u << 0) /* accept a segment of another uid */

/* 0, or -EINVAL (empty, bad character) / -ENAMETOOLONG. */
V05_API int v05_name_check(const char *name);

/* The 64-bit key of a prompt uid: XXH3_64bits of its bytes (0 maps to 1,
 * as 0 marks an empty table entry). */
V05_API uint64_t v05_key(const void *uid, size_t len);

/* Remove a segment's name (mappings stay valid until unmapped). */
V05_API int v05_segment_unlink(const char *name);

/*
 * Remove the segment of an owner that died: -EBUSY if the owner lives,
 * 0 when removed. The segment must pass attach validation.
 */
V05_API int v05_segment_reclaim(const char *name, unsigned flags);

/* ---- producers: one per process, each with its own SPSC lane ---------- */

struct v05_producer;

/*
 * gen is the gen of the decision that issued the sample (struct
 * v05_decision): it names the prompt's instance, so that a late reward for
 * a uid since released and submitted again is rejected, not credited to
 * the new instance. A reward worker gets it with the job (uid, sample,
 * gen) from the engine side.
 */
struct v05_reward {
	uint64_t key;    /* v05_key(uid)                         */
	uint32_t gen;    /* the decision's gen                   */
	uint32_t sample; /* sample index the plugin issued       */
	float reward;    /* in [-1, 1]                           */
	uint32_t reserved; /* 0                                  */
};

/* Producer open flags. */
#define V05_PRODUCER_DEFER (1u << 0) /* push() does not publish; flush() does */
/* Accept a segment created by another uid: reward workers running as a
 * different user, by explicit choice. Such a producer opens no file of the
 * segment; it gets its lane from the plugin's broker (its config needs
 * V05_CONFIG_PRODUCER_BROKER; -ECONNREFUSED without one). */
#define V05_PRODUCER_ANY_UID (1u << 1)

/*
 * Claim a free lane of segment NAME (CAS on the lane's owner word). -EBUSY
 * when every lane is held, v05_errmsg() saying what holds them (lanes of
 * dead producers come back once the plugin has drained them; a lane the
 * broker granted, once its producer closed it and the plugin drained it).
 */
V05_API int v05_producer_open(const char *name, unsigned flags,
			      struct v05_producer **out);

/* Append one record; published at once unless V05_PRODUCER_DEFER.
 * -EAGAIN when the lane is full (nothing written). */
V05_API int v05_producer_push(struct v05_producer *p, uint64_t key,
			      uint32_t gen, uint32_t sample, float reward);

/*
 * Abort the prompt instance (key, gen) (the gen of a decision that issued
 * one of its samples): one record, published at once (also with
 * V05_PRODUCER_DEFER), after the rewards pushed before it. The plugin,
 * if its config has V05_CONFIG_ABORT_RECORDS, takes the prompt out as
 * v05_cancel does and hands its caller a V05_DECISION_CANCEL naming the
 * samples to stop; an unknown key, another instance or a final group is
 * rejected and counted, as a reward would be (docs/SHM.md, "Abort
 * records"). -EAGAIN when the lane is full (nothing written).
 */
V05_API int v05_producer_abort(struct v05_producer *p, uint64_t key,
			       uint32_t gen);

/* Append n records and publish them with one release store, all or none:
 * -EAGAIN when fewer than n fit. Returns n. */
V05_API int v05_producer_push_batch(struct v05_producer *p,
				    const struct v05_reward *r, uint32_t n);

/* As push_batch, waiting up to timeout_ms (-1: forever) for room;
 * -ETIMEDOUT if it never came, -EINTR if a signal interrupted the wait. */
V05_API int v05_producer_push_wait(struct v05_producer *p,
				   const struct v05_reward *r, uint32_t n,
				   int timeout_ms);

/* Publish deferred records (one release store) and ring the doorbell if
 * the consumer sleeps. Returns the number published. */
V05_API int v05_producer_flush(struct v05_producer *p);

/* Flush, give the lane back, unmap. */
V05_API int v05_producer_close(struct v05_producer *p);

/* The lane index this producer holds. */
V05_API int v05_producer_lane(const struct v05_producer *p);

#ifdef __cplusplus
}
#endif

#endif /* V05_SHM_H */
