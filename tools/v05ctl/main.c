/* SPDX-License-Identifier: MIT */
/* v05ctl: inspect and exercise v05 from the command line. */
#include <ctype.h>
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

int v05ctl_check_name(const char *cmd, const char *name)
{
	if (v05_name_check(name))
		return v05ctl_usage_error(cmd, "bad segment name: %s",
					  v05_errmsg());
	return EXIT_OK;
}

/* The option an argument names ("--delay=1" and "--delay": "delay";
 * "-n5": "n"), or NULL for an operand, a number ("-0.5", "-1,1") or
 * after "--". */
static size_t option_key(const char *a, const char **key)
{
	if (a[0] != '-' || a[1] == '\0' || isdigit((unsigned char)a[1]) ||
	    a[1] == '.')
		return 0;
	if (a[1] == '-') {
		*key = a + 2;
		return strcspn(a + 2, "=");
	}
	*key = a + 1;
	return 1;
}

/*
 * Every option at most once: with getopt the last of a repeated option
 * wins silently, and "--k 4 ... --k 8" is far more likely a mistake than
 * a wish. Checked for every command before it parses its arguments.
 */
static int repeated_option(int argc, char **argv)
{
	for (int i = 2; i < argc && strcmp(argv[i], "--"); i++) {
		const char *ki, *kj;
		size_t ni = option_key(argv[i], &ki);

		if (!ni)
			continue;
		for (int j = 2; j < i; j++) {
			size_t nj = option_key(argv[j], &kj);

			if (nj == ni && !strncmp(ki, kj, ni)) {
				v05ctl_usage_error(argv[1],
						   "option '%.*s%.*s' given twice",
						   argv[i][1] == '-' ? 2 : 1,
						   "--", (int)ni, ki);
				return 1;
			}
		}
	}
	return 0;
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
		"Exit status: 0 success, 1 the operation failed, 2 bad arguments\n"
		"(including an option given twice or a malformed segment name).\n");
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
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (!strcmp(argv[1], commands[i].name)) {
			if (repeated_option(argc, argv))
				return EXIT_USAGE;
			return commands[i].run(argc - 1, argv + 1);
		}
	}
	fprintf(stderr, "v05ctl: unknown command '%s' (see v05ctl --help)\n",
		argv[1]);
	return EXIT_USAGE;
}
