/* SPDX-License-Identifier: MIT */
/*
 * kill -9 producers at random points while they push. The steady producers
 * are unaffected; every record a killed producer published arrives (at least
 * as many as it had reported, in order, intact); nothing half-written is
 * read; its lane is reclaimed and the next producer gets it.
 *   stress_crash [KILLS]   (steady records: $V05_STRESS_RECORDS / 4)
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/seg.h"
#include "util/stream.h"
#include "v05-internal/shm.h"
#include "v05-internal/vocab.h"

#define STEADY 3u
#define VICTIM_BASE 100u

struct shared {
	uint64_t reported[STREAM_MAX_PRODUCERS]; /* published, as told */
	int32_t lane[STREAM_MAX_PRODUCERS];
	uint32_t kills_done; /* steady producers keep their lanes until set */
};

static char name[64];
static struct shared *sh;

static int produce(uint32_t id, uint64_t count)
{
	struct v05_producer *p;
	uint64_t n = 0, rng = 0x9e3779b97f4a7c15ull * (id + 7);

	if (v05_producer_open(name, 0, &p)) {
		fprintf(stderr, "producer %u: %s\n", id, v05_errmsg());
		return 1;
	}
	/* Release: pairs with main's acquire wait for the steady lanes. */
	__atomic_store_n(&sh->lane[id], v05_producer_lane(p), __ATOMIC_RELEASE);
	while (n < count) {
		if (stream_push_batch(p, id, &n, count, &rng))
			return 1;
		/* Reported after the push returned: always <= published. */
		__atomic_store_n(&sh->reported[id], n, __ATOMIC_RELEASE);
	}
	/* Hold the lane until the kills are over, so the only free lane a
	 * new victim can get is the one reclaimed from the last. */
	while (id < STEADY && !__atomic_load_n(&sh->kills_done, __ATOMIC_ACQUIRE))
		sched_yield();
	return v05_producer_close(p) ? 1 : 0;
}

int main(int argc, char **argv)
{
	unsigned kills = argc > 1 ? (unsigned)atoi(argv[1]) : 20;
	uint64_t steady = test_env_ul("V05_STRESS_RECORDS", 1000000) / 4;
	struct v05_geometry g = test_geometry(STEADY + 1, 1024, 4, 16);
	struct stream_check *check = calloc(1, sizeof(*check));
	uint64_t rng = 0x1234567ull;
	pid_t steady_pid[STEADY];
	struct v05_segment seg;
	struct v05_lanes lanes;
	int failed = 0, victim_lane = -1;

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!check || sh == MAP_FAILED)
		return 2;
	stream_check_init(check);
	test_name(name, sizeof(name), "crash");
	if (v05__segment_create(name, &g, NULL, 0, 0600, &seg) ||
	    v05__lanes_init(&lanes, &seg)) {
		fprintf(stderr, "setup: %s\n", v05_errmsg());
		return 1;
	}
	lanes.event = test_lane_count;
	lanes.event_ctx = &seg;
	for (uint32_t i = 0; i < STEADY; i++) {
		__atomic_store_n(&sh->lane[i], -1, __ATOMIC_RELAXED);
		steady_pid[i] = fork();
		if (steady_pid[i] == 0)
			_exit(produce(i, steady));
	}
	/* Every steady producer holds its lane before the first victim
	 * claims one, so the only free lane a victim can get is the one
	 * reclaimed from the last (a steady producer slow to start took a
	 * victim's lane once under load: "victim 101 got lane 3, not the
	 * reclaimed 2"). The lane word is published after the claim. */
	for (uint32_t i = 0; i < STEADY; i++)
		while (__atomic_load_n(&sh->lane[i], __ATOMIC_ACQUIRE) < 0) {
			if (waitpid(steady_pid[i], NULL, WNOHANG) == steady_pid[i]) {
				fprintf(stderr, "steady %u exited before its claim\n", i);
				return 1;
			}
			sched_yield();
		}
	for (unsigned k = 0; k < kills && !check->bad; k++) {
		uint32_t id = VICTIM_BASE + k;
		uint64_t threshold, reported;
		pid_t pid;
		int st;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		threshold = 500 + rng % 20000;
		pid = fork();
		if (pid == 0)
			_exit(produce(id, UINT64_MAX >> 24));
		/* Drain until the victim has pushed `threshold` records, then
		 * kill it wherever it is in its push loop. */
		while (__atomic_load_n(&sh->reported[id], __ATOMIC_ACQUIRE) <
		       threshold)
			v05__lanes_drain(&lanes, 4096, 64, stream_check_record,
					 check);
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		if (!WIFSIGNALED(st)) {
			fprintf(stderr, "victim %u exited by itself\n", id);
			failed = 1;
		}
		reported = __atomic_load_n(&sh->reported[id], __ATOMIC_ACQUIRE);
		if (v05__lanes_reclaim(&lanes, true, stream_check_record,
				       check) != 1) {
			fprintf(stderr, "victim %u: lane not reclaimed\n", id);
			failed = 1;
		}
		if (check->next[id] < reported) {
			fprintf(stderr, "victim %u: %llu arrived, %llu reported\n",
				id, (unsigned long long)check->next[id],
				(unsigned long long)reported);
			failed = 1;
		}
		if (victim_lane >= 0 && sh->lane[id] != victim_lane) {
			fprintf(stderr, "victim %u got lane %d, not the reclaimed %d\n",
				id, sh->lane[id], victim_lane);
			failed = 1;
		}
		victim_lane = sh->lane[id];
		if (v05__lane(&seg, (uint32_t)victim_lane)->owner != 0) {
			fprintf(stderr, "victim %u: lane %d still owned\n", id,
				victim_lane);
			failed = 1;
		}
	}
	__atomic_store_n(&sh->kills_done, 1, __ATOMIC_RELEASE);
	while (!check->bad) {
		uint64_t done = 0;

		for (uint32_t i = 0; i < STEADY; i++)
			done += check->next[i];
		if (done == steady * STEADY)
			break;
		v05__lanes_drain(&lanes, 4096, 64, stream_check_record, check);
	}
	for (uint32_t i = 0; i < STEADY; i++) {
		int st;

		waitpid(steady_pid[i], &st, 0);
		failed |= !WIFEXITED(st) || WEXITSTATUS(st);
		failed |= check->next[i] != steady;
	}
	if (check->bad) {
		fprintf(stderr, "%llu bad records; first: %s\n",
			(unsigned long long)check->bad, check->first_error);
		failed = 1;
	}
	failed |= seg.state->counters[V05_C_REJ_CORRUPT] != 0;
	printf("crash: %u kills, %u steady x %llu, reclaims %llu, corrupt %llu: %s\n",
	       kills, STEADY, (unsigned long long)steady,
	       (unsigned long long)seg.state->counters[V05_C_LANE_RECLAIMS],
	       (unsigned long long)seg.state->counters[V05_C_REJ_CORRUPT],
	       failed ? "FAIL" : "ok");
	v05__lanes_fini(&lanes);
	v05__segment_detach(&seg);
	v05_segment_unlink(name);
	free(check);
	return failed;
}
