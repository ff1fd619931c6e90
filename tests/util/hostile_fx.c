/* SPDX-License-Identifier: MIT */
/* The fixture util/hostile_fx.h declares. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/actor.h"
#include "util/config.h"
#include "util/hostile_fx.h"
#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

uint64_t hst_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The runs: cross-user ones as root, else everyone this uid. */
int hst_casts(struct cast *out)
{
	if (actor_can_switch()) {
		out[0] = (struct cast){ 0, ACTOR_LISTED_UID, ACTOR_STRANGER_UID,
					"root owner" };
		out[1] = (struct cast){ ACTOR_OWNER_UID, ACTOR_LISTED_UID,
					ACTOR_STRANGER_UID, "unprivileged owner" };
		return 2;
	}
	fprintf(stderr, "hostile: the cross-user runs need root %s; running the attacks with one uid only (CI runs them as root)\n",
		actor_whoami());
	out[0] = (struct cast){ (uint32_t)-1, (uint32_t)-1, (uint32_t)-1,
				"one uid" };
	return 1;
}

void hst_config(struct v05_config *c, uint32_t listed)
{
	tc_config(c);
	c->params.mode = V05_MODE_V05_FIXED;
	c->params.k_init = K;
	c->params.k_step = K;
	c->params.k_max = K;
	c->pad_multiple = 1;
	c->max_prompts = PROMPTS;
	c->max_producers = 4;
	c->lane_capacity = 64;
	c->flags = V05_CONFIG_PRODUCER_BROKER;
	c->broker_uids[0] = listed == (uint32_t)-1 ? 4242 : listed;
	c->n_broker_uids = 1;
}

void hst_collect(struct owner_rep *rep, const struct v05_decision *d, int n)
{
	for (int i = 0; i < n; i++) {
		bool seen = false;

		if (d[i].kind != V05_DECISION_FINAL)
			continue;
		for (uint32_t j = 0; j < rep->nfinals; j++)
			seen |= rep->finals[j].key == d[i].key;
		if (!seen && rep->nfinals < PROMPTS)
			rep->finals[rep->nfinals++] =
				(struct final_rec){ d[i].key, d[i].baseline, d[i].k };
	}
}

int hst_owner_main(void *arg, int in, int out)
{
	struct v05_plugin *p = NULL;
	struct owner_rep rep;
	struct owner_cmd cmd;

	(void)arg;
	memset(&rep, 0, sizeof(rep));
	for (;;) {
		struct v05_decision d[64];
		uint64_t c[V05_COUNTER_SLOTS];
		int n;

		actor_recv(in, &cmd, sizeof(cmd));
		switch (cmd.op) {
		case 'c': {
			struct v05_config cf;
			struct v05_prompt_in pin[PROMPTS];
			char uids[PROMPTS][8];

			hst_config(&cf, cmd.listed);
			rep.ret = v05_plugin_create(cmd.name, &cf, &p);
			for (uint32_t i = 0; !rep.ret && i < PROMPTS; i++) {
				snprintf(uids[i], sizeof(uids[i]), "q%u", i);
				pin[i] = (struct v05_prompt_in){ .uid = uids[i],
								 .uid_len = 2,
								 .prior = 0.25 };
			}
			if (!rep.ret && v05_submit(p, pin, PROMPTS, rep.d, NULL) !=
					       (int)PROMPTS)
				rep.ret = -EIO;
			break;
		}
		case 'a':
			rep.ret = v05_plugin_attach(cmd.name, 0, &p);
			if (!rep.ret) {
				n = v05_recover(p, d, 64);
				hst_collect(&rep, d, n);
			}
			break;
		case 'p': {
			uint64_t end = hst_now_ns() + 10000000000ull;

			rep.ret = 0;
			do {
				(void)v05_wait(p, 10);
				n = v05_poll(p, d, 64);
				if (n < 0) {
					rep.ret = n;
					break;
				}
				hst_collect(&rep, d, n);
				v05_counters(p, c, V05_COUNTER_SLOTS);
			} while (c[V05_C_REWARDS_APPLIED] < cmd.target &&
				 hst_now_ns() < end);
			rep.applied = c[V05_C_REWARDS_APPLIED];
			rep.rejected = c[V05_C_REJ_CORRUPT] + c[V05_C_REJ_LATE] +
				       c[V05_C_REJ_UNKNOWN] + c[V05_C_REJ_DUPLICATE] +
				       c[V05_C_REJ_NOT_ISSUED] + c[V05_C_REJ_RANGE] +
				       c[V05_C_REJ_NONFINITE];
			rep.refused = c[V05_C_BROKER_REFUSED];
			break;
		}
		case 'r':
			rep.ret = v05_segment_reclaim(cmd.name, 0);
			break;
		case 'R': {
			struct v05_config cf;

			hst_config(&cf, cmd.listed);
			rep.ret = v05_plugin_replace(cmd.name, &cf, &p);
			break;
		}
		case 'x':
			return 0; /* dies with everything open */
		case 'q':
			v05_plugin_close(p, V05_CLOSE_UNLINK);
			return 0;
		}
		snprintf(rep.msg, sizeof(rep.msg), "%s", v05_errmsg());
		actor_send(out, &rep, sizeof(rep));
	}
}

struct owner_rep hst_owner_do(struct actor *o, char op, const char *name,
			      uint32_t target, uint32_t listed)
{
	struct owner_cmd cmd;
	struct owner_rep rep;

	memset(&cmd, 0, sizeof(cmd));
	cmd.op = op;
	cmd.target = target;
	cmd.listed = listed;
	snprintf(cmd.name, sizeof(cmd.name), "%s", name);
	actor_send(o->to, &cmd, sizeof(cmd));
	if (op == 'x' || op == 'q') {
		memset(&rep, 0, sizeof(rep));
		return rep;
	}
	actor_recv(o->from, &rep, sizeof(rep));
	return rep;
}

int hst_fd_attacks(int fd, size_t size)
{
	int bad = 0;
	char *m;

	if (ftruncate(fd, 0) == 0)
		bad |= A_SHRINK;
	if (ftruncate(fd, (off_t)size + 4096) == 0 ||
	    ftruncate(fd, 1ll << 40) == 0)
		bad |= A_GROW;
	if (pwrite(fd, "x", 1, (off_t)size) == 1)
		bad |= A_WRITE_PAST;
	if (fallocate(fd, 0, 0, (off_t)size * 4) == 0)
		bad |= A_FALLOCATE;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0)
		bad |= A_SEAL;
	/* Allowed, and harmless: the pages read as zeros from now on. */
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      (off_t)size))
		bad |= A_PUNCH;
	/* Scribble everything it can reach: garbage, rejected and counted. */
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		bad |= A_MAP;
	} else {
		for (size_t i = 0; i < size; i++)
			m[i] = (char)(i * 131 + 7);
		munmap(m, size);
	}
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096))
		bad |= A_PUNCH;
	return bad;
}

/* Replies: the lane's attacks' bits, then the doorbell's; the connection
 * is kept until 'q' (its grant lives as long). */
int hst_attacker_main(void *arg, int in, int out)
{
	struct attack_args *a = arg;
	struct raw_grant g;
	int r[2];
	char cmd;

	if (raw_grant(a->name, &g)) {
		r[0] = A_NOGRANT;
		r[1] = 0;
		actor_send(out, r, sizeof(r));
		return 0;
	}
	r[0] = hst_fd_attacks(g.lane_fd, v05__lane_stride(g.g.lane_capacity));
	r[1] = hst_fd_attacks(g.bell_fd, V05_PAGE);
	actor_send(out, r, sizeof(r));
	actor_recv(in, &cmd, 1);
	/* After the owner's death: the old descriptors, again. */
	r[0] = hst_fd_attacks(g.lane_fd, v05__lane_stride(g.g.lane_capacity));
	r[1] = hst_fd_attacks(g.bell_fd, V05_PAGE);
	actor_send(out, r, sizeof(r));
	actor_recv(in, &cmd, 1);
	raw_grant_close(&g);
	return 0;
}
