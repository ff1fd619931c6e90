/* SPDX-License-Identifier: MIT */
/*
 * What an admitted attacker costs the owner (issue 36, item 3): honest
 * batches, each a round trip (submit, an honest reward worker pushes every
 * sample's reward, the owner polls until all are final), with and without
 * an attacker, the phases alternating in one run so that the host's drift
 * hits both alike. The attacker is a listed producer (through the broker,
 * a raw client ignoring the library) that floods its lane with records of
 * wrong gens, never claiming it (its owner word left as the broker's
 * token: the evasion of the old cut-off), and, once cut off, reconnects in
 * a loop, a new process per round. Reported: per phase kind, the median
 * and p99 of the honest batches' round trip and the owner's CPU time
 * inside v05_poll per batch, and their ratios (attack / none), plus the
 * attacker's grants, its refused reconnects and the records it pushed.
 *
 *   bench_hostile [PHASES] [PHASE_MS] [PROMPTS]   (JSON on stdout)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"
#include "util/rawgrant.h"

#define K 4u
#define MAXP 4096u

struct shared {
	uint32_t n;                /* prompts in the batch        */
	uint32_t seq;              /* batch number, released      */
	struct v05_decision d[MAXP];
	uint64_t attack_records;   /* the attacker's, all rounds  */
	uint64_t attack_grants;
	uint64_t attack_refused;
};

static uint64_t ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static float reward_of(uint64_t key, uint32_t s)
{
	return ((key >> (s % 61)) ^ s) & 1 ? 1.0f : -1.0f;
}

/* The honest reward worker: for each batch the owner announces (pipe),
 * every issued sample's reward. */
static int honest(const char *name, struct shared *sh, int in)
{
	struct v05_producer *w;
	uint32_t seq;

	if (v05_producer_open(name, 0, &w))
		return 1;
	while (read(in, &seq, sizeof(seq)) == sizeof(seq)) {
		for (uint32_t i = 0; i < sh->n; i++) {
			const struct v05_decision *d = &sh->d[i];
			struct v05_reward r[K];
			uint32_t m = 0;

			for (uint32_t s = 0; s < 64; s++)
				if (d->samples >> s & 1)
					r[m++] = (struct v05_reward){ .key = d->key,
								      .gen = d->gen, .sample = s,
								      .reward = reward_of(d->key, s) };
			if (v05_producer_push_wait(w, r, m, 10000) != (int)m)
				return 2;
		}
	}
	v05_producer_close(w);
	return 0;
}

/* One round of the attacker: a grant, a flood until its lane is taken
 * from it (cut off), then gone. Returns records pushed, or 0 if refused. */
static uint64_t attack_round(const char *name, struct shared *sh,
			     uint64_t key, uint32_t gen)
{
	struct raw_grant g;
	uint64_t pushed = 0;
	uint32_t cap;

	if (raw_grant(name, &g)) {
		__atomic_fetch_add(&sh->attack_refused, 1, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_fetch_add(&sh->attack_grants, 1, __ATOMIC_RELAXED);
	if (raw_grant_map(&g))
		return 0;
	cap = g.g.lane_capacity;
	/* Never claimed: the owner word stays the token. Flood until cut
	 * (the word says so), then a little more, unread. */
	for (uint64_t extra = 0; extra < 64;) {
		uint32_t head = v05_load_acquire(&g.lane->head);
		uint32_t room = cap - (v05_load_relaxed(&g.lane->tail) - head);

		if (v05_load_relaxed(&g.lane->owner) == V05_OWNER_CUT)
			extra++;
		if (room > cap)
			room = 0;
		if (room >= 64 || extra) {
			raw_publish(g.lane, cap, key, gen ^ 0x5a5a5a5a, 64);
			pushed += 64;
		}
	}
	raw_grant_close(&g);
	__atomic_fetch_add(&sh->attack_records, pushed, __ATOMIC_RELAXED);
	return pushed;
}

/* The attacker: rounds back to back, each a new process (as the issue's
 * "new process per round"), until killed. */
static int attacker(const char *name, struct shared *sh)
{
	/* Another user, listed, where we can become one. */
	if (geteuid() == 0 && (setgid(4242) || setuid(4242)))
		return 1;
	for (;;) {
		struct timespec pace = { 0, 1000000 };
		pid_t pid = fork();
		int st;

		if (pid == 0)
			_exit(attack_round(name, sh, sh->d[0].key, sh->d[0].gen) ? 0 : 1);
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			return 1;
		/* Refused (its backoff): again in 1 ms. Unpaced, the loop
		 * is a fork bomb, which measures the host, not v05. */
		if (WIFEXITED(st) && WEXITSTATUS(st))
			nanosleep(&pace, NULL);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, uint32_t n, double q)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[(uint32_t)(q * (n - 1))];
}

int main(int argc, char **argv)
{
	uint32_t phases = argc > 1 ? (uint32_t)atoi(argv[1]) : 10;
	uint32_t phase_ms = argc > 2 ? (uint32_t)atoi(argv[2]) : 2000;
	uint32_t prompts = argc > 3 ? (uint32_t)atoi(argv[3]) : 256;
	const uint32_t per = 1u << 20; /* most batches a phase records */
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t *rt[2], *cpu[2];
	uint32_t nrt[2] = { 0, 0 };
	struct v05_plugin *p;
	struct v05_config c;
	char name[64];
	int hp[2], st;
	pid_t hpid;

	if (sh == MAP_FAILED || !phases || !phase_ms || !prompts || prompts > MAXP)
		return 2;
	for (int k = 0; k < 2; k++) {
		rt[k] = calloc((size_t)phases * per, sizeof(uint64_t));
		cpu[k] = calloc((size_t)phases * per, sizeof(uint64_t));
		if (!rt[k] || !cpu[k])
			return 2;
	}
	snprintf(name, sizeof(name), "bench-hostile-%d", (int)getpid());
	v05_config_default(&c);
	c.params.mode = V05_MODE_V05_FIXED;
	c.params.k_init = c.params.k_step = c.params.k_max = K;
	c.pad_multiple = 1;
	c.max_prompts = prompts;
	c.max_producers = 4;
	c.flags = V05_CONFIG_PRODUCER_BROKER;
	c.broker_uids[0] = 4242;
	c.n_broker_uids = 1;
	if (v05_plugin_create(name, &c, &p)) {
		fprintf(stderr, "create: %s\n", v05_errmsg());
		return 1;
	}
	if (pipe(hp))
		return 1;
	hpid = fork();
	if (hpid == 0) {
		close(hp[1]);
		_exit(honest(name, sh, hp[0]));
	}
	close(hp[0]);
	for (uint32_t ph = 0, seq = 0; ph < phases; ph++) {
		uint64_t end = ns(CLOCK_MONOTONIC) + (uint64_t)phase_ms * 1000000u;
		int attack = ph & 1;
		pid_t apid = -1;

		for (uint32_t b = 0; b < per && ns(CLOCK_MONOTONIC) < end; b++, seq++) {
			struct v05_prompt_in *in = calloc(prompts, sizeof(*in));
			char (*uids)[16] = calloc(prompts, 16);
			struct v05_decision out[256];
			uint64_t t0, used = 0;
			uint32_t finals = 0;

			for (uint32_t i = 0; i < prompts; i++) {
				snprintf(uids[i], 16, "b%u-%u", seq, i);
				in[i] = (struct v05_prompt_in){ .uid = uids[i],
								.uid_len = (uint32_t)strlen(uids[i]),
								.prior = 0.1 };
			}
			t0 = ns(CLOCK_MONOTONIC);
			sh->n = (uint32_t)v05_submit(p, in, prompts, sh->d, NULL);
			if (sh->n != prompts)
				return 3;
			/* The attacker starts once the first batch is out (it
			 * floods gens of a live prompt). */
			if (attack && apid < 0) {
				apid = fork();
				if (apid == 0)
					_exit(attacker(name, sh));
			}
			if (write(hp[1], &seq, sizeof(seq)) != sizeof(seq))
				return 4;
			while (finals < prompts) {
				uint64_t c0;
				int n;

				(void)v05_wait(p, 5);
				c0 = ns(CLOCK_THREAD_CPUTIME_ID);
				n = v05_poll(p, out, 256);
				used += ns(CLOCK_THREAD_CPUTIME_ID) - c0;
				if (n < 0)
					return 5;
				for (int i = 0; i < n; i++) {
					if (out[i].kind != V05_DECISION_FINAL)
						continue;
					finals++;
					v05_release(p, out[i].slot, out[i].gen, out[i].key);
				}
			}
			rt[attack][nrt[attack]] = ns(CLOCK_MONOTONIC) - t0;
			cpu[attack][nrt[attack]++] = used;
			free(in);
			free(uids);
		}
		if (apid > 0) {
			kill(apid, SIGKILL);
			waitpid(apid, &st, 0);
		}
	}
	close(hp[1]);
	waitpid(hpid, &st, 0);
	{
		uint64_t v[V05_COUNTER_SLOTS];
		double r50, r99, c50, c99;
		uint64_t q[2][4];

		v05_counters(p, v, V05_COUNTER_SLOTS);
		for (int k = 0; k < 2; k++) {
			q[k][0] = pct(rt[k], nrt[k], 0.5);
			q[k][1] = pct(rt[k], nrt[k], 0.99);
			q[k][2] = pct(cpu[k], nrt[k], 0.5);
			q[k][3] = pct(cpu[k], nrt[k], 0.99);
		}
		r50 = (double)q[1][0] / (double)q[0][0];
		r99 = (double)q[1][1] / (double)q[0][1];
		c50 = (double)q[1][2] / (double)q[0][2];
		c99 = (double)q[1][3] / (double)q[0][3];
		printf("{\"phases\": %u, \"phase_ms\": %u, \"prompts\": %u, \"k\": %u,\n"
		       "  \"lane_cut_records\": %u,\n"
		       "  \"none\": {\"batches\": %u, \"roundtrip_p50_ns\": %llu, \"roundtrip_p99_ns\": %llu, \"poll_cpu_p50_ns\": %llu, \"poll_cpu_p99_ns\": %llu},\n"
		       "  \"attack\": {\"batches\": %u, \"roundtrip_p50_ns\": %llu, \"roundtrip_p99_ns\": %llu, \"poll_cpu_p50_ns\": %llu, \"poll_cpu_p99_ns\": %llu},\n"
		       "  \"ratio\": {\"roundtrip_p50\": %.3f, \"roundtrip_p99\": %.3f, \"poll_cpu_p50\": %.3f, \"poll_cpu_p99\": %.3f},\n"
		       "  \"attacker\": {\"grants\": %llu, \"refused_reconnects\": %llu, \"records_pushed\": %llu},\n"
		       "  \"owner\": {\"lanes_cut_off\": %llu, \"broker_backoff\": %llu, \"rejected_late\": %llu, \"rewards_applied\": %llu}}\n",
		       phases, phase_ms, prompts, K, p->cfg.lane_cut_records,
		       nrt[0], (unsigned long long)q[0][0], (unsigned long long)q[0][1],
		       (unsigned long long)q[0][2], (unsigned long long)q[0][3],
		       nrt[1], (unsigned long long)q[1][0], (unsigned long long)q[1][1],
		       (unsigned long long)q[1][2], (unsigned long long)q[1][3],
		       r50, r99, c50, c99,
		       (unsigned long long)sh->attack_grants,
		       (unsigned long long)sh->attack_refused,
		       (unsigned long long)sh->attack_records,
		       (unsigned long long)v[V05_C_LANES_CUT_OFF],
		       (unsigned long long)v[V05_C_BROKER_BACKOFF],
		       (unsigned long long)v[V05_C_REJ_LATE],
		       (unsigned long long)v[V05_C_REWARDS_APPLIED]);
	}
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	return 0;
}
