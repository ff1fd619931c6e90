/* SPDX-License-Identifier: MIT */
/*
 * Faults: signals. (1) A signal during v05_wait, on each wait path, ends
 * the wait with -EINTR and loses nothing: the rewards pushed afterwards
 * wake the next wait and finish the prompt. (2) A signal during a blocking
 * push on a full lane ends it with -EINTR and writes nothing; the push
 * succeeds once the consumer drains. (3) A producer process stopped with
 * SIGSTOP for two seconds, holding half of its records unpublished: the
 * other producers' prompts all finish meanwhile (the consumer does not
 * stall on the stopped lane), and after SIGCONT the stopped producer's
 * prompts finish too, every reward applied exactly once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "v05-internal/vocab.h"

#include "util/config.h"
#include "util/seg.h"
#include "v05-internal/shm.h"
#include "v05.h"

static volatile sig_atomic_t signals_seen;
static volatile int stop_signalling;
static pthread_t target;

static void on_usr1(int sig)
{
	(void)sig;
	signals_seen++;
}

/* Keeps signalling the target thread until told to stop; the target ends
 * its blocking call on one of them, whenever it is inside. */
static void *signaller(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stop_signalling, __ATOMIC_ACQUIRE)) {
		pthread_kill(target, SIGUSR1);
		sched_yield();
	}
	return NULL;
}

static void start_signals(pthread_t *t)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1; /* no SA_RESTART: the call must see EINTR */
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
	target = pthread_self();
	__atomic_store_n(&stop_signalling, 0, __ATOMIC_RELEASE);
	assert_int_equal(pthread_create(t, NULL, signaller, NULL), 0);
}

static void stop_signals(pthread_t t)
{
	__atomic_store_n(&stop_signalling, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(t, NULL), 0);
}

static struct v05_plugin *small_plugin(const char *name, uint32_t lane_cap)
{
	struct v05_plugin *p;
	struct v05_config c;

	tc_config(&c);
	c.max_prompts = 4;
	c.max_producers = 2;
	c.lane_capacity = lane_cap;
	c.pad_multiple = 1;
	c.params.mode = V05_MODE_V05_FIXED;
	c.params.k_init = 4;
	c.params.k_max = 4;
	assert_int_equal(v05_plugin_create(name, &c, &p), 0);
	return p;
}

static void wait_eintr(const char *path)
{
	struct v05_prompt_in in = { .uid = "w", .uid_len = 1, .prior = 0.2 };
	struct v05_decision d[4];
	struct v05_producer *w;
	struct v05_plugin *p;
	char name[64];
	pthread_t t;
	int ret = 0, n;

	setenv("V05_WAIT", path, 1);
	test_name(name, sizeof(name), "sigwait");
	p = small_plugin(name, 64);
	unsetenv("V05_WAIT");
	assert_string_equal(v05_wait_path(p), path);
	assert_int_equal(v05_submit(p, &in, 1, d, NULL), 1);
	assert_int_equal(v05_producer_open(name, 0, &w), 0);

	start_signals(&t);
	/* Nothing is pushed: the only way out before 10 s is a signal. */
	for (int i = 0; i < 1000 && ret != -EINTR; i++) {
		ret = v05_wait(p, 10000);
		assert_true(ret == -EINTR || ret == 0);
	}
	stop_signals(t);
	assert_int_equal(ret, -EINTR);
	assert_true(signals_seen > 0);

	/* Nothing lost: the rewards now wake the wait and finish it. */
	for (uint32_t s = 0; s < 4; s++)
		assert_int_equal(v05_producer_push(w, d[0].key, d[0].gen, s, s ? 1.f : -1.f), 0);
	assert_int_equal(v05_wait(p, 10000), 1);
	n = v05_poll(p, d, 4);
	assert_int_equal(n, 1);
	assert_int_equal(d[0].kind, V05_DECISION_FINAL);
	assert_int_equal(d[0].k, 4);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

static void test_wait_eintr_io_uring(void **state)
{
	(void)state;
	wait_eintr("io_uring");
}

static void test_wait_eintr_thread(void **state)
{
	(void)state;
	wait_eintr("thread");
}

static void test_push_wait_eintr(void **state)
{
	struct v05_prompt_in in = { .uid = "q", .uid_len = 1, .prior = 0.0 };
	struct v05_reward r = { 0 };
	struct v05_decision d[4];
	struct v05_producer *w;
	struct v05_plugin *p;
	uint64_t c[V05_COUNTER_SLOTS];
	char name[64];
	pthread_t t;
	int ret;

	(void)state;
	test_name(name, sizeof(name), "sigpush");
	p = small_plugin(name, 16);
	assert_int_equal(v05_submit(p, &in, 1, d, NULL), 1);
	assert_int_equal(v05_producer_open(name, 0, &w), 0);
	/* Fill the lane: 16 records nobody drains (unknown keys). */
	for (uint32_t i = 0; i < 16; i++)
		assert_int_equal(v05_producer_push(w, 1000 + i, 0, 0, 1.f), 0);
	r = (struct v05_reward){ .key = d[0].key, .gen = d[0].gen,
				 .sample = 0, .reward = 1.f };
	assert_int_equal(v05_producer_push(w, r.key, r.gen, 0, 1.f), -EAGAIN);

	start_signals(&t);
	ret = v05_producer_push_wait(w, &r, 1, 10000);
	stop_signals(t);
	assert_int_equal(ret, -EINTR);

	/* Nothing was written by the interrupted push: the consumer finds
	 * exactly the 16 records, all for unknown keys. */
	assert_int_equal(v05_poll(p, d, 4), 0);
	v05_counters(p, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REJ_UNKNOWN], 16);
	assert_int_equal(c[V05_C_REWARDS_APPLIED], 0);
	/* Room again: the same push goes through. */
	assert_int_equal(v05_producer_push_wait(w, &r, 1, 10000), 1);
	assert_int_equal(v05_poll(p, d, 4), 0);
	v05_counters(p, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REWARDS_APPLIED], 1);
	v05_producer_close(w);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

/* ---- a stopped producer --------------------------------------------------- */

#define PROMPTS_EACH 64u
#define PRODUCERS 3u

static void uid_of(char *buf, uint32_t producer, uint32_t i)
{
	snprintf(buf, 24, "p%u-%u", producer, i);
}

/* Producer j pushes the 4 rewards of each of its prompts; the stopped one
 * stops itself halfway, so the test knows exactly what is unpublished. */
static void producer_main(const char *name, uint32_t j, int stop_halfway,
			  const struct v05_decision *d)
{
	struct v05_producer *w;
	char uid[24];

	if (v05_producer_open(name, 0, &w))
		_exit(2);
	for (uint32_t i = 0; i < PROMPTS_EACH; i++) {
		if (stop_halfway && i == PROMPTS_EACH / 2)
			raise(SIGSTOP);
		uid_of(uid, j, i);
		for (uint32_t s = 0; s < 4; s++)
			if (v05_producer_push_wait(w, &(struct v05_reward){
					.key = v05_key(uid, strlen(uid)),
					.gen = d[j * PROMPTS_EACH + i].gen,
					.sample = s,
					.reward = (i + s) % 3 ? 1.f : -1.f }, 1,
						   10000) != 1)
				_exit(3);
	}
	v05_producer_close(w);
	_exit(0);
}

static void test_stopped_producer(void **state)
{
	struct v05_prompt_in in[PRODUCERS * PROMPTS_EACH];
	char uids[PRODUCERS * PROMPTS_EACH][24];
	struct v05_decision d[256];
	uint32_t finals[PRODUCERS] = { 0 };
	pid_t pid[PRODUCERS];
	uint64_t c[V05_COUNTER_SLOTS], t0;
	struct v05_plugin *p;
	struct v05_config cfg;
	char name[64];
	int st;

	(void)state;
	test_name(name, sizeof(name), "sigstop");
	tc_config(&cfg);
	cfg.max_prompts = PRODUCERS * PROMPTS_EACH;
	cfg.max_producers = PRODUCERS;
	cfg.lane_capacity = 1024;
	cfg.params.mode = V05_MODE_V05_FIXED;
	cfg.params.k_init = 4;
	cfg.params.k_max = 4;
	cfg.pad_multiple = 1;
	assert_int_equal(v05_plugin_create(name, &cfg, &p), 0);
	for (uint32_t j = 0; j < PRODUCERS; j++)
		for (uint32_t i = 0; i < PROMPTS_EACH; i++) {
			uint32_t x = j * PROMPTS_EACH + i;

			uid_of(uids[x], j, i);
			in[x] = (struct v05_prompt_in){ .uid = uids[x],
				.uid_len = (uint32_t)strlen(uids[x]), .prior = 0.1 };
		}
	assert_int_equal(v05_submit(p, in, PRODUCERS * PROMPTS_EACH, d, NULL),
			 (int)(PRODUCERS * PROMPTS_EACH));

	for (uint32_t j = 0; j < PRODUCERS; j++) {
		pid[j] = fork();
		assert_true(pid[j] >= 0);
		if (pid[j] == 0)
			producer_main(name, j, j == 0, d);
	}
	/* Producer 0 has stopped itself, half its records published. */
	assert_int_equal(waitpid(pid[0], &st, WUNTRACED), pid[0]);
	assert_true(WIFSTOPPED(st));
	t0 = v05__now_ns();

	/* Meanwhile the others finish, and the consumer keeps serving for
	 * two seconds of the stop: producer 0's prompts half-done, never
	 * final, nothing else waiting on them. */
	while (finals[1] + finals[2] < 2 * PROMPTS_EACH ||
	       v05__now_ns() - t0 < 2000000000ull) {
		int n = v05_poll(p, d, 256);

		assert_true(n >= 0);
		for (int k = 0; k < n; k++) {
			assert_int_equal(d[k].kind, V05_DECISION_FINAL);
			for (uint32_t j = 0; j < PRODUCERS; j++) {
				char buf[24] = "";

				v05_slot_uid(p, d[k].slot, buf, sizeof(buf) - 1);
				if (buf[1] == (char)('0' + j))
					finals[j]++;
			}
			v05_release(p, d[k].slot, d[k].gen, d[k].key);
		}
		if (n == 0)
			assert_true(v05_wait(p, 100) >= 0);
		/* A stall would show here: 30 s for 128 prompts is a hang. */
		assert_true(v05__now_ns() - t0 < 30000000000ull);
	}
	assert_int_equal(finals[1], PROMPTS_EACH);
	assert_int_equal(finals[2], PROMPTS_EACH);
	assert_int_equal(finals[0], PROMPTS_EACH / 2);
	assert_int_equal(kill(pid[0], 0), 0); /* still there, still stopped */

	assert_int_equal(kill(pid[0], SIGCONT), 0);
	while (finals[0] < PROMPTS_EACH) {
		int n = v05_poll(p, d, 256);

		assert_true(n >= 0);
		for (int k = 0; k < n; k++) {
			finals[0]++;
			v05_release(p, d[k].slot, d[k].gen, d[k].key);
		}
		if (n == 0)
			assert_true(v05_wait(p, 100) >= 0);
		assert_true(v05__now_ns() - t0 < 60000000000ull);
	}
	for (uint32_t j = 0; j < PRODUCERS; j++) {
		assert_int_equal(waitpid(pid[j], &st, 0), pid[j]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	v05_counters(p, c, V05_COUNTER_SLOTS);
	assert_int_equal(c[V05_C_REWARDS_APPLIED], 4 * PRODUCERS * PROMPTS_EACH);
	for (int r = V05_C_REJ_NONFINITE; r <= V05_C_REJ_CORRUPT; r++)
		assert_int_equal(c[r], 0);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_eintr_io_uring),
		cmocka_unit_test(test_wait_eintr_thread),
		cmocka_unit_test(test_push_wait_eintr),
		cmocka_unit_test(test_stopped_producer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
