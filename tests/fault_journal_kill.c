/* SPDX-License-Identifier: MIT */
/*
 * Fault: the owner is killed (SIGKILL) while it writes its journal. A child
 * owns a plugin with a journal and runs batches of 512 prompts x 16 samples
 * (about 120 KiB of journal per batch) as fast as it can; the parent kills
 * it at a random moment, ITERS times. After each kill:
 *   - the journal scans as clean or torn, never corrupt: whole records
 *     checked by their XXH3, sequence numbers strictly increasing;
 *   - a new owner attaches, truncates a torn tail, writes what the dead
 *     one had finalized but not yet written, finishes the batch it had
 *     open, and closes; the journal is then clean, holds every group of
 *     every batch the dead owner reported finished, and no group twice.
 * The test reports how many kills caught a write half-done (a torn tail):
 * that depends on timing and is printed, not required.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/config.h"
#include "util/seg.h"
#include "v05-internal/journal.h"
#include "v05-internal/shm.h"
#include "v05-internal/vocab.h"
#include "v05.h"

#define BATCH 512u
#define K 16u

static float reward_of(uint64_t key, uint32_t s)
{
	return ((key >> (s % 61)) ^ s) & 1 ? 1.f : -1.f;
}

static int fail(const char *what)
{
	fprintf(stderr, "fault_journal_kill: %s (%s)\n", what, v05_errmsg());
	return 1;
}

/* Push every requested sample's reward, release every final; returns the
 * number of finals handled. */
static uint32_t handle(struct v05_plugin *p, struct v05_producer *w,
		       const struct v05_decision *d, int n)
{
	uint32_t finals = 0;

	for (int j = 0; j < n; j++) {
		if (d[j].kind == V05_DECISION_SAMPLE) {
			for (uint32_t s = 0; s < 64; s++)
				if (d[j].samples >> s & 1)
					while (v05_producer_push(w, d[j].key, d[j].gen, s,
								 reward_of(d[j].key, s)) == -EAGAIN)
						v05_poll(p, NULL, 0);
		} else {
			v05_release(p, d[j].slot, d[j].gen, d[j].key);
			finals++;
		}
	}
	return finals;
}

static void owner_main(const char *name, const char *journal, int tick_fd)
{
	static struct v05_decision d[2 * BATCH];
	static struct v05_prompt_in in[BATCH];
	static char uids[BATCH][24];
	struct v05_producer *w;
	struct v05_plugin *p;
	struct v05_config c;

	tc_config(&c);
	c.max_prompts = BATCH;
	c.max_producers = 1;
	c.lane_capacity = 16384;
	c.params.mode = V05_MODE_GRPO;
	c.params.k_init = K;
	c.params.k_max = K;
	c.pad_multiple = 1;
	c.journal_path = journal;
	if (v05_plugin_create(name, &c, &p) || v05_producer_open(name, 0, &w))
		_exit(2);
	for (uint64_t b = 0;; b++) {
		static int status[BATCH];
		uint32_t finals = 0, todo = BATCH;
		int n;

		for (uint32_t i = 0; i < BATCH; i++) {
			snprintf(uids[i], sizeof(uids[i]), "b%llu-%u",
				 (unsigned long long)b, i);
			in[i] = (struct v05_prompt_in){ .uid = uids[i],
				.uid_len = (uint32_t)strlen(uids[i]), .prior = 0.0 };
		}
		while (finals < BATCH) {
			/* A slot comes back once the journal has its group:
			 * prompts refused for want of one are submitted again. */
			if (todo) {
				uint32_t left = 0;

				n = v05_submit(p, in, todo, d, status);
				if (n < 0)
					_exit(3);
				for (uint32_t i = 0; i < todo; i++) {
					if (status[i] == -ENOSPC)
						in[left++] = in[i];
					else if (status[i])
						_exit(3);
				}
				todo = left;
				finals += handle(p, w, d, n);
			}
			n = v05_poll(p, d, 2 * BATCH);
			if (n < 0)
				_exit(4);
			finals += handle(p, w, d, n);
		}
		if (write(tick_fd, "b", 1) != 1)
			_exit(5);
	}
}

static int scan(const char *path, struct v05_jscan *res)
{
	struct stat st;
	uint8_t *img;
	int fd = open(path, O_RDONLY), ret = -1;

	if (fd < 0 || fstat(fd, &st))
		return -1;
	img = malloc((size_t)st.st_size + 1);
	if (img && read(fd, img, (size_t)st.st_size) == st.st_size)
		ret = v05__journal_scan(img, (size_t)st.st_size, NULL, NULL, res);
	free(img);
	close(fd);
	return ret;
}

/* A new owner finishes what the dead one left. */
static int take_over(const char *name)
{
	static struct v05_decision d[2 * BATCH];
	uint64_t c[V05_COUNTER_SLOTS];
	struct v05_producer *w;
	struct v05_plugin *p;
	uint64_t t0 = v05__now_ns();
	int n;

	static struct v05_decision rec[4 * BATCH];
	uint32_t nrec = 0;

	if (v05_plugin_attach(name, 0, &p))
		return fail("attach after the kill");
	while ((n = v05_recover(p, rec + nrec, 4 * BATCH - nrec)) > 0)
		nrec += (uint32_t)n;
	if (n < 0)
		return fail("recover");
	/* The dead owner also held the one producer lane: the first poll
	 * drains what it published and frees the lane. */
	n = v05_poll(p, d, 2 * BATCH);
	if (n < 0 || v05_producer_open(name, 0, &w))
		return fail("producer after the kill");
	handle(p, w, rec, (int)nrec);
	handle(p, w, d, n);
	for (;;) {
		v05_counters(p, c, V05_COUNTER_SLOTS);
		if (c[V05_C_PROMPTS_OPEN] == 0 && c[V05_C_PROMPTS_FINAL] == 0)
			break;
		n = v05_poll(p, d, 2 * BATCH);
		if (n < 0)
			return fail("poll after takeover");
		handle(p, w, d, n);
		if (v05__now_ns() - t0 > 60000000000ull) {
			fprintf(stderr, "open %llu held %llu final %llu recovered %u\n",
				(unsigned long long)c[V05_C_PROMPTS_OPEN],
				(unsigned long long)c[V05_C_PROMPTS_HELD],
				(unsigned long long)c[V05_C_PROMPTS_FINAL], nrec);
			return fail("the batch never finished after takeover");
		}
	}
	v05_producer_close(w);
	return v05_plugin_close(p, V05_CLOSE_UNLINK) ? fail("close") : 0;
}

int main(int argc, char **argv)
{
	unsigned iters = argc > 1 ? (unsigned)atoi(argv[1]) : 12, torn = 0;
	char dir[] = "/tmp/v05-jkill-XXXXXX", journal[128], name[64];
	uint64_t rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;

	if (!mkdtemp(dir))
		return 1;
	for (unsigned it = 0; it < iters; it++) {
		struct v05_jscan a, b;
		unsigned batches = 0, want;
		int pipefd[2], st;
		uint64_t spin_ns, t;
		pid_t pid;
		char tick;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		want = 1 + (unsigned)(rng >> 60) % 4;
		spin_ns = (rng >> 20) % 3000000; /* up to 3 ms into a batch */
		snprintf(journal, sizeof(journal), "%s/j%u.v05j", dir, it);
		test_name(name, sizeof(name), "jkill");
		if (pipe(pipefd))
			return 1;
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			close(pipefd[0]);
			owner_main(name, journal, pipefd[1]);
		}
		close(pipefd[1]);
		while (batches < want && read(pipefd[0], &tick, 1) == 1)
			batches++;
		if (batches < want) {
			waitpid(pid, &st, 0);
			fprintf(stderr, "fault_journal_kill: owner exit status %d\n",
				WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			return fail("the owner died by itself");
		}
		/* The kill lands somewhere in the next batch's work. */
		for (t = v05__now_ns(); v05__now_ns() - t < spin_ns;)
			;
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		close(pipefd[0]);

		if (scan(journal, &a) != 0)
			return fail("the journal's header is unreadable");
		if (a.tail == V05_JTAIL_CORRUPT)
			return fail("a kill left a corrupt journal, not a torn one");
		if (a.duplicates != 0)
			return fail("sequence numbers repeat");
		torn += a.tail == V05_JTAIL_TORN;

		if (take_over(name))
			return 1;
		/* Every group the dead owner finalized is in the journal now,
		 * once (what it had not written yet, the new owner did). */
		if (scan(journal, &b) != 0 || b.tail != V05_JTAIL_CLEAN ||
		    b.duplicates != 0 || b.records < a.records ||
		    b.records < (uint64_t)batches * BATCH)
			return fail("after takeover the journal is not clean and whole");
		unlink(journal);
	}
	rmdir(dir);
	printf("fault_journal_kill: %u kills, %u left a torn tail; every journal "
	       "scanned clean or torn, never corrupt, and was clean after takeover\n",
	       iters, torn);
	return 0;
}
