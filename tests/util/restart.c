/* SPDX-License-Identifier: MIT */
/* Test helper for restarts (restart.h). */
#include "util/config.h"
#include "restart.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "v05-internal/shm.h"

void rs_config(struct v05_config *c)
{
	tc_config(c);
	c->params.mode = V05_MODE_V05_FIXED;
	c->params.k_init = RS_K;
	c->params.k_step = RS_K;
	c->params.k_max = RS_K;
	c->pad_multiple = 1;
	c->max_prompts = RS_PROMPTS;
	c->max_producers = 4;
	c->lane_capacity = 64;
}

int rs_owners(uint32_t *out, const char *test)
{
	out[0] = (uint32_t)-1;
	if (actor_can_switch()) {
		out[1] = ACTOR_OWNER_UID;
		return 2;
	}
	fprintf(stderr, "%s: the unprivileged-owner runs need root %s; running as this uid only (CI runs them as root)\n",
		test, actor_whoami());
	return 1;
}

const char *rs_who(uint32_t uid)
{
	static char buf[32];

	if (uid == (uint32_t)-1)
		return geteuid() ? "this uid" : "root";
	snprintf(buf, sizeof(buf), "uid %u", (unsigned)uid);
	return buf;
}

static uint64_t counter(const uint64_t *c, const char *name, int *found)
{
	for (uint32_t i = 0; i < V05_COUNTER_SLOTS; i++) {
		const char *n = v05_counter_name(i);

		if (n && !strcmp(n, name)) {
			*found += 1;
			return c[i];
		}
	}
	return 0;
}

void rs_fill(struct rs_rep *r, struct v05_plugin *p)
{
	uint64_t c[V05_COUNTER_SLOTS];
	int found = 0;

	v05_counters(p, c, V05_COUNTER_SLOTS);
	r->applied = counter(c, "rewards_applied", &found);
	r->open = counter(c, "prompts_open", &found);
	r->final = counter(c, "prompts_final", &found);
	r->files_replaced = counter(c, "side_files_replaced", &found);
	found = 0;
	r->undone = counter(c, "replaces_undone", &found);
	r->cleaned = counter(c, "replaces_cleaned", &found);
	r->have_counters = found == 2;
}

void rs_reply(int out, struct rs_rep *r)
{
	snprintf(r->msg, sizeof(r->msg), "%s", r->ret ? v05_errmsg() : "");
	actor_send(out, r, sizeof(*r));
}

struct rs_rep rs_read(int from)
{
	struct rs_rep r;
	char *b = (char *)&r;
	size_t got = 0;

	while (got < sizeof(r)) {
		ssize_t n = read(from, b + got, sizeof(r) - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != sizeof(r)) {
		memset(&r, 0, sizeof(r));
		r.ret = -EPIPE;
		snprintf(r.msg, sizeof(r.msg), "died before it answered");
	}
	return r;
}

static int dying_owner(void *arg, int in, int out)
{
	const char *name = arg;
	struct v05_prompt_in pin[RS_PROMPTS];
	struct v05_decision d[RS_PROMPTS];
	struct v05_producer *w;
	struct v05_plugin *p;
	struct v05_config c;
	char uids[RS_PROMPTS][8];
	struct rs_rep r;

	(void)in;
	memset(&r, 0, sizeof(r));
	rs_config(&c);
	r.ret = v05_plugin_create(name, &c, &p);
	for (uint32_t i = 0; !r.ret && i < RS_PROMPTS; i++) {
		snprintf(uids[i], sizeof(uids[i]), "q%u", i);
		pin[i] = (struct v05_prompt_in){ .uid = uids[i],
						 .uid_len = (uint32_t)strlen(uids[i]),
						 .prior = 0.25 };
	}
	if (!r.ret && v05_submit(p, pin, RS_PROMPTS, d, NULL) != (int)RS_PROMPTS)
		r.ret = -EIO;
	if (!r.ret)
		r.ret = v05_producer_open(name, 0, &w);
	for (uint32_t i = 0; !r.ret && i < RS_REWARDED; i++)
		for (uint32_t k = 0; k < RS_K && !r.ret; k++)
			r.ret = v05_producer_push(w, d[i].key, d[i].gen, k,
						  (i + k) & 1 ? 1.0f : -1.0f);
	if (!r.ret)
		r.ret = v05_producer_flush(w) < 0 ? -EIO : 0;
	rs_reply(out, &r);
	_exit(0); /* dies holding everything */
}

void rs_dying_owner(uint32_t uid, const char *name)
{
	struct actor a;
	struct rs_rep r;
	int status;

	actor_start(&a, uid, uid, 0, dying_owner, (void *)name);
	r = rs_read(a.from);
	status = actor_wait(&a);
	if (r.ret || status) {
		fprintf(stderr, "the owner (%s) of %s failed: %d %s (status %d)\n",
			rs_who(uid), name, r.ret, r.msg, status);
		abort();
	}
}

int rs_count_names(const char *prefix)
{
	DIR *d = opendir(v05__shm_dir());
	struct dirent *e;
	int n = 0;

	if (!d)
		abort();
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

int rs_temporaries(const char *name, pid_t pid)
{
	char pre[128], old[64];

	snprintf(pre, sizeof(pre), "v05-%s:replace.", name);
	snprintf(old, sizeof(old), "v05-v05-replace-%d-", (int)pid);
	return rs_count_names(pre) + (pid ? rs_count_names(old) : 0);
}

int rs_exists(const char *name, const char *suffix)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/v05-%s%s", v05__shm_dir(), name, suffix);
	return lstat(path, &st) == 0;
}
