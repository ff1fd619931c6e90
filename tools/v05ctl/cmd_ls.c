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
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
 * What is left of segment NAME when its file is gone: its side directory
 * v05-NAME:side (a run's `rm` of the file alone, or a create killed
 * half-way). Nothing can attach to it; reclaim removes it. Only this
 * uid's, unless all.
 */
static bool leftover_of(const char *dir, const char *entry, int all,
			char *name, size_t len)
{
	size_t n = strlen(entry), sfx = strlen(V05_SIDE_SUFFIX);
	char path[PATH_MAX];
	struct stat st;

	if (strncmp(entry, "v05-", 4) || n <= 4 + sfx ||
	    strcmp(entry + n - sfx, V05_SIDE_SUFFIX) || n - 4 - sfx >= len)
		return false;
	snprintf(name, len, "%.*s", (int)(n - 4 - sfx), entry + 4);
	if (v05_name_check(name))
		return false;
	snprintf(path, sizeof(path), "%s/v05-%s", dir, name);
	if (!lstat(path, &st) || errno != ENOENT)
		return false; /* the segment is there: listed as such */
	snprintf(path, sizeof(path), "%s/%s", dir, entry);
	return !lstat(path, &st) && S_ISDIR(st.st_mode) &&
	       (all || st.st_uid == geteuid());
}

/*
 * Each segment in $V05_SHM_DIR, in name order, to fn(name, v or NULL, ctx):
 * v is its snapshot, NULL where it cannot be read (v05_errmsg() says why)
 * or where only its side files are left (*leftover then). Another user's
 * segments only with all. Returns how many fn was given, or -1 when the
 * directory cannot be read.
 */
static int each_segment(int all,
			void (*fn)(const char *name, const struct stat_view *v,
				   bool leftover, void *ctx),
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
		char left[V05_NAME_MAX + 1];
		struct v05_observer *o;
		int ret;

		if (leftover_of(dir, list[i]->d_name, all, left, sizeof(left))) {
			v05__fail(-ENOENT, "its file is gone, its side files are left");
			fn(left, NULL, true, ctx);
			n++;
			goto next;
		}
		/* A segment's side directory (v05-NAME:side) and older
		 * layouts' side files carry a ':', which no segment name
		 * has. */
		if (strncmp(list[i]->d_name, "v05-", 4) || !name[0] ||
		    strchr(name, ':'))
			goto next;
		ret = v05_observer_open(name, all ? V05_ATTACH_ANY_UID : 0, &o);
		if (ret == -EACCES && !all)
			goto next; /* another user's, not asked for */
		if (ret) {
			fn(name, NULL, false, ctx);
			n++;
			goto next;
		}
		ret = stat_take(o, name, &v);
		v05_observer_close(o);
		if (!ret) {
			fn(name, &v, false, ctx);
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
		"A segment NAME is the file v05-NAME and, next to it, its side\n"
		"directory v05-NAME:side (one file per lane, one for its doorbell, its\n"
		"broker's socket). Where the file is gone and the side directory is\n"
		"left, ls shows NAME with OWNER gone (stale, a leftover).\n"
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

static void ls_one(const char *name, const struct stat_view *v, bool leftover,
		   void *ctx)
{
	struct ls_opts *o = ctx;
	uint32_t held = 0;

	if (leftover) {
		if (o->json) {
			fputs("{\"name\": ", stdout);
			json_str(stdout, name);
			fputs(", \"owner\": \"gone\", \"leftover\": true}\n", stdout);
		} else {
			printf("%-24s %8s %-6s (its file is gone, its side files are left: v05ctl reclaim %s)\n",
			       name, "-", "gone", name);
		}
		o->shown++;
		return;
	}
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
		"removing it): its file v05-NAME and its side directory\n"
		"v05-NAME:side (its lanes', its doorbell's and its broker's files);\n"
		"or, where the file is gone, what is left of it. Refuses, with exit\n"
		"status 1, while the owner process is alive. With --stale, every\n"
		"segment whose owner is gone and every leftover (v05ctl ls --stale\n"
		"lists them), one line each; live ones are left alone. The only\n"
		"v05ctl command that changes anything.\n"
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

static void reclaim_one(const char *name, const struct stat_view *v,
			bool leftover, void *ctx)
{
	struct reclaim_opts *o = ctx;

	if (!leftover && (!v || !stale(v)))
		return;
	/* Checked again inside: an owner may have appeared since the scan. */
	if (v05_segment_reclaim(name, o->flags)) {
		fprintf(stderr, "v05ctl reclaim: %s\n", v05_errmsg());
		o->failed++;
		return;
	}
	if (leftover)
		printf("removed %s (what was left of it: its side files)\n", name);
	else if (v->info.owner_pid)
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
