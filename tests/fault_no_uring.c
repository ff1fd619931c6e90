/* SPDX-License-Identifier: MIT */
/*
 * Fault: io_uring refused. A child installs a seccomp filter that fails
 * io_uring_setup with EPERM (as a container runtime's profile or
 * kernel.io_uring_disabled would), then runs a whole batch: the plugin with
 * a journal, reward-worker processes (which inherit the filter), v05_wait
 * blocking between polls. It must take the fallback wait path and say why,
 * journal through plain writes, and finish with results equal, bit for bit,
 * to a run of the same batch without the filter.
 */
#include <errno.h>
#include <poll.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/engine.h"
#include "util/seg.h"
#include "v05-internal/journal.h"
#include "v05-internal/vocab.h"
#include "v05.h"

#define N 256u
#define SKIP 77

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

static int refuse_io_uring(void)
{
#ifdef ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
#else
	return -1;
#endif
}

/*
 * The fallback really wakes: armed (the consumer has announced its sleep),
 * then a producer process pushes one record; the plugin's fd must turn
 * readable through the waiter thread's eventfd.
 */
static int wake_through_thread(struct v05_plugin *p, const char *name)
{
	struct pollfd pfd = { .fd = v05_fd(p), .events = POLLIN };
	int go[2], st, n;
	pid_t pid;
	char c = 0;

	if (pipe(go) || v05_arm(p, 10000) != 0)
		return 1;
	pid = fork();
	if (pid == 0) {
		struct v05_producer *w;

		if (read(go[0], &c, 1) != 1 || v05_producer_open(name, 0, &w) ||
		    v05_producer_push(w, 7, 0, 0, 1.f))
			_exit(1);
		v05_producer_close(w);
		_exit(0);
	}
	if (pid < 0 || write(go[1], "g", 1) != 1)
		return 1;
	n = poll(&pfd, 1, 10000);
	waitpid(pid, &st, 0);
	close(go[0]);
	close(go[1]);
	if (n != 1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "fault_no_uring: the fallback did not wake (poll %d)\n", n);
		return 1;
	}
	return v05_poll(p, NULL, 0) < 0;
}

static int run(const struct eng_prompt *pr, struct eng_result *res,
	       const char *journal, int workers)
{
	uint64_t keys[N], c[V05_COUNTER_SLOTS];
	struct v05_config cfg;
	struct eng e;
	char name[64];
	int ret;

	test_name(name, sizeof(name), "nouring");
	eng_init(&e, name, pr, N, 3, res, keys);
	v05_config_default(&cfg);
	/* Every first wave waits for the batch's last (as at a barrier):
	 * the decisions do not depend on the order in which the two
	 * workers' rewards arrive, which the wait path changes. */
	cfg.eb_cold = N;
	cfg.max_prompts = N;
	cfg.max_producers = 8;
	cfg.lane_capacity = 4096;
	cfg.journal_path = journal;
	if (v05_plugin_create(name, &cfg, &e.p)) {
		fprintf(stderr, "fault_no_uring: create: %s\n", v05_errmsg());
		return 1;
	}
	if (journal) {
		/* Must be the fallback, and say why. */
		if (strcmp(v05_wait_path(e.p), "thread")) {
			fprintf(stderr, "fault_no_uring: wait path is %s\n",
				v05_wait_path(e.p));
			return 1;
		}
		if (!strstr(v05_wait_reason(e.p), "io_uring")) {
			fprintf(stderr, "fault_no_uring: reason '%s' does not name io_uring\n",
				v05_wait_reason(e.p));
			return 1;
		}
	}
	if (journal && wake_through_thread(e.p, name))
		return 1;
	if (eng_start(&e, workers) || eng_submit(&e))
		return 1;
	ret = eng_run(&e, 60);
	if (ret) {
		fprintf(stderr, "fault_no_uring: run: %d %s\n", ret, v05_errmsg());
		return 1;
	}
	v05_counters(e.p, c, V05_COUNTER_SLOTS);
	/* The wake-up check's record: for no prompt, counted, nothing else. */
	if (c[V05_C_REJ_UNKNOWN] != (journal ? 1u : 0u)) {
		fprintf(stderr, "fault_no_uring: %llu unknown rewards\n",
			(unsigned long long)c[V05_C_REJ_UNKNOWN]);
		return 1;
	}
	ret = eng_stop(&e);
	v05_plugin_close(e.p, V05_CLOSE_UNLINK);
	return ret ? 1 : 0;
}

static int journal_clean(const char *path, uint64_t want)
{
	struct v05_jscan res;
	struct stat st;
	uint8_t *img;
	FILE *f = fopen(path, "rb");
	int ok;

	if (!f || fstat(fileno(f), &st))
		return 0;
	img = malloc((size_t)st.st_size);
	ok = img && fread(img, 1, (size_t)st.st_size, f) == (size_t)st.st_size &&
	     v05__journal_scan(img, (size_t)st.st_size, NULL, NULL, &res) == 0 &&
	     res.tail == V05_JTAIL_CLEAN && res.records == want;
	if (!ok)
		fprintf(stderr, "fault_no_uring: journal: %llu records, tail %s\n",
			(unsigned long long)res.records,
			v05__journal_tail_name(res.tail));
	free(img);
	fclose(f);
	return ok;
}

int main(void)
{
	struct eng_prompt pr[N];
	struct eng_result *ref = calloc(N, sizeof(*ref));
	/* Shared with the child, which fills it. */
	struct eng_result *got = mmap(NULL, N * sizeof(*got), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char journal[] = "/tmp/v05-nouring-XXXXXX";
	int st, fd = mkstemp(journal);
	pid_t pid;

	if (!ref || got == MAP_FAILED || fd < 0)
		return 1;
	close(fd);
	unlink(journal);
	eng_make_prompts(pr, N, 17, 0.3);
	if (run(pr, ref, NULL, 2))
		return 1;

	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		if (refuse_io_uring())
			_exit(SKIP);
		/* The filter works: io_uring_setup now fails with EPERM. */
		if (syscall(__NR_io_uring_setup, 1, NULL) != -1 || errno != EPERM)
			_exit(2);
		_exit(run(pr, got, journal, 2));
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
		fprintf(stderr, "fault_no_uring: child did not exit\n");
		return 1;
	}
	if (WEXITSTATUS(st) == SKIP) {
		fprintf(stderr, "fault_no_uring: no seccomp here; skipped\n");
		return SKIP;
	}
	if (WEXITSTATUS(st))
		return 1;
	for (uint32_t i = 0; i < N; i++) {
		if (got[i].kind != ref[i].kind || got[i].k != ref[i].k ||
		    got[i].baseline != ref[i].baseline ||
		    memcmp(got[i].adv, ref[i].adv, 4 * ref[i].k)) {
			fprintf(stderr, "fault_no_uring: prompt %u differs from the io_uring run\n", i);
			return 1;
		}
	}
	if (!journal_clean(journal, N))
		return 1;
	unlink(journal);
	free(ref);
	printf("fault_no_uring: io_uring_setup -> EPERM: thread wait path, plain journal writes, %u prompts equal to the io_uring run\n", N);
	return 0;
}
