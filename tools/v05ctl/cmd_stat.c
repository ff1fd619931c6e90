/* SPDX-License-Identifier: MIT */
/*
 * v05ctl stat / top: one live segment, once or refreshed. Read-only (a
 * v05_observer mapping); nothing is written.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "json.h"
#include "num.h"
#include "stat_view.h"
#include "v05-internal/shm.h"
#include "v05.h"
#include "v05ctl.h"

/* ---- stat ----------------------------------------------------------------- */

void help_stat(FILE *f)
{
	fprintf(f,
		"usage: v05ctl stat [--json] [--any-uid] NAME\n"
		"\n"
		"Prints the state of segment NAME: owner and whether it is alive,\n"
		"configuration, journal state, prompts by state, samples issued and\n"
		"saved against k_max, the histogram of final group sizes k,\n"
		"decisions by kind, rounds and halts, rewards applied and rejected by\n"
		"reason, reward-to-decision latency, waits, and per lane its\n"
		"producer, fill, high-water mark and records consumed. Read-only:\n"
		"safe against a live segment.\n"
		"\n"
		"options:\n"
		"  --json      one JSON object instead (every named counter under\n"
		"              \"counters\")\n"
		"  --any-uid   look at a segment created by another user\n"
		"  -h, --help  this text\n"
		"\n"
		"Exit status: 0, 1 if the segment cannot be read, 2 bad arguments.\n");
}

static int open_observer(const char *cmd, const char *name, unsigned flags,
			 struct v05_observer **o)
{
	int ret = v05_observer_open(name, flags, o);

	if (ret) {
		fprintf(stderr, "v05ctl %s: %s: %s\n", cmd, name, v05_errmsg());
		return EXIT_FAILED;
	}
	return EXIT_OK;
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "any-uid", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct stat_view v;
	struct v05_observer *o;
	unsigned flags = 0;
	int opt, json = 0, ret;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = 1;
			break;
		case 'a':
			flags |= V05_ATTACH_ANY_UID;
			break;
		case 'h':
			help_stat(stdout);
			return EXIT_OK;
		default:
			return v05ctl_usage_error("stat",
				"unknown option '%s' (see v05ctl stat --help)",
				argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return v05ctl_usage_error("stat", "needs exactly one segment NAME");
	if (v05ctl_check_name("stat", argv[optind]))
		return EXIT_USAGE;
	if (open_observer("stat", argv[optind], flags, &o))
		return EXIT_FAILED;
	ret = stat_take(o, argv[optind], &v);
	if (ret) {
		fprintf(stderr, "v05ctl stat: %s: %s\n", argv[optind], v05_errmsg());
		v05_observer_close(o);
		return EXIT_FAILED;
	}
	if (json)
		stat_print_json(stdout, &v);
	else
		stat_print(stdout, &v, NULL);
	v05_observer_close(o);
	return EXIT_OK;
}

/* ---- top ------------------------------------------------------------------ */

void help_top(FILE *f)
{
	fprintf(f,
		"usage: v05ctl top [-d SECONDS] [-n COUNT] [--any-uid] NAME\n"
		"\n"
		"The view of v05ctl stat, refreshed in place, with rates per second\n"
		"(rewards applied, samples issued, groups final, rejections). Plain\n"
		"ANSI escapes, no curses: works in any terminal and over ssh. Press\n"
		"q to quit (or Ctrl-C). Read-only.\n"
		"\n"
		"options:\n"
		"  -d, --delay SECONDS   between refreshes (default 1, at least 0.05)\n"
		"  -n, --count COUNT     stop after COUNT refreshes (default: until q)\n"
		"  --any-uid             look at a segment created by another user\n"
		"  -h, --help            this text\n"
		"\n"
		"Exit status: 0 (q, COUNT reached, or the segment was removed), 1 if\n"
		"the segment cannot be read, 2 bad arguments.\n");
}

static struct termios saved_tio;
static int tio_saved;

static void restore_tty(void)
{
	if (tio_saved)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
	tio_saved = 0;
	/* Show the cursor again. */
	if (isatty(STDOUT_FILENO))
		fputs("\033[?25h", stdout);
	fflush(stdout);
}

static void on_signal(int sig)
{
	restore_tty();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Keys without Enter, no echo; restored at exit and on fatal signals. */
static void raw_tty(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tio))
		return;
	t = saved_tio;
	t.c_lflag &= (tcflag_t)~(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSANOW, &t))
		return;
	tio_saved = 1;
	atexit(restore_tty);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
}

/* Wait up to ms for a key; 1 if q was pressed (or stdin closed on a tty). */
static int quit_pressed(int ms)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	char buf[64];
	ssize_t n;

	if (poll(&p, 1, ms) <= 0 || !(p.revents & (POLLIN | POLLHUP)))
		return 0;
	n = read(STDIN_FILENO, buf, sizeof(buf));
	if (n == 0) {
		/* Not a tty and at EOF (e.g. </dev/null): just keep the delay. */
		if (!tio_saved)
			poll(NULL, 0, ms);
		return tio_saved;
	}
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 'q' || buf[i] == 'Q')
			return 1;
	return 0;
}

int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "delay", required_argument, NULL, 'd' },
		{ "count", required_argument, NULL, 'n' },
		{ "any-uid", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct stat_view views[2];
	struct v05_observer *o;
	unsigned flags = 0;
	uint64_t count = 0;
	double delay = 1.0;
	int opt, cur = 0, have_prev = 0;
	char path[4096];
	const char *name;
	struct stat st;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, ":hd:n:", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			if (v05ctl_parse_double(optarg, &delay) || delay < 0.05 ||
			    delay > 3600)
				return v05ctl_usage_error("top",
					"--delay: '%s' is not a number of seconds in [0.05, 3600]",
					optarg);
			break;
		case 'n':
			if (v05ctl_parse_u64(optarg, UINT32_MAX, &count) || count == 0)
				return v05ctl_usage_error("top",
					"--count: '%s' is not a positive integer", optarg);
			break;
		case 'a':
			flags |= V05_ATTACH_ANY_UID;
			break;
		case 'h':
			help_top(stdout);
			return EXIT_OK;
		case ':':
			return v05ctl_usage_error("top", "%s needs a value",
						  argv[optind - 1]);
		default:
			return v05ctl_usage_error("top",
				"unknown option '%s' (see v05ctl top --help)",
				argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return v05ctl_usage_error("top", "needs exactly one segment NAME");
	name = argv[optind];
	if (v05ctl_check_name("top", name))
		return EXIT_USAGE;
	if (open_observer("top", name, flags, &o))
		return EXIT_FAILED;
	if (v05__segment_path(name, path, sizeof(path)))
		path[0] = '\0';
	raw_tty();
	if (isatty(STDOUT_FILENO))
		fputs("\033[?25l", stdout); /* hide the cursor */
	for (uint64_t i = 0; !count || i < count; i++) {
		struct stat_view *v = &views[cur];

		if (stat_take(o, name, v)) {
			fprintf(stderr, "v05ctl top: %s: %s\n", name, v05_errmsg());
			v05_observer_close(o);
			return EXIT_FAILED;
		}
		/* Home, clear: one screen per refresh. */
		fputs("\033[H\033[2J", stdout);
		printf("v05ctl top  %s  every %gs  (q quits)\n\n", name, delay);
		stat_print(stdout, v, have_prev ? &views[cur ^ 1] : NULL);
		fflush(stdout);
		have_prev = 1;
		cur ^= 1;
		if (path[0] && stat(path, &st) && errno == ENOENT) {
			printf("\nsegment %s was removed\n", name);
			break;
		}
		if (count && i + 1 == count)
			break;
		if (quit_pressed((int)(delay * 1000)))
			break;
	}
	restore_tty();
	v05_observer_close(o);
	return EXIT_OK;
}
