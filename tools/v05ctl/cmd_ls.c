/* SPDX-License-Identifier: MIT */
/*
 * v05ctl ls / reclaim: the segments on this machine, and removing those
 * whose owner is gone. ls is read-only; reclaim refuses a live owner.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "stat_view.h"
#include "v05-internal/shm.h"
#include "v05-internal/vocab.h"
#include "v05.h"
#include "v05ctl.h"

/* ---- the segments in the shm directory ------------------------------------ */

/* A segment whose owner is gone: it died, or closed without removing it. */
static int stale(const struct stat_view *v)
{
	return !v->info.owner_pid || !v->info.owner_alive;
}

/*
 * Each segment in $V05_SHM_DIR, in name order, to fn(name, v or NULL, ctx):
 * v is its snapshot, NULL where it cannot be read (v05_errmsg() says why).
 * Another user's segments only with all. Returns how many fn was given, or
 * -1 when the directory cannot be read.
 */
static int each_segment(int all,
			void (*fn)(const char *name, const struct stat_view *v,
				   void *ctx),
			void *ctx)
{
	const char *dir = v05__shm_dir();
	static struct stat_view v;
	struct dirent **list;
	int count, n = 0;

	count = scandir(dir, &list, NULL, alphasort);
	if (count < 0) {
		fprintf(stderr, "v05ctl: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < count; i++) {
		const char *name = list[i]->d_name + 4;
		struct v05_observer *o;
		int ret;

		/* A segment's lane and doorbell files (v05-NAME:lane.0, ...)
		 * carry a ':', which no segment name has. */
		if (strncmp(list[i]->d_name, "v05-", 4) || !name[0] ||
		    strchr(name, ':'))
			goto next;
		ret = v05_observer_open(name, all ? V05_ATTACH_ANY_UID : 0, &o);
		if (ret == -EACCES && !all)
			goto next; /* another user's, not asked for */
		if (ret) {
			fn(name, NULL, ctx);
			n++;
			goto next;
		}
		ret = stat_take(o, name, &v);
		v05_observer_close(o);
		if (!ret) {
			fn(name, &v, ctx);
			n++;
		}
next:
		free(list[i]);
	}
	free(list);
	return n;
}

/* ---- ls ------------------------------------------------------------------- */

void help_ls(FILE *f)
{
	fprintf(f,
		"usage: v05ctl ls [--json] [--all] [--stale]\n"
		"\n"
		"Lists the v05 segments in $V05_SHM_DIR (default /dev/shm): name,\n"
		"owner pid, whether the owner is alive, size, active prompts (open\n"
		"plus final and not yet released), lanes held by producers, and the\n"
		"wait path. A segment whose owner is gone (OWNER dead: it was\n"
		"killed; none: it closed without removing the segment) is stale:\n"
		"v05ctl reclaim NAME removes one, v05ctl reclaim --stale all of\n"
		"them. Read-only.\n"
		"\n"
		"A segment NAME is the file v05-NAME and, next to it, one file per\n"
		"lane (v05-NAME:lane.I, or v05-NAME:bound.I once the lane went to a\n"
		"producer of another user) and one for its doorbell (v05-NAME:bell);\n"
		"ls lists segments, not these files.\n"
		"\n"
		"options:\n"
		"  --json      one JSON object per segment, one per line\n"
		"  --all       also other users' segments (where readable)\n"
		"  --stale     only segments whose owner is gone\n"
		"  -h, --help  this text\n");
}

struct ls_opts {
	int json, stale, shown;
};

static void ls_one(const char *name, const struct stat_view *v, void *ctx)
{
	struct ls_opts *o = ctx;
	uint32_t held = 0;

	if (!v) {
		if (o->stale)
			return;
		if (o->json) {
			fputs("{\"name\": ", stdout);
			json_str(stdout, name);
			fputs(", \"error\": ", stdout);
			json_str(stdout, v05_errmsg());
			fputs("}\n", stdout);
		} else {
			printf("%-24s (unreadable: %s)\n", name, v05_errmsg());
		}
		o->shown++;
		return;
	}
	if (o->stale && !stale(v))
		return;
	for (uint32_t l = 0; l < v->nlanes; l++)
		held += v->lanes[l].owner_pid != 0;
	if (o->json) {
		fputs("{\"name\": ", stdout);
		json_str(stdout, name);
		printf(", \"owner_pid\": %u, \"owner\": \"%s\", \"size_bytes\": %"
		       PRIu64 ", \"active_prompts\": %" PRIu64
		       ", \"lanes_held\": %u, \"lanes\": %u, \"wait_path\": \"%s\"}\n",
		       v->info.owner_pid,
		       !v->info.owner_pid ? "none" :
		       v->info.owner_alive ? "alive" : "dead",
		       v->info.size_bytes,
		       v->c[V05_C_PROMPTS_OPEN] + v->c[V05_C_PROMPTS_FINAL], held,
		       v->nlanes, v05_wait_path_name(v->info.wait_path));
	} else {
		printf("%-24s %8u %-6s %9.1fM %8" PRIu64 " %3u/%-3u %-9s\n", name,
		       v->info.owner_pid,
		       !v->info.owner_pid ? "none" :
		       v->info.owner_alive ? "alive" : "dead",
		       (double)v->info.size_bytes / 1048576.0,
		       v->c[V05_C_PROMPTS_OPEN] + v->c[V05_C_PROMPTS_FINAL], held,
		       v->nlanes, v05_wait_path_name(v->info.wait_path));
	}
	o->shown++;
}

int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ "stale", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ls_opts o = { 0, 0, 0 };
	int opt, all = 0;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			o.json = 1;
			break;
		case 'a':
			all = 1;
			break;
		case 's':
			o.stale = 1;
			break;
		case 'h':
			help_ls(stdout);
			return EXIT_OK;
		default:
			return v05ctl_usage_error("ls",
				"unknown option '%s' (see v05ctl ls --help)",
				argv[optind - 1]);
		}
	}
	if (optind != argc)
		return v05ctl_usage_error("ls", "unexpected argument '%s'", argv[optind]);
	if (!o.json)
		printf("%-24s %8s %-6s %10s %8s %6s %-9s\n", "NAME", "PID", "OWNER",
		       "SIZE", "ACTIVE", "LANES", "WAIT");
	if (each_segment(all, ls_one, &o) < 0)
		return EXIT_FAILED;
	if (!o.json && o.shown == 0)
		printf("(no %sv05 segments in %s)\n", o.stale ? "stale " : "",
		       v05__shm_dir());
	return EXIT_OK;
}

/* ---- reclaim -------------------------------------------------------------- */

void help_reclaim(FILE *f)
{
	fprintf(f,
		"usage: v05ctl reclaim [--any-uid] NAME\n"
		"       v05ctl reclaim [--any-uid] --stale\n"
		"\n"
		"Removes segment NAME if its owner is gone (died, or closed without\n"
		"removing it): its file v05-NAME, its lanes' and its doorbell's\n"
		"(v05-NAME:lane.I, v05-NAME:bound.I, v05-NAME:bell). Refuses, with\n"
		"exit status 1, while the owner process is alive. With --stale,\n"
		"every segment whose owner is gone (v05ctl ls --stale lists them),\n"
		"one line each; live ones are left alone. The only v05ctl command\n"
		"that changes anything.\n"
		"\n"
		"options:\n"
		"  --any-uid   segments created by other users (needs the right\n"
		"              to remove them)\n"
		"  --stale     every segment whose owner is gone, not one NAME\n"
		"  -h, --help  this text\n");
}

struct reclaim_opts {
	unsigned flags;
	int removed, failed;
};

static void reclaim_one(const char *name, const struct stat_view *v, void *ctx)
{
	struct reclaim_opts *o = ctx;

	if (!v || !stale(v))
		return;
	/* Checked again inside: an owner may have appeared since the scan. */
	if (v05_segment_reclaim(name, o->flags)) {
		fprintf(stderr, "v05ctl reclaim: %s\n", v05_errmsg());
		o->failed++;
		return;
	}
	if (v->info.owner_pid)
		printf("removed %s (owner pid %u is gone)\n", name,
		       v->info.owner_pid);
	else
		printf("removed %s (closed without removing it)\n", name);
	o->removed++;
}

int cmd_reclaim(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "any-uid", no_argument, NULL, 'a' },
		{ "stale", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct reclaim_opts o = { 0, 0, 0 };
	int opt, all_stale = 0;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'a':
			o.flags |= V05_ATTACH_ANY_UID;
			break;
		case 's':
			all_stale = 1;
			break;
		case 'h':
			help_reclaim(stdout);
			return EXIT_OK;
		default:
			return v05ctl_usage_error("reclaim",
				"unknown option '%s' (see v05ctl reclaim --help)",
				argv[optind - 1]);
		}
	}
	if (all_stale) {
		if (optind != argc)
			return v05ctl_usage_error("reclaim",
				"--stale takes no NAME");
		if (each_segment(o.flags != 0, reclaim_one, &o) < 0)
			return EXIT_FAILED;
		if (!o.removed && !o.failed)
			printf("(no stale v05 segments in %s)\n", v05__shm_dir());
		return o.failed ? EXIT_FAILED : EXIT_OK;
	}
	if (optind != argc - 1)
		return v05ctl_usage_error("reclaim",
			"needs exactly one segment NAME, or --stale");
	if (v05ctl_check_name("reclaim", argv[optind]))
		return EXIT_USAGE;
	if (v05_segment_reclaim(argv[optind], o.flags)) {
		fprintf(stderr, "v05ctl reclaim: %s\n", v05_errmsg());
		return EXIT_FAILED;
	}
	printf("removed %s\n", argv[optind]);
	return EXIT_OK;
}
