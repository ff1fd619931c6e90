/* SPDX-License-Identifier: MIT */
/*
 * v05ctl ls / reclaim: the segments on this machine, and removing a dead
 * owner's. ls is read-only; reclaim refuses a live owner.
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

/* ---- ls ------------------------------------------------------------------- */

void help_ls(FILE *f)
{
	fprintf(f,
		"usage: v05ctl ls [--json] [--all]\n"
		"\n"
		"Lists the v05 segments in $V05_SHM_DIR (default /dev/shm): name,\n"
		"owner pid, whether the owner is alive, size, active prompts (open\n"
		"plus final and not yet released), lanes held by producers, and the\n"
		"wait path. A segment whose owner died can be removed with\n"
		"v05ctl reclaim. Read-only.\n"
		"\n"
		"A segment NAME is the file v05-NAME and, next to it, one file per\n"
		"lane (v05-NAME:lane.I, or v05-NAME:bound.I once the lane went to a\n"
		"producer of another user) and one for its doorbell (v05-NAME:bell);\n"
		"ls lists segments, not these files.\n"
		"\n"
		"options:\n"
		"  --json      one JSON object per segment, one per line\n"
		"  --all       also other users' segments (where readable)\n"
		"  -h, --help  this text\n");
}

int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = v05__shm_dir();
	static struct stat_view v;
	int opt, json = 0, all = 0, n = 0;
	struct dirent **list;
	int count;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = 1;
			break;
		case 'a':
			all = 1;
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
	count = scandir(dir, &list, NULL, alphasort);
	if (count < 0) {
		fprintf(stderr, "v05ctl ls: %s: %s\n", dir, strerror(errno));
		return EXIT_FAILED;
	}
	if (!json)
		printf("%-24s %8s %-6s %10s %8s %6s %-9s\n", "NAME", "PID", "OWNER",
		       "SIZE", "ACTIVE", "LANES", "WAIT");
	for (int i = 0; i < count; i++) {
		const char *name = list[i]->d_name + 4;
		struct v05_observer *o;
		uint32_t held = 0;
		int ret;

		/* A segment's lane and doorbell files (v05-NAME:lane.0, ...)
		 * carry a ':', which no segment name has. */
		if (strncmp(list[i]->d_name, "v05-", 4) || !name[0] ||
		    strchr(name, ':')) {
			free(list[i]);
			continue;
		}
		ret = v05_observer_open(name, all ? V05_ATTACH_ANY_UID : 0, &o);
		if (ret == -EACCES && !all) {
			free(list[i]);
			continue; /* another user's, not asked for */
		}
		if (ret) {
			if (json) {
				fputs("{\"name\": ", stdout);
				json_str(stdout, name);
				fputs(", \"error\": ", stdout);
				json_str(stdout, v05_errmsg());
				fputs("}\n", stdout);
			} else {
				printf("%-24s (unreadable: %s)\n", name, v05_errmsg());
			}
			free(list[i]);
			n++;
			continue;
		}
		ret = stat_take(o, name, &v);
		v05_observer_close(o);
		if (ret) {
			free(list[i]);
			continue;
		}
		for (uint32_t l = 0; l < v.nlanes; l++)
			held += v.lanes[l].owner_pid != 0;
		if (json) {
			fputs("{\"name\": ", stdout);
			json_str(stdout, name);
			printf(", \"owner_pid\": %u, \"owner\": \"%s\", \"size_bytes\": %"
			       PRIu64 ", \"active_prompts\": %" PRIu64
			       ", \"lanes_held\": %u, \"lanes\": %u, \"wait_path\": \"%s\"}\n",
			       v.info.owner_pid,
			       !v.info.owner_pid ? "none" :
			       v.info.owner_alive ? "alive" : "dead",
			       v.info.size_bytes,
			       v.c[V05_C_PROMPTS_OPEN] + v.c[V05_C_PROMPTS_FINAL], held,
			       v.nlanes, v05_wait_path_name(v.info.wait_path));
		} else {
			printf("%-24s %8u %-6s %9.1fM %8" PRIu64 " %3u/%-3u %-9s\n", name,
			       v.info.owner_pid,
			       !v.info.owner_pid ? "none" :
			       v.info.owner_alive ? "alive" : "dead",
			       (double)v.info.size_bytes / 1048576.0,
			       v.c[V05_C_PROMPTS_OPEN] + v.c[V05_C_PROMPTS_FINAL], held,
			       v.nlanes, v05_wait_path_name(v.info.wait_path));
		}
		n++;
		free(list[i]);
	}
	free(list);
	if (!json && n == 0)
		printf("(no v05 segments in %s)\n", dir);
	return EXIT_OK;
}

/* ---- reclaim -------------------------------------------------------------- */

void help_reclaim(FILE *f)
{
	fprintf(f,
		"usage: v05ctl reclaim [--any-uid] NAME\n"
		"\n"
		"Removes segment NAME if its owner is gone (died, or closed without\n"
		"removing it): its file v05-NAME, its lanes' and its doorbell's\n"
		"(v05-NAME:lane.I, v05-NAME:bound.I, v05-NAME:bell). Refuses, with\n"
		"exit status 1, while the owner process is alive. The only v05ctl\n"
		"command that changes anything.\n"
		"\n"
		"options:\n"
		"  --any-uid   a segment created by another user (needs the right\n"
		"              to remove it)\n"
		"  -h, --help  this text\n");
}

int cmd_reclaim(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "any-uid", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned flags = 0;
	int opt;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'a':
			flags |= V05_ATTACH_ANY_UID;
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
	if (optind != argc - 1)
		return v05ctl_usage_error("reclaim", "needs exactly one segment NAME");
	if (v05ctl_check_name("reclaim", argv[optind]))
		return EXIT_USAGE;
	if (v05_segment_reclaim(argv[optind], flags)) {
		fprintf(stderr, "v05ctl reclaim: %s\n", v05_errmsg());
		return EXIT_FAILED;
	}
	printf("removed %s\n", argv[optind]);
	return EXIT_OK;
}
