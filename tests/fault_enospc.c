/* SPDX-License-Identifier: MIT */
/*
 * Fault: the segment directory is (nearly) full. Creating a segment must
 * fail at create time with -ENOSPC, leave no file behind (neither the
 * segment's nor its lanes' or doorbell's, whichever failed), and never
 * leave a mapping whose pages are not backed (a SIGBUS later, in the
 * engine).
 *
 * The test makes a 2 MiB tmpfs in a private mount namespace (a forked
 * child: unshare(CLONE_NEWNS) as root, else a user namespace as well) and
 * points V05_SHM_DIR at it. Where no namespace can be made, it is skipped
 * (exit 77).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "v05-internal/vocab.h"
#include "v05.h"

#define SKIP 77

static int fail(const char *what)
{
	fprintf(stderr, "fault_enospc: %s (%s)\n", what, v05_errmsg());
	return 1;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* A mount namespace of our own, with a tmpfs of size_kb at dir. */
static int private_tmpfs(const char *dir, unsigned size_kb)
{
	char opts[64], map[64];
	uid_t uid = geteuid();
	gid_t gid = getegid();

	if (unshare(CLONE_NEWNS)) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
			return -1;
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
		if (write_file("/proc/self/setgroups", "deny") ||
		    write_file("/proc/self/uid_map", map))
			return -1;
		snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
		if (write_file("/proc/self/gid_map", map))
			return -1;
	}
	/* Our mounts must not propagate back to the host's namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		return -1;
	snprintf(opts, sizeof(opts), "size=%uk,mode=0700", size_kb);
	return mount("v05-enospc", dir, "tmpfs", 0, opts);
}

static unsigned entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	if (!d)
		return 9999;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void config(struct v05_config *c, uint32_t prompts)
{
	v05_config_default(c);
	c->max_prompts = prompts;
	c->max_producers = 2;
	c->lane_capacity = 1024;
}

static int child(const char *dir)
{
	struct v05_plugin *small = NULL, *big = NULL;
	struct v05_config c;
	char fill[512];
	int fd, ret;

	if (private_tmpfs(dir, 2048))
		return SKIP;
	setenv("V05_SHM_DIR", dir, 1);

	/* Too big for the filesystem: refused at create, nothing left. */
	config(&c, 8192);
	ret = v05_plugin_create("big", &c, &big);
	if (ret != -ENOSPC)
		return fail("a segment larger than the tmpfs is not -ENOSPC");
	if (!strstr(v05_errmsg(), "reserve"))
		return fail("the message does not say what failed");
	if (entries(dir) != 0)
		return fail("a failed create left a file behind");

	/* The segment file fits, its lanes' files do not (two lanes of
	 * 1 MiB each): refused when a lane's file cannot be reserved, and
	 * no file is left, not the segment's nor the lanes' made before. */
	config(&c, 64);
	c.lane_capacity = 1u << 15;
	ret = v05_plugin_create("lanes", &c, &big);
	if (ret != -ENOSPC)
		return fail("lanes larger than the tmpfs are not -ENOSPC");
	if (!strstr(v05_errmsg(), ":side/lane."))
		return fail("the message does not name the lane's file");
	if (entries(dir) != 0)
		return fail("a create failing at a lane left a file behind");

	/* Fits: created, and every page really is there (touching the last
	 * byte of the mapping through a full batch would SIGBUS otherwise). */
	config(&c, 64);
	if (v05_plugin_create("small", &c, &small))
		return fail("a segment that fits is refused");
	/* The segment's file and its side directory, with its two lanes'
	 * files and its doorbell's. */
	{
		char side[600];

		snprintf(side, sizeof(side), "%s/v05-small:side", dir);
		if (entries(dir) != 2 || entries(side) != 3)
			return fail("the small segment is not a file and a directory of three");
	}

	/* Fill the rest of the filesystem, then ask for one more: -ENOSPC
	 * again, now with the space taken by someone else. */
	snprintf(fill, sizeof(fill), "%s/filler", dir);
	fd = open(fill, O_CREAT | O_WRONLY, 0600);
	if (fd < 0)
		return fail("filler");
	for (;;) {
		static char block[65536];

		if (write(fd, block, sizeof(block)) <= 0)
			break;
	}
	close(fd);
	ret = v05_plugin_create("third", &c, &big);
	if (ret != -ENOSPC)
		return fail("create on a full tmpfs is not -ENOSPC");
	if (entries(dir) != 3)
		return fail("a failed create on a full tmpfs left a file");

	/* The segment created before still works end to end. */
	{
		struct v05_prompt_in in = { .uid = "p", .uid_len = 1, .prior = 0.8 };
		struct v05_decision d[8];
		struct v05_producer *w;
		int n = 0;

		if (v05_submit(small, &in, 1, d, NULL) != 1 ||
		    v05_producer_open("small", 0, &w))
			return fail("submit on the small segment");
		for (uint32_t s = 0; s < 64; s++)
			if (d[0].samples >> s & 1)
				v05_producer_push(w, d[0].key, d[0].gen, s, 1.0f);
		while (n == 0)
			n = v05_poll(small, d, 8);
		if (n != 1 || d[0].kind != V05_DECISION_FINAL)
			return fail("the small segment does not finish its prompt");
		v05_producer_close(w);
	}
	/* Replacing it (its owner gone) with a segment that does not fit:
	 * -ENOSPC, and the old one is as it was, its prompt still open;
	 * nothing of the attempt is left. */
	{
		struct v05_prompt_in in = { .uid = "kept", .uid_len = 4, .prior = 0.5 };
		struct v05_decision d[8];
		uint64_t c2[V05_COUNTER_SLOTS];

		if (v05_submit(small, &in, 1, d, NULL) != 1 ||
		    v05_plugin_close(small, 0))
			return fail("submit and close the small segment");
		config(&c, 8192);
		ret = v05_plugin_replace("small", &c, &big);
		if (ret != -ENOSPC)
			return fail("replacing with a segment too big is not -ENOSPC");
		if (entries(dir) != 3)
			return fail("a failed replace left a file, or took the old one");
		if (v05_plugin_attach("small", 0, &small))
			return fail("the old segment cannot be taken over after a failed replace");
		v05_counters(small, c2, V05_COUNTER_SLOTS);
		if (c2[V05_C_PROMPTS_OPEN] != 1)
			return fail("the old segment lost its open prompt");
	}
	v05_plugin_close(small, V05_CLOSE_UNLINK);
	if (entries(dir) != 1)
		return fail("unlink left some of the segment's files");
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/v05-enospc-XXXXXX";
	pid_t pid;
	int st;

	if (!mkdtemp(dir))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0)
		_exit(child(dir));
	if (waitpid(pid, &st, 0) != pid)
		return 1;
	rmdir(dir);
	if (WIFSIGNALED(st)) {
		fprintf(stderr, "fault_enospc: child killed by signal %d\n",
			WTERMSIG(st));
		return 1;
	}
	if (WEXITSTATUS(st) == SKIP)
		fprintf(stderr, "fault_enospc: no private mount namespace here; skipped\n");
	else if (WEXITSTATUS(st) == 0)
		printf("fault_enospc: -ENOSPC at create (too big, and full), no file left, no SIGBUS\n");
	return WEXITSTATUS(st);
}
