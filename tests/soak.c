/* SPDX-License-Identifier: MIT */
/*
 * Soak: 8 reward-worker processes pushing at full speed into one plugin
 * for a bounded time, while the test kills a random worker with SIGKILL
 * every so often and starts a replacement. Batches of 1,024 prompts (v05
 * mode, rounds, k up to 16) are submitted back to back, two in flight.
 *   soak [SECONDS]          default 60, or $V05_SOAK_SECONDS
 * When a worker dies, the samples it was asked for that have not arrived
 * are sent again to live workers (what arrives twice is rejected as a
 * duplicate). At the end, with every lane drained:
 *   - every record a lane handed over was applied or rejected exactly once
 *     (the lanes' consumed counts equal applied + rejected);
 *   - every applied reward belongs to exactly one final group (applied =
 *     the sum of the groups' k), every submitted prompt is final;
 *   - nothing was rejected except the duplicates/late rewards the resends
 *     can explain, and no worker, whose resends are such rewards, was cut
 *     off (docs/SHM.md, "Cutting a lane off");
 *   - the consumer's resident memory did not grow after warm-up, and no
 *     file descriptor leaked.
 * Progress is printed every 10 s; the summary last.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/config.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

#define WORKERS 8
#define LANES 16
#define BATCH 1024u
#define IN_FLIGHT 2u
#define MAX_PROMPTS (BATCH * IN_FLIGHT)

struct cmd {
	uint64_t key;
	uint32_t gen;
	uint32_t sample;
	float reward;
	uint32_t pad;
};

struct worker {
	pid_t pid;
	int fd;          /* write end of its command pipe, non-blocking */
	struct cmd *out; /* commands not yet written to the pipe */
	size_t len, cap;
};

/* Which worker was last asked for a prompt's samples, by slot. */
static int8_t slot_worker[MAX_PROMPTS];
static struct worker w[WORKERS];
static const char *seg_name;
static uint64_t resent, kills, restarts;

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float reward_of(uint64_t key, uint32_t s)
{
	return mix(key ^ (0x9e3779b97f4a7c15ull * (s + 1))) & 1 ? 1.f : -1.f;
}

static void die(const char *what)
{
	fprintf(stderr, "soak: %s (%s)\n", what, v05_errmsg());
	exit(1);
}

/* ---- worker process ------------------------------------------------------ */

static void worker_main(int fd)
{
	struct v05_reward r[256];
	struct cmd c[256];
	struct v05_producer *p = NULL;
	uint64_t t0 = v05__now_ns();

	/* A dead worker's lane comes back once the plugin reclaims it. */
	while (v05_producer_open(seg_name, 0, &p) == -EBUSY &&
	       v05__now_ns() - t0 < 10000000000ull)
		sched_yield();
	if (!p)
		_exit(2);
	for (;;) {
		ssize_t n = read(fd, c, sizeof(c));

		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			_exit(3);
		}
		/* Whole commands only: each write is whole commands of at
		 * most PIPE_BUF bytes (atomic), each read a multiple. */
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(c[0]); i++)
			r[i] = (struct v05_reward){ .key = c[i].key, .gen = c[i].gen,
						    .sample = c[i].sample,
						    .reward = c[i].reward };
		if (v05_producer_push_wait(p, r, (uint32_t)(n / (ssize_t)sizeof(c[0])),
					   10000) < 0)
			_exit(4);
	}
	v05_producer_close(p);
	_exit(0);
}

static void start_worker(int i)
{
	int fds[2];

	if (pipe(fds))
		die("pipe");
	w[i].pid = fork();
	if (w[i].pid < 0)
		die("fork");
	if (w[i].pid == 0) {
		close(fds[1]);
		for (int j = 0; j < WORKERS; j++)
			if (j != i && w[j].fd > 0)
				close(w[j].fd);
		worker_main(fds[0]);
	}
	close(fds[0]);
	w[i].fd = fds[1];
	fcntl(w[i].fd, F_SETFL, O_NONBLOCK);
	w[i].len = 0;
}

static void send_cmd(int i, uint64_t key, uint32_t gen, uint32_t s)
{
	struct worker *x = &w[i];

	if (x->len == x->cap) {
		x->cap = x->cap ? 2 * x->cap : 4096;
		x->out = realloc(x->out, x->cap * sizeof(*x->out));
		if (!x->out)
			die("out of memory");
	}
	x->out[x->len++] = (struct cmd){ key, gen, s, reward_of(key, s), 0 };
}

static void flush_workers(void)
{
	for (int i = 0; i < WORKERS; i++) {
		struct worker *x = &w[i];
		size_t done = 0;

		while (done < x->len) {
			size_t n = x->len - done;
			ssize_t k;

			if (n > PIPE_BUF / sizeof(struct cmd))
				n = PIPE_BUF / sizeof(struct cmd);
			k = write(x->fd, x->out + done, n * sizeof(struct cmd));
			if (k <= 0)
				break;
			done += (size_t)k / sizeof(struct cmd);
		}
		memmove(x->out, x->out + done, (x->len - done) * sizeof(*x->out));
		x->len -= done;
	}
}

/* Kill one worker; ask live ones for what it owed; start a replacement. */
static void kill_one(struct v05_plugin *p, int i)
{
	int st, to = i;

	kill(w[i].pid, SIGKILL);
	waitpid(w[i].pid, &st, 0);
	close(w[i].fd);
	w[i].len = 0; /* its unwritten commands are resent below */
	kills++;
	start_worker(i);
	restarts++;
	for (uint32_t t = 0; t <= p->table.mask; t++) {
		const struct v05_prompt *e = &p->table.e[t];
		uint64_t owed;

		if (!e->key || e->state != V05_P_COLLECTING ||
		    slot_worker[e->slot] != i)
			continue;
		/* All of it to one live worker, which owes it from now on
		 * (should that one be killed too). */
		owed = e->issued & ~e->received;
		to = (to + 1) % WORKERS == i ? (to + 2) % WORKERS : (to + 1) % WORKERS;
		slot_worker[e->slot] = (int8_t)to;
		for (uint32_t s = 0; s < 64; s++) {
			if (owed >> s & 1) {
				send_cmd(to, e->key, e->gen, s);
				resent++;
			}
		}
	}
}

/* ---- consumer ------------------------------------------------------------ */

static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = 0;
	if (f)
		fclose(f);
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	static struct v05_decision d[4 * BATCH];
	static struct v05_prompt_in in[BATCH];
	static char uids[BATCH][32];
	unsigned long secs = argc > 1 ? strtoul(argv[1], NULL, 10) :
			     test_env_ul("V05_SOAK_SECONDS", 60);
	uint64_t c[V05_COUNTER_SLOTS], t0, end, next_kill, next_report, k_sum = 0;
	uint64_t submitted = 0, finals = 0, batches = 0, rng = 0x5eed;
	uint32_t open_batches = 0, next_worker = 0;
	long rss_warm = 0, rss_end;
	double elapsed;
	int fds_warm = 0, fds_end, failed = 0;
	struct v05_plugin *p;
	struct v05_config cfg;
	char name[64];

	signal(SIGPIPE, SIG_IGN);
	test_name(name, sizeof(name), "soak");
	seg_name = name;
	tc_config(&cfg);
	cfg.max_prompts = MAX_PROMPTS;
	cfg.max_producers = LANES;
	cfg.lane_capacity = 8192;
	cfg.max_batches = 4;
	if (v05_plugin_create(name, &cfg, &p))
		die("create");
	for (int i = 0; i < WORKERS; i++)
		start_worker(i);

	t0 = v05__now_ns();
	end = t0 + secs * 1000000000ull;
	next_kill = t0 + 200000000ull;
	next_report = t0 + 10000000000ull;
	printf("soak: %lu s, %d workers (kill -9 and restart at random every 0.1-0.5 s), "
	       "batches of %u prompts\n", secs, WORKERS, BATCH);
	fflush(stdout);

	for (;;) {
		uint64_t now = v05__now_ns();
		int n;

		if (now < end && open_batches < IN_FLIGHT) {
			int m, status[BATCH];

			for (uint32_t i = 0; i < BATCH; i++) {
				snprintf(uids[i], sizeof(uids[i]), "soak-%llu-%u",
					 (unsigned long long)batches, i);
				in[i] = (struct v05_prompt_in){ uids[i],
					(uint32_t)strlen(uids[i]),
					(double)(mix(batches * BATCH + i) % 2001) / 1000.0 - 1.0 };
			}
			m = v05_submit(p, in, BATCH, d, status);
			if (m == (int)BATCH) {
				open_batches++;
				batches++;
				submitted += BATCH;
				n = m;
				goto handle;
			}
			if (m > 0)
				die("a batch half accepted");
		}
		n = v05_poll(p, d, 4 * BATCH);
		if (n < 0)
			die("poll");
handle:
		for (int j = 0; j < n; j++) {
			if (d[j].kind == V05_DECISION_SAMPLE) {
				int wi = (int)(next_worker++ % WORKERS);

				slot_worker[d[j].slot] = (int8_t)wi;
				for (uint32_t s = 0; s < 64; s++)
					if (d[j].samples >> s & 1)
						send_cmd(wi, d[j].key, d[j].gen, s);
				continue;
			}
			k_sum += d[j].k;
			finals++;
			if (v05_release(p, d[j].slot, d[j].gen, d[j].key))
				die("release");
		}
		v05_counters(p, c, V05_COUNTER_SLOTS);
		open_batches = (uint32_t)(c[V05_C_BATCHES_SUBMITTED] - c[V05_C_BATCHES_DONE]);
		flush_workers();

		now = v05__now_ns();
		if (now < end && now >= next_kill) {
			rng = mix(rng);
			kill_one(p, (int)(rng % WORKERS));
			next_kill = now + 100000000ull + (rng >> 20) % 400000000ull;
		}
		if (!rss_warm && now - t0 >= (end - t0) / 10) {
			rss_warm = rss_kib();
			fds_warm = open_fds();
		}
		if (now >= next_report) {
			printf("soak: %3llu s  %llu prompts final  %llu rewards applied  "
			       "%llu kills\n", (unsigned long long)((now - t0) / 1000000000ull),
			       (unsigned long long)finals,
			       (unsigned long long)c[V05_C_REWARDS_APPLIED],
			       (unsigned long long)kills);
			fflush(stdout);
			next_report += 10000000000ull;
		}
		if (now >= end && finals == submitted)
			break;
		if (n == 0)
			v05_wait(p, 1);
		if (now > end + 60000000000ull)
			die("the last batches did not finish within 60 s of the end");
	}
	rss_end = rss_kib();
	fds_end = open_fds();
	elapsed = (double)(v05__now_ns() - t0) / 1e9;

	/* Stop the workers, then drain every lane, dead ones included. */
	for (int i = 0; i < WORKERS; i++) {
		int st;

		close(w[i].fd);
		waitpid(w[i].pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "soak: worker %d exited %d\n", i, st);
			failed = 1;
		}
		free(w[i].out);
	}
	while (v05_poll(p, d, 4 * BATCH) > 0)
		;
	v05__lanes_reclaim(&p->lanes, true, v05__apply_lane, p);
	while (v05_poll(p, d, 4 * BATCH) > 0)
		;
	v05_counters(p, c, V05_COUNTER_SLOTS);
	{
		uint64_t consumed = 0, rejected = 0, explained;

		for (uint32_t i = 0; i < p->lanes.n; i++) {
			const struct v05_ring_hdr *r = p->lanes.cons[i].r;

			consumed += p->seg.lane_own[i].consumed;
			if (r->tail != r->head) {
				fprintf(stderr, "soak: lane %u not drained\n", i);
				failed = 1;
			}
		}
		for (int r = V05_C_REJ_NONFINITE; r <= V05_C_REJ_CORRUPT; r++)
			rejected += c[r];
		explained = c[V05_C_REJ_DUPLICATE] + c[V05_C_REJ_LATE] +
			    c[V05_C_REJ_UNKNOWN];
		printf("soak: %lu s, %llu batches, %llu prompts, %llu rewards applied "
		       "(%.0f/s), %llu kills, %llu restarts, %llu resent, "
		       "%llu duplicates, %llu late, %llu unknown; RSS %ld -> %ld KiB, "
		       "fds %d -> %d\n",
		       secs, (unsigned long long)batches, (unsigned long long)submitted,
		       (unsigned long long)c[V05_C_REWARDS_APPLIED],
		       (double)c[V05_C_REWARDS_APPLIED] / elapsed,
		       (unsigned long long)kills, (unsigned long long)restarts,
		       (unsigned long long)resent,
		       (unsigned long long)c[V05_C_REJ_DUPLICATE],
		       (unsigned long long)c[V05_C_REJ_LATE],
		       (unsigned long long)c[V05_C_REJ_UNKNOWN], rss_warm, rss_end,
		       fds_warm, fds_end);
		if (consumed != c[V05_C_REWARDS_APPLIED] + rejected) {
			fprintf(stderr, "soak: consumed %llu != applied %llu + rejected %llu\n",
				(unsigned long long)consumed,
				(unsigned long long)c[V05_C_REWARDS_APPLIED],
				(unsigned long long)rejected);
			failed = 1;
		}
		if (c[V05_C_REWARDS_APPLIED] != k_sum || finals != submitted ||
		    c[V05_C_DEC_FINAL] != submitted) {
			fprintf(stderr, "soak: applied %llu, sum of k %llu, finals %llu of %llu\n",
				(unsigned long long)c[V05_C_REWARDS_APPLIED],
				(unsigned long long)k_sum, (unsigned long long)finals,
				(unsigned long long)submitted);
			failed = 1;
		}
		if (c[V05_C_LANES_CUT_OFF]) {
			fprintf(stderr, "soak: %llu honest workers cut off\n",
				(unsigned long long)c[V05_C_LANES_CUT_OFF]);
			failed = 1;
		}
		if (rejected != explained || explained > resent) {
			fprintf(stderr, "soak: %llu rejected, %llu explained by %llu resends\n",
				(unsigned long long)rejected, (unsigned long long)explained,
				(unsigned long long)resent);
			failed = 1;
		}
		/* 1 MiB of slack for the allocator's own arenas. */
		if (rss_end > rss_warm + 1024 || fds_end != fds_warm) {
			fprintf(stderr, "soak: RSS %ld -> %ld KiB, fds %d -> %d\n",
				rss_warm, rss_end, fds_warm, fds_end);
			failed = 1;
		}
	}
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	return failed;
}
