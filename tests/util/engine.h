/* SPDX-License-Identifier: MIT */
/*
 * A small simulated engine for the plugin tests: prompts with hidden true
 * success probabilities, rewards that are a pure function of (uid, sample,
 * seed), and reward-worker processes that push what they are told through
 * their own lanes. The driver can inject duplicates, late rewards and
 * garbage, and knows exactly how many of each it sent.
 */
#ifndef V05_TEST_ENGINE_H
#define V05_TEST_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "v05/plugin.h"

struct eng_prompt {
	char uid[40];
	double prior;
	double p; /* true success probability */
};

struct eng_result {
	uint32_t kind; /* V05_DECISION_FINAL or _DROP; 0 not final */
	uint32_t k;
	double baseline;
	float rewards[64];
	float adv[64];
};

/* What the driver injects, per kind; counted as sent. */
struct eng_dirt {
	bool shuffle;          /* rewards of a dispatch in random order  */
	uint32_t dup_every;    /* every n-th reward also sent again      */
	uint32_t late_every;   /* every n-th final group: a reward again */
	uint32_t garbage;      /* per dispatch: nan, 2.0, unknown key, unissued */
	uint32_t corrupt;      /* records with flags != 0 via a raw lane  */
	uint64_t sent_dup, sent_late, sent_nan, sent_range, sent_unknown,
		sent_unissued, sent_corrupt;
	/* REJECT decisions: a NaN or out-of-range record that reached its
	 * prompt's sample before the valid one did (at most nan + range). */
	uint64_t rejects_reported;
};

struct eng {
	const char *name;
	struct v05_plugin *p;
	const struct eng_prompt *prompts;
	uint32_t n;
	uint64_t seed;
	struct eng_result *res; /* n, indexed like prompts */
	uint64_t *keys;         /* n */
	int nworkers;
	pid_t workers[16];
	int pipes[16];
	/* Commands not yet written to each worker's pipe: the driver never
	 * blocks on a pipe, so it keeps polling while workers catch up. */
	uint8_t *out[16];
	size_t out_len[16], out_cap[16];
	uint32_t next_worker;
	uint64_t rng;
	struct eng_dirt dirt;
	uint32_t finals;
	bool release_finals;  /* v05_release each final at once */
	/* optional hook after each decision (takeover test) */
	void (*on_decision)(struct eng *e, const struct v05_decision *d);
};

/* A driver for segment name: zeroed, then the fields every run sets. */
void eng_init(struct eng *e, const char *name, const struct eng_prompt *pr,
	      uint32_t n, uint64_t seed, struct eng_result *res, uint64_t *keys);

/* The reward of a sample: +1 with probability p, else -1, from a hash. */
float eng_reward(const struct eng_prompt *pr, uint32_t sample, uint64_t seed);

/* Prompts with p uniform, prior = clip(2p - 1 + noise). */
void eng_make_prompts(struct eng_prompt *out, uint32_t n, uint64_t seed,
		      double noise);

/* Start nworkers reward workers for segment e->name. */
int eng_start(struct eng *e, int nworkers);
/* Close the pipes and reap the workers; 0 if all exited cleanly. */
int eng_stop(struct eng *e);

/* Submit every prompt as one batch; handle the first dispatch. */
int eng_submit(struct eng *e);
/* Write what the pipes take now; 1 if anything is still buffered. */
int eng_flush(struct eng *e);
/* Handle one decision (send rewards, record results). */
void eng_handle(struct eng *e, const struct v05_decision *d);
/* Poll and handle until every prompt is final (or timeout_s passes
 * without progress: -ETIMEDOUT). */
int eng_run(struct eng *e, unsigned timeout_s);

/* Index of a key among the prompts, or -1. */
int eng_index(const struct eng *e, uint64_t key);

#endif
