/* SPDX-License-Identifier: MIT */
/*
 * The plugin with reward workers as separate processes.
 *
 *   stress_plugin dirty rounds|stream [PROMPTS]
 *     A clean run (one worker, in order) and a dirty run (4 workers, random
 *     order and interleaving, duplicates, late rewards, NaN, out of range,
 *     unknown keys, unissued samples, corrupt records) of the same prompts
 *     and seeds: every group's k, baseline, rewards and advantages equal,
 *     bit for bit, and the counters name every rejected record.
 *     (stream runs with pad 1 and no halt, where a prompt's path does not
 *     depend on timing; rounds runs with the defaults.)
 *
 *   stress_plugin takeover [KILLS] [PROMPTS]
 *     The owning process is killed (SIGKILL) at random points of the batch,
 *     KILLS times; each time a new process attaches, recovers and carries
 *     on. Every group equals the uninterrupted run's; the journal holds
 *     every group, intact.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/config.h"
#include "util/engine.h"
#include "util/seg.h"
#include "v05-internal/journal.h"
#include "v05-internal/plugin.h"

static void config(struct v05_config *c, uint32_t n, int stream)
{
	tc_config(c);
	c->max_prompts = n;
	c->max_producers = 16;
	c->lane_capacity = 16384;
	/* Dirty and clean runs, and a run taken over many times, must end
	 * alike: under schedules whose decisions do not depend on the order
	 * rewards arrive in. v05-eb's barrier (rounds); the paper's stream
	 * without a halt. v05-eb without a barrier decides on the first waves
	 * seen so far (tests/test_eb_stream.c checks it replays alike). */
	c->schedule = V05_SCHEDULE_ROUNDS;
	if (stream) {
		c->params.mode = V05_MODE_V05;
		c->schedule = V05_SCHEDULE_STREAM;
		c->pad_multiple = 1;
		c->halt_fraction = 0.0;
	}
}

static int run_engine(struct eng *e, const struct v05_config *c, int workers)
{
	int ret = v05_plugin_create(e->name, c, &e->p);

	if (ret) {
		fprintf(stderr, "create: %s\n", v05_errmsg());
		return 1;
	}
	if (eng_start(e, workers) || eng_submit(e))
		return 1;
	ret = eng_run(e, 60);
	if (ret) {
		fprintf(stderr, "run: %d %s\n", ret, v05_errmsg());
		return 1;
	}
	return 0;
}

static uint64_t ctr(struct v05_plugin *p, int c)
{
	uint64_t v[V05_COUNTER_SLOTS];

	v05_counters(p, v, V05_COUNTER_SLOTS);
	return v[c];
}

static int same(const struct eng_result *a, const struct eng_result *b,
		uint32_t n, const char *what)
{
	for (uint32_t i = 0; i < n; i++) {
		if (a[i].kind != b[i].kind || a[i].k != b[i].k ||
		    a[i].baseline != b[i].baseline ||
		    memcmp(a[i].rewards, b[i].rewards, 4 * a[i].k) ||
		    memcmp(a[i].adv, b[i].adv, 4 * a[i].k)) {
			fprintf(stderr, "%s: prompt %u differs: k %u/%u baseline %.17g/%.17g\n",
				what, i, a[i].k, b[i].k, a[i].baseline,
				b[i].baseline);
			return 0;
		}
	}
	return 1;
}

static int dirty(int stream, uint32_t n)
{
	struct eng_prompt *pr = calloc(n, sizeof(*pr));
	struct eng_result *clean = calloc(n, sizeof(*clean));
	struct eng_result *messy = calloc(n, sizeof(*messy));
	uint64_t *keys = calloc(n, sizeof(*keys));
	struct v05_config c;
	struct eng e;
	char name[64];
	uint64_t rejected, sent, late_dup_unissued;
	int failed = 0;

	eng_make_prompts(pr, n, 42, 0.3);
	config(&c, n, stream);

	test_name(name, sizeof(name), "clean");
	eng_init(&e, name, pr, n, 7, clean, keys);
	e.release_finals = true;
	if (run_engine(&e, &c, 1) || eng_stop(&e))
		return 1;
	v05_plugin_close(e.p, V05_CLOSE_UNLINK);

	test_name(name, sizeof(name), "dirty");
	eng_init(&e, name, pr, n, 7, messy, keys);
	e.rng = 99;
	e.dirt.shuffle = true;
	e.dirt.dup_every = 5;
	e.dirt.late_every = 3;
	e.dirt.garbage = 1;
	e.dirt.corrupt = 50;
	if (run_engine(&e, &c, 4) || eng_stop(&e))
		return 1;
	/* Workers are gone and every record they pushed is published: one
	 * more poll applies (or rejects) whatever is still in the lanes. */
	v05_poll(e.p, NULL, 0);
	failed |= !same(clean, messy, n, "dirty vs clean");

	/* NaN, range, unknown and corrupt are exact. A duplicate, or an
	 * unissued sample, that lands after its prompt went final counts as
	 * late: those three are checked together. */
	failed |= ctr(e.p, V05_C_REJ_NONFINITE) != e.dirt.sent_nan;
	failed |= e.dirt.rejects_reported > e.dirt.sent_nan + e.dirt.sent_range;
	failed |= ctr(e.p, V05_C_REJ_RANGE) != e.dirt.sent_range;
	failed |= ctr(e.p, V05_C_REJ_UNKNOWN) != e.dirt.sent_unknown;
	failed |= ctr(e.p, V05_C_REJ_CORRUPT) != e.dirt.sent_corrupt;
	late_dup_unissued = ctr(e.p, V05_C_REJ_DUPLICATE) +
			    ctr(e.p, V05_C_REJ_LATE) +
			    ctr(e.p, V05_C_REJ_NOT_ISSUED);
	sent = e.dirt.sent_nan + e.dirt.sent_range + e.dirt.sent_unknown +
	       e.dirt.sent_corrupt + e.dirt.sent_dup + e.dirt.sent_late +
	       e.dirt.sent_unissued;
	rejected = ctr(e.p, V05_C_REJ_NONFINITE) + ctr(e.p, V05_C_REJ_RANGE) +
		   ctr(e.p, V05_C_REJ_UNKNOWN) + ctr(e.p, V05_C_REJ_CORRUPT) +
		   late_dup_unissued;
	failed |= late_dup_unissued !=
		  e.dirt.sent_dup + e.dirt.sent_late + e.dirt.sent_unissued;
	failed |= rejected != sent;
	printf("dirty %s: %u prompts; sent %llu bad records (nan %llu, range %llu, "
	       "unknown %llu, unissued %llu, dup %llu, late %llu, corrupt %llu); "
	       "rejected %llu (nonfinite %llu, range %llu, unknown %llu, "
	       "not issued %llu, duplicate %llu, late %llu, corrupt %llu): %s\n",
	       stream ? "stream" : "rounds", n, (unsigned long long)sent,
	       (unsigned long long)e.dirt.sent_nan,
	       (unsigned long long)e.dirt.sent_range,
	       (unsigned long long)e.dirt.sent_unknown,
	       (unsigned long long)e.dirt.sent_unissued,
	       (unsigned long long)e.dirt.sent_dup,
	       (unsigned long long)e.dirt.sent_late,
	       (unsigned long long)e.dirt.sent_corrupt,
	       (unsigned long long)rejected,
	       (unsigned long long)ctr(e.p, V05_C_REJ_NONFINITE),
	       (unsigned long long)ctr(e.p, V05_C_REJ_RANGE),
	       (unsigned long long)ctr(e.p, V05_C_REJ_UNKNOWN),
	       (unsigned long long)ctr(e.p, V05_C_REJ_NOT_ISSUED),
	       (unsigned long long)ctr(e.p, V05_C_REJ_DUPLICATE),
	       (unsigned long long)ctr(e.p, V05_C_REJ_LATE),
	       (unsigned long long)ctr(e.p, V05_C_REJ_CORRUPT),
	       failed ? "FAIL" : "ok");
	v05_plugin_close(e.p, V05_CLOSE_UNLINK);
	free(pr);
	free(clean);
	free(messy);
	free(keys);
	return failed;
}

/* ---- takeover ------------------------------------------------------------ */

struct shared {
	uint64_t decisions; /* handled by the current owner */
	uint32_t done;
	struct eng_result res[4096];
};

static struct shared *sh;

/* Results go to shared memory before the slot is released, so a kill at
 * any point leaves either the result or an unreleased slot that
 * v05_recover reports again. */
static void share_result(struct eng *e, const struct v05_decision *d)
{
	int i = eng_index(e, d->key);

	if (d->kind != V05_DECISION_SAMPLE) {
		memcpy(&sh->res[i], &e->res[i], sizeof(sh->res[i]));
		v05_release(e->p, d->slot, d->gen, d->key);
	}
	__atomic_add_fetch(&sh->decisions, 1, __ATOMIC_RELEASE);
}

static int owner(const char *name, const char *journal,
		 const struct eng_prompt *pr, uint32_t n, int first)
{
	struct eng_result *res = calloc(n, sizeof(*res));
	uint64_t *keys = calloc(n, sizeof(*keys));
	struct v05_decision d[256];
	struct v05_config c;
	struct eng e;
	int m;

	eng_init(&e, name, pr, n, 11, res, keys);
	e.on_decision = share_result;
	/* Groups final before this owner count as done already. */
	for (uint32_t i = 0; i < n; i++)
		e.finals += sh->res[i].kind != 0;
	if (first) {
		config(&c, n, 0);
		c.journal_path = journal;
		if (v05_plugin_create(name, &c, &e.p))
			return 1;
		if (eng_start(&e, 2) || eng_submit(&e))
			return 2;
	} else {
		if (v05_plugin_attach(name, 0, &e.p)) {
			fprintf(stderr, "attach: %s\n", v05_errmsg());
			return 3;
		}
		if (eng_start(&e, 2))
			return 4;
		while ((m = v05_recover(e.p, d, 256)) > 0)
			for (int i = 0; i < m; i++) {
				int j = eng_index(&e, d[i].key);

				/* A final group counted above is only
				 * released again; a new one is counted. */
				if (d[i].kind != V05_DECISION_SAMPLE &&
				    sh->res[j].kind)
					e.finals--;
				eng_handle(&e, &d[i]);
			}
	}
	if (eng_run(&e, 60))
		return 5;
	__atomic_store_n(&sh->done, 1, __ATOMIC_RELEASE);
	eng_stop(&e);
	return v05_plugin_close(e.p, 0) ? 6 : 0;
}

static int takeover(unsigned kills, uint32_t n)
{
	struct eng_prompt *pr = calloc(n, sizeof(*pr));
	struct eng_result *ref = calloc(n, sizeof(*ref));
	uint64_t *keys = calloc(n, sizeof(*keys));
	char name[64], ref_name[64], journal[] = "/tmp/v05-takeover-XXXXXX";
	char jpath[128];
	struct v05_config c;
	struct v05_plugin *p;
	struct v05_jscan js;
	uint64_t rng = 0xabcdefull, applied, sum_k = 0;
	unsigned killed = 0;
	struct eng e;
	int failed = 0, fd;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || n > 4096 || !mkdtemp(journal))
		return 2;
	snprintf(jpath, sizeof(jpath), "%s/takeover.v05j", journal);
	eng_make_prompts(pr, n, 5, 0.4);

	/* The uninterrupted run. */
	test_name(ref_name, sizeof(ref_name), "ref");
	config(&c, n, 0);
	eng_init(&e, ref_name, pr, n, 11, ref, keys);
	e.release_finals = true;
	if (run_engine(&e, &c, 2) || eng_stop(&e))
		return 1;
	v05_plugin_close(e.p, V05_CLOSE_UNLINK);

	test_name(name, sizeof(name), "takeover");
	for (unsigned round = 0; !sh->done; round++) {
		uint64_t at;
		pid_t pid;
		int st;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		/* A batch makes about 3 decisions per prompt; a kill every
		 * n/8 of them on average lands ~20 times in it. */
		at = __atomic_load_n(&sh->decisions, __ATOMIC_ACQUIRE) +
		     1 + (rng >> 33) % (n / 4 + 1);
		pid = fork();
		if (pid == 0)
			_exit(owner(name, jpath, pr, n, round == 0));
		if (killed < kills) {
			while (!__atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) &&
			       __atomic_load_n(&sh->decisions, __ATOMIC_ACQUIRE) < at) {
				if (waitpid(pid, &st, WNOHANG) == pid)
					break;
			}
			if (kill(pid, SIGKILL) == 0)
				killed++;
		}
		if (waitpid(pid, &st, 0) != pid)
			return 1;
		if ((WIFEXITED(st) && WEXITSTATUS(st)) ||
		    (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)) {
			fprintf(stderr, "owner %u ended with status 0x%x\n", round,
				st);
			return 1;
		}
	}
	failed |= !same(ref, sh->res, n, "takeover vs uninterrupted");
	/* No reward counted twice or lost: what was applied is what the
	 * final groups hold, but for a kill landing between a reward's bit
	 * and its counter (the reward is replayed as a duplicate). */
	if (v05_plugin_attach(name, 0, &p))
		return 1;
	for (uint32_t i = 0; i < n; i++)
		sum_k += sh->res[i].k;
	applied = ctr(p, V05_C_REWARDS_APPLIED);
	failed |= applied > sum_k || applied + killed < sum_k;
	/* The journal: every group at least once, in order, intact. */
	v05_plugin_close(p, V05_CLOSE_UNLINK);
	fd = open(jpath, O_RDONLY);
	if (fd >= 0) {
		struct stat stt;
		void *map;

		fstat(fd, &stt);
		map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		v05__journal_scan(map, (size_t)stt.st_size, NULL, NULL, &js);
		munmap(map, (size_t)stt.st_size);
		close(fd);
	} else {
		failed = 1;
	}
	failed |= js.tail != V05_JTAIL_CLEAN;
	failed |= js.records - js.duplicates != n || js.last_seq < n;
	printf("takeover: %u prompts, %u kills, applied %llu of %llu rewards in "
	       "final groups, journal %llu records (%llu repeated), tail %s: %s\n",
	       n, killed, (unsigned long long)applied,
	       (unsigned long long)sum_k, (unsigned long long)js.records,
	       (unsigned long long)js.duplicates,
	       v05__journal_tail_name(js.tail), failed ? "FAIL" : "ok");
	unlink(jpath);
	rmdir(journal);
	free(pr);
	free(ref);
	free(keys);
	return failed;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "dirty")) {
		int stream = argc >= 3 && !strcmp(argv[2], "stream");
		uint32_t n = argc >= 4 ? (uint32_t)atoi(argv[3]) : 512;

		return dirty(stream, n);
	}
	if (argc >= 2 && !strcmp(argv[1], "takeover")) {
		unsigned kills = argc >= 3 ? (unsigned)atoi(argv[2]) : 10;
		uint32_t n = argc >= 4 ? (uint32_t)atoi(argv[3]) : 512;

		return takeover(kills, n);
	}
	fprintf(stderr, "usage: %s dirty rounds|stream [N] | takeover [KILLS] [N]\n",
		argv[0]);
	return 2;
}
