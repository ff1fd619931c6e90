/* SPDX-License-Identifier: MIT */
#ifndef V05CTL_H
#define V05CTL_H

#include <stdio.h>

/* Exit statuses: 0 success, 1 the operation failed, 2 bad usage/input. */
enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

struct v05ctl_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
	void (*help)(FILE *f);
};

/* One-line usage error on stderr; returns EXIT_USAGE. */
int v05ctl_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* EXIT_OK if name is a valid segment name, else a usage error naming
 * what is wrong (exit 2, as documented). */
int v05ctl_check_name(const char *cmd, const char *name);

int cmd_estimate(int argc, char **argv);
void help_estimate(FILE *f);
int cmd_journal(int argc, char **argv);
void help_journal(FILE *f);
int cmd_sim(int argc, char **argv);
void help_sim(FILE *f);
int cmd_ls(int argc, char **argv);
void help_ls(FILE *f);
int cmd_stat(int argc, char **argv);
void help_stat(FILE *f);
int cmd_top(int argc, char **argv);
void help_top(FILE *f);
int cmd_reclaim(int argc, char **argv);
void help_reclaim(FILE *f);

#endif
