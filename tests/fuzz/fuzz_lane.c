/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a hostile producer writes any bytes into its own lane
 * and publishes any tail; the plugin polls. Input:
 *   byte 0      mode: bit 0 set = "shaped", each record's seq, flags and
 *               zero word are made right, its gen is its prompt's
 *               unless the raw gen is odd (another instance's), and
 *               its key is one of
 *               the live prompts' keys (key % 5, the fifth a key nobody
 *               submitted), so the bytes
 *               reach the reward checks instead of the lane's
 *               bit 1 set = the producer also writes the rest of what it
 *               maps: the last 16 bytes of the input go, as four u32,
 *               to its lane's published head and owner word (low half),
 *               the doorbell word and the sleeping flag
 *               bit 2 set = the plugin is taken over after its polls (a
 *               new owner resumes from what it trusts) and polls again
 *               bit 3 set = the segment takes abort records
 *               (V05_CONFIG_ABORT_RECORDS), and shaped records keep bit 0
 *               of their flags (an abort, its sample and reward as they
 *               came: mostly corrupt ones)
 *   bytes 1-4   the tail's advance past the head (little endian, any u32:
 *               more than the lane holds is an overrun)
 *   the rest    record bytes, copied into the lane from its head on
 * Each input gets a fresh plugin (4 prompts, k_init 2, k_max 4). Whatever
 * the bytes, afterwards: no prompt holds a reward for a sample it was not
 * issued, every record the lane handed over was either applied (a reward
 * or an abort) or counted under exactly one rejection reason (and so in the lane's own applied
 * and rejected counts), every final group's baseline and
 * advantages are finite, and the plugin still closes cleanly.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PROMPTS 4u
#define LANE_CAP 64u

static void setup(void)
{
	static char dir[] = "/tmp/v05-fuzz-lane-XXXXXX";
	static int done;

	if (done)
		return;
	if (!mkdtemp(dir))
		abort();
	setenv("V05_SHM_DIR", dir, 1);
	done = 1;
}

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_lane: invariant broken: %s\n", what);
		abort();
	}
}

static void consume(struct v05_plugin *p, const struct v05_decision *d, int n)
{
	for (int i = 0; i < n; i++) {
		struct v05_group g;

		if (d[i].kind == V05_DECISION_SAMPLE)
			continue;
		if (d[i].kind == V05_DECISION_CANCEL) {
			/* Out of the table already: nothing to release. */
			check(v05_group(p, d[i].slot, &g) != 0 ||
			      g.key != d[i].key, "a cancelled prompt's slot is free");
			continue;
		}
		if (d[i].kind == V05_DECISION_REJECT) {
			check(!isfinite(d[i].baseline) || d[i].baseline < -1.0 ||
			      d[i].baseline > 1.0, "a REJECT names a bad value");
			continue;
		}
		check(v05_group(p, d[i].slot, &g) == 0, "group of a final");
		check(isfinite(g.baseline), "finite baseline");
		for (uint32_t j = 0; j < g.k; j++)
			check(isfinite(g.advantages[j]) && isfinite(g.rewards[j]),
			      "finite advantages and rewards");
		check(v05_release(p, d[i].slot, d[i].gen, d[i].key) == 0, "release");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned serial;
	struct v05_decision d[64];
	struct v05_prompt_in in[PROMPTS];
	char name[64], uids[PROMPTS][8];
	uint64_t keys[PROMPTS + 1], c[V05_COUNTER_SLOTS], rejected = 0, applied;
	uint32_t gens[PROMPTS + 1];
	struct v05_producer *w = NULL;
	struct v05_plugin *p = NULL;
	struct v05_ring_hdr *lane;
	struct v05_record *recs;
	struct v05_config cfg;
	uint32_t head, adv;
	int n;

	setup();
	if (size < 5)
		return 0;
	v05_config_default(&cfg);
	cfg.params.k_init = 2;
	cfg.params.k_max = 4;
	cfg.pad_multiple = 1;
	cfg.max_prompts = PROMPTS;
	cfg.max_producers = 1;
	cfg.lane_capacity = LANE_CAP;
	if (data[0] & 8)
		cfg.flags |= V05_CONFIG_ABORT_RECORDS;
	snprintf(name, sizeof(name), "fuzz-lane-%d-%u", (int)getpid(), serial++);
	if (v05_plugin_create(name, &cfg, &p))
		abort();
	for (uint32_t i = 0; i < PROMPTS; i++) {
		snprintf(uids[i], sizeof(uids[i]), "u%u", i);
		in[i] = (struct v05_prompt_in){ .uid = uids[i], .uid_len = 2,
						.prior = 0.5 - 0.25 * i };
		keys[i] = v05_key(uids[i], 2);
	}
	keys[PROMPTS] = v05_key("nobody", 6);
	check(v05_submit(p, in, PROMPTS, d, NULL) == (int)PROMPTS, "submit");
	for (uint32_t i = 0; i < PROMPTS; i++)
		gens[i] = d[i].gen;
	gens[PROMPTS] = 0;
	/* A real claim first: the hostile producer owns its lane. */
	check(v05_producer_open(name, 0, &w) == 0, "producer open");

	lane = v05__lane(&p->seg, 0);
	recs = v05__lane_records(lane);
	head = lane->head;
	memcpy(&adv, data + 1, 4);
	for (size_t off = 5, j = 0; off < size && j < LANE_CAP; off += 32, j++) {
		struct v05_record r = { 0 };
		size_t len = size - off < 32 ? size - off : 32;

		memcpy(&r, data + off, len);
		if (data[0] & 1) {
			r.seq = head + (uint32_t)j;
			r.flags = data[0] & 8 ? r.flags & V05_RECORD_ABORT : 0;
			r.zero = 0;
			/* Mostly the instance's own gen; an odd raw gen stays
			 * as it came (another instance's: late). */
			if (!(r.gen & 1))
				r.gen = gens[r.key % (PROMPTS + 1)];
			r.key = keys[r.key % (PROMPTS + 1)];
		}
		recs[(head + j) & (LANE_CAP - 1)] = r;
	}
	if ((data[0] & 2) && size >= 5 + 16) {
		/* Everything else in the producer's two pages. */
		uint32_t v[4];

		memcpy(v, data + size - 16, 16);
		v05_store_relaxed(&lane->head, v[0]);
		if (v[1])
			v05_store_relaxed(&lane->owner, (uint64_t)v[1]);
		v05_store_relaxed(&p->seg.bell->doorbell, v[2]);
		v05_store_relaxed(&p->seg.bell->sleeping, v[3]);
	}
	/* Published as a producer would: a release store of the tail. */
	v05_store_release(&lane->tail, head + adv);

	for (int round = 0; round < 8; round++) {
		n = v05_poll(p, d, 64);
		check(n >= 0, "poll answers");
		consume(p, d, n);
		if (n == 0 && !v05_pending(p))
			break;
	}
	if (data[0] & 4) {
		/* Taken over: the new owner resumes from its own copy of
		 * the lane's head, whatever the lane's page says. */
		check(v05_plugin_close(p, 0) == 0, "close for takeover");
		check(v05_plugin_attach(name, 0, &p) == 0, "takeover");
		lane = v05__lane(&p->seg, 0);
		n = v05_recover(p, d, 64);
		check(n >= 0, "recover answers");
		consume(p, d, n);
		for (int round = 0; round < 8; round++) {
			n = v05_poll(p, d, 64);
			check(n >= 0, "poll answers after takeover");
			consume(p, d, n);
			if (n == 0 && !v05_pending(p))
				break;
		}
	}

	for (uint32_t i = 0; i <= p->table.mask; i++) {
		const struct v05_prompt *e = &p->table.e[i];

		if (e->key)
			check((e->received & ~e->issued) == 0,
			      "a reward only for an issued sample");
	}
	check(v05_counters(p, c, V05_COUNTER_SLOTS) > V05_C_REJ_CORRUPT, "counters");
	for (int r = V05_C_REJ_NONFINITE; r <= V05_C_REJ_CORRUPT; r++)
		rejected += c[r];
	rejected += c[V05_C_REJ_KIND];
	applied = c[V05_C_REWARDS_APPLIED] + c[V05_C_ABORTS_APPLIED];
	check(p->seg.lane_own[0].consumed == applied + rejected,
	      "each record handed over applied or rejected once");
	/* And the lane's own accounting (plugin/guard.c) agrees. */
	check(p->seg.lane_own[0].applied == applied &&
	      p->seg.lane_own[0].rejected == rejected,
	      "the lane's applied and rejected counts");
	if (getenv("V05_FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz_lane: consumed %llu applied %llu (aborts "
			"%llu) rejected %llu (corrupt %llu) overruns %llu "
			"finals %llu\n",
			(unsigned long long)p->seg.lane_own[0].consumed,
			(unsigned long long)applied,
			(unsigned long long)c[V05_C_ABORTS_APPLIED],
			(unsigned long long)rejected,
			(unsigned long long)c[V05_C_REJ_CORRUPT],
			(unsigned long long)c[V05_C_LANE_OVERRUNS],
			(unsigned long long)c[V05_C_DEC_FINAL]);

	v05_producer_close(w);
	check(v05_plugin_close(p, V05_CLOSE_UNLINK) == 0, "close");
	return 0;
}
