/* SPDX-License-Identifier: MIT */
/* v05ctl: inspect and exercise v05 from the command line. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "v05.h"
#include "v05ctl.h"

static const struct v05ctl_command commands[] = {
	{ "estimate", "fuse a prior with rewards and answer more/stop (JSON)",
	  cmd_estimate, help_estimate },
	{ "journal", "print a journal as JSON lines and check its tail",
	  cmd_journal, help_journal },
	{ "sim", "statistical simulator: baseline MSE and rollouts (JSON)",
	  cmd_sim, help_sim },
	{ "ls", "list the v05 segments on this machine", cmd_ls, help_ls },
	{ "stat", "counters and state of one segment (table or JSON)",
	  cmd_stat, help_stat },
	{ "top", "the stat view refreshed live, with rates", cmd_top, help_top },
	{ "reclaim", "remove a segment whose owner is gone", cmd_reclaim,
	  help_reclaim },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

int v05ctl_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "v05ctl %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_USAGE;
}

static void help_main(FILE *f)
{
	fprintf(f,
		"usage: v05ctl COMMAND [OPTIONS]\n"
		"       v05ctl COMMAND --help\n"
		"       v05ctl --version\n"
		"\n"
		"v05 %s: value-prior fusion and OSLA stopping for rollout engines.\n"
		"\n"
		"commands:\n",
		v05_version());
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"\n"
		"Exit status: 0 success, 1 the operation failed, 2 bad arguments.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		help_main(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		if (argc > 2) {
			for (size_t i = 0; i < NCOMMANDS; i++) {
				if (!strcmp(argv[2], commands[i].name)) {
					commands[i].help(stdout);
					return EXIT_OK;
				}
			}
		}
		help_main(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("v05ctl %s\n", v05_version());
		return EXIT_OK;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "v05ctl: unknown command '%s' (see v05ctl --help)\n",
		argv[1]);
	return EXIT_USAGE;
}
