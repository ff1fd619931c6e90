/* SPDX-License-Identifier: MIT */
/* The fixture util/cutoff_fx.h declares. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/config.h"
#include "util/cutoff_fx.h"
#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

void cut_full_read(int fd, void *buf, size_t len)
{
	uint8_t *b = buf;

	while (len) {
		ssize_t n = read(fd, b, len);

		if (n <= 0)
			_exit(90);
		b += n;
		len -= (size_t)n;
	}
}

void cut_full_write(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = write(fd, b, len);

		if (n <= 0)
			_exit(91);
		b += n;
		len -= (size_t)n;
	}
}

/* Publish n records of zeros past the lane's tail, through a mapping of
 * the lane's own file: what a producer ignoring its library can do. */
int cut_flood(const char *name, int lane, uint32_t n)
{
	char seg[PATH_MAX], path[PATH_MAX + 32];
	uint64_t len = v05__lane_stride(LANE_CAP);
	struct v05_ring_hdr *r;
	void *m;
	int fd;

	if (v05__segment_path(name, seg, sizeof(seg)))
		return -EINVAL;
	snprintf(path, sizeof(path), "%s:side/lane.%d", seg, lane);
	fd = open(path, O_RDWR);
	if (fd < 0)
		return -errno;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	r = V05_AT(struct v05_ring_hdr, m, v05__lane_skew((uint32_t)lane));
	v05_store_release(&r->tail, v05_load_relaxed(&r->tail) + n);
	munmap(m, len);
	return 0;
}

void cut_kid_main(const char *name, int in, int out)
{
	struct v05_producer *w = NULL;
	struct kid_reply rep;
	struct v05_reward *recs = malloc(LANE_CAP * sizeof(*recs));

	memset(&rep, 0, sizeof(rep));
	rep.ret = v05_producer_open(name, 0, &w);
	rep.lane = rep.ret ? -1 : v05_producer_lane(w);
	snprintf(rep.msg, sizeof(rep.msg), "%s", v05_errmsg());
	cut_full_write(out, &rep, sizeof(rep));
	if (rep.ret || !recs)
		_exit(1);
	for (;;) {
		struct kid_cmd cmd;

		cut_full_read(in, &cmd, sizeof(cmd));
		memset(&rep, 0, sizeof(rep));
		rep.lane = v05_producer_lane(w);
		switch (cmd.op) {
		case OP_PUSH:
			if (cmd.n > LANE_CAP)
				_exit(2);
			cut_full_read(in, recs, cmd.n * sizeof(*recs));
			rep.ret = v05_producer_push_wait(w, recs, cmd.n, 5000);
			break;
		case OP_FLOOD:
			rep.ret = cut_flood(name, rep.lane, cmd.n);
			break;
		case OP_CLOSE:
			rep.ret = v05_producer_close(w);
			break;
		case OP_EXIT:
			_exit(0);
		}
		snprintf(rep.msg, sizeof(rep.msg), "%s", v05_errmsg());
		cut_full_write(out, &rep, sizeof(rep));
		if (cmd.op == OP_CLOSE)
			_exit(0);
	}
}

void cut_kid_start(struct kid *k, const char *name)
{
	int down[2], up[2];
	struct kid_reply rep;

	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (k->pid == 0) {
		close(down[1]);
		close(up[0]);
		cut_kid_main(name, down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	k->to = down[1];
	k->from = up[0];
	cut_full_read(k->from, &rep, sizeof(rep));
	if (rep.ret)
		fail_msg("kid's producer_open: %d %s", rep.ret, rep.msg);
	k->lane = rep.lane;
}

struct kid_reply cut_kid_do(struct kid *k, uint32_t op,
			    const struct v05_reward *recs, uint32_t n)
{
	struct kid_cmd cmd = { op, n };
	struct kid_reply rep;

	cut_full_write(k->to, &cmd, sizeof(cmd));
	if (op == OP_PUSH)
		cut_full_write(k->to, recs, n * sizeof(*recs));
	cut_full_read(k->from, &rep, sizeof(rep));
	return rep;
}

/* Push n records (any number) through the kid, the plugin polled between
 * chunks so that its lane has room: each chunk fits a drained lane. */
void cut_kid_push(struct kid *k, struct v05_plugin *p,
		  const struct v05_reward *recs, uint32_t n)
{
	for (uint32_t at = 0; at < n; at += LANE_CAP) {
		uint32_t m = n - at < LANE_CAP ? n - at : LANE_CAP;
		struct kid_reply rep = cut_kid_do(k, OP_PUSH, recs + at, m);

		if (rep.ret != (int)m)
			fail_msg("kid push: %d %s", rep.ret, rep.msg);
		/* Drained (decisions may queue up meanwhile). */
		while (v05__lanes_pending(&p->lanes))
			assert_true(v05_poll(p, NULL, 0) >= 0);
	}
}

void cut_kid_reap(struct kid *k)
{
	int st;

	close(k->to);
	close(k->from);
	assert_int_equal(waitpid(k->pid, &st, 0), k->pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

struct v05_plugin *cut_make_as(const char *name, uint32_t mode,
			       uint32_t prompts, uint32_t k_init,
			       uint32_t k_max, uint32_t cut_records,
			       bool broker)
{
	struct v05_plugin *p;
	struct v05_config c;

	tc_config(&c);
	c.params.mode = mode;
	c.params.k_init = k_init;
	c.params.k_step = k_init < k_max ? 2 : k_max;
	c.params.k_max = k_max;
	c.pad_multiple = 1;
	c.max_prompts = prompts;
	c.max_producers = 3;
	c.lane_capacity = LANE_CAP;
	c.lane_cut_records = cut_records;
	if (broker) {
		c.flags = V05_CONFIG_PRODUCER_BROKER;
		c.broker_uids[0] = 4242;
		c.n_broker_uids = 1;
	}
	if (v05_plugin_create(name, &c, &p))
		fail_msg("create: %s", v05_errmsg());
	return p;
}

struct v05_plugin *cut_make(const char *name, uint32_t mode, uint32_t prompts,
			    uint32_t k_init, uint32_t k_max,
			    uint32_t cut_records)
{
	return cut_make_as(name, mode, prompts, k_init, k_max, cut_records, false);
}

uint64_t cut_ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

uint64_t cut_rejected(struct v05_plugin *p)
{
	uint64_t v[V05_COUNTER_SLOTS], n = 0;

	v05_counters(p, v, V05_COUNTER_SLOTS);
	for (int r = V05_C_REJ_NONFINITE; r <= V05_C_REJ_CORRUPT; r++)
		n += v[r];
	return n;
}

/* The reward of (key, sample): a fixed function, so two runs agree. */
float cut_reward_of(uint64_t key, uint32_t s)
{
	return ((key >> (s % 61)) ^ s) & 1 ? 1.0f : -1.0f;
}

/* The records a SAMPLE decision asks for; returns how many. */
uint32_t cut_rewards_for(const struct v05_decision *d, struct v05_reward *out)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < 64; s++)
		if (d->samples >> s & 1)
			out[n++] = (struct v05_reward){ .key = d->key, .gen = d->gen,
							 .sample = s,
							 .reward = cut_reward_of(d->key, s) };
	return n;
}

uint32_t cut_submit(struct v05_plugin *p, const char *tag, uint32_t n,
		    struct v05_decision *d)
{
	struct v05_prompt_in in[256];
	static char uids[256][32];

	for (uint32_t i = 0; i < n; i++) {
		snprintf(uids[i], sizeof(uids[i]), "%s-%u", tag, i);
		in[i] = (struct v05_prompt_in){ .uid = uids[i],
						.uid_len = (uint32_t)strlen(uids[i]),
						.prior = -0.6 + 1.2 * i / n };
	}
	assert_int_equal(v05_submit(p, in, n, d, NULL), (int)n);
	return n;
}

/* Records with gens that are not the decisions' (a producer trying gens
 * for live keys): n of them over the decisions' issued samples. */
void cut_wrong_gens(const struct v05_decision *d, uint32_t nd,
		    struct v05_reward *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct v05_decision *x = &d[i % nd];

		out[i] = (struct v05_reward){ .key = x->key,
					      .gen = x->gen ^ (0x9e3779b9u + i),
					      .sample = (i / nd) % 4,
					      .reward = 1.0f };
	}
}

/* A file lane's ring, mapped from its file, as a process of the
 * segment's uid ignoring the library would. */
struct v05_ring_hdr *cut_map_lane_file(const char *name, uint32_t lane,
				       void **m)
{
	char seg[PATH_MAX], path[PATH_MAX + 32];
	uint64_t len = v05__lane_stride(LANE_CAP);
	int fd;

	assert_int_equal(v05__segment_path(name, seg, sizeof(seg)), 0);
	snprintf(path, sizeof(path), "%s:side/lane.%u", seg, lane);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	*m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(*m != MAP_FAILED);
	return V05_AT(struct v05_ring_hdr, *m, v05__lane_skew(lane));
}
