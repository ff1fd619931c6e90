/* SPDX-License-Identifier: MIT */
#include "doorbell.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int v05__futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;

	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	if (syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0) == 0)
		return 0;
	return -errno; /* EAGAIN: the word moved; ETIMEDOUT; EINTR */
}

int v05__futex_wake(uint32_t *word)
{
	long n = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);

	return n < 0 ? -errno : (int)n;
}

void v05__doorbell_ring(struct v05_shm_doorbell *bell)
{
	uint32_t one = 1;

	/* Only the producer that clears the flag rings; the others know the
	 * consumer is being woken and will drain their lanes too. */
	if (!v05_cas_acq_rel(&bell->sleeping, &one, 0u))
		return;
	/* Release: pairs with the acquire load in v05__doorbell_prepare. */
	v05_fetch_add_release(&bell->doorbell, 1u);
	v05__futex_wake(&bell->doorbell);
}

static int membarrier(int cmd)
{
	return (int)syscall(SYS_membarrier, cmd, 0u, 0);
}

int v05__membarrier_usable(void)
{
	int cmds = membarrier(MEMBARRIER_CMD_QUERY);

	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED))
		return 0;
	/* A trial: seccomp may allow the query and refuse the command. */
	return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

int v05__membarrier_register(void)
{
	return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) ? -errno : 0;
}

int v05__membarrier_global(void)
{
	return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) ? -errno : 0;
}
