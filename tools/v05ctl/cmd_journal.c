/* SPDX-License-Identifier: MIT */
/* v05ctl journal FILE: the journal as JSON lines, and the state of its tail. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "v05-internal/journal.h"
#include "v05.h"
#include "v05ctl.h"

void help_journal(FILE *f)
{
	fprintf(f,
		"usage: v05ctl journal [--summary] FILE\n"
		"\n"
		"Prints every group in a v05 journal as one JSON object per line\n"
		"(seq, key, uid, batch, k, action, mode, prior, baseline, sigma,\n"
		"mean, submit_ns, final_ns, rewards, advantages), then one summary\n"
		"line on stderr: records, last sequence number, repeated sequence\n"
		"numbers (a takeover may write a group twice), and the tail.\n"
		"\n"
		"options:\n"
		"  --summary   only the summary line\n"
		"  -h, --help  this text\n"
		"\n"
		"exit status: 0 clean; 3 torn tail (a write cut short by a crash;\n"
		"the records before it are intact); 1 corrupt (a bad record with\n"
		"more data after it), not a journal, or unreadable; 2 bad usage.\n");
}

static void floats(const float *v, uint32_t n)
{
	putchar('[');
	for (uint32_t i = 0; i < n; i++)
		printf(i ? ", %.9g" : "%.9g", (double)v[i]);
	putchar(']');
}

static int print_record(void *ctx, const struct v05_jentry *e)
{
	const struct v05_jrec *r = e->rec;

	(void)ctx;
	printf("{\"seq\": %" PRIu64 ", \"key\": \"0x%016" PRIx64 "\", \"uid\": ",
	       r->seq, r->key);
	json_bytes(stdout, e->uid, r->uid_len);
	printf(", \"batch\": %" PRIu64 ", \"k\": %u, \"action\": ", r->batch, r->k);
	json_str(stdout, v05_action_name(r->action) ? v05_action_name(r->action) : "?");
	printf(", \"mode\": ");
	json_str(stdout, v05_mode_name(r->mode) ? v05_mode_name(r->mode) : "?");
	printf(", \"prior\": ");
	json_num(stdout, r->prior);
	printf(", \"baseline\": ");
	json_num(stdout, r->baseline);
	printf(", \"sigma\": ");
	json_num(stdout, r->sigma);
	printf(", \"mean\": ");
	json_num(stdout, r->mean);
	printf(", \"submit_ns\": %" PRIu64 ", \"final_ns\": %" PRIu64
	       ", \"keep\": \"0x%" PRIx64 "\", \"rewards\": ", r->submit_ns,
	       r->final_ns, r->keep);
	floats(e->rewards, r->k);
	printf(", \"advantages\": ");
	floats(e->advantages, r->k);
	printf("}\n");
	return 0;
}

int cmd_journal(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "summary", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct v05_jscan res;
	const char *path;
	int opt, fd, summary = 0, ret;
	struct stat st;
	void *map = NULL;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			summary = 1;
			break;
		case 'h':
			help_journal(stdout);
			return EXIT_OK;
		default:
			return v05ctl_usage_error("journal",
				"unknown option '%s' (see v05ctl journal --help)",
				argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return v05ctl_usage_error("journal", "expects exactly one FILE");
	path = argv[optind];
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; anything
	 * but a regular file is refused before it is read. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st)) {
		fprintf(stderr, "v05ctl journal: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return EXIT_FAILED;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "v05ctl journal: %s is not a regular file\n", path);
		close(fd);
		return EXIT_FAILED;
	}
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			fprintf(stderr, "v05ctl journal: %s: %s\n", path,
				strerror(errno));
			close(fd);
			return EXIT_FAILED;
		}
	}
	ret = v05__journal_scan(map, (size_t)st.st_size,
				summary ? NULL : print_record, NULL, &res);
	fflush(stdout);
	if (map)
		munmap(map, (size_t)st.st_size);
	close(fd);
	if (res.version && res.version != V05_JOURNAL_VERSION) {
		fprintf(stderr,
			"v05ctl journal: %s is format version %u; this build reads version %u\n",
			path, res.version, V05_JOURNAL_VERSION);
		return EXIT_FAILED;
	}
	if (ret || res.tail == V05_JTAIL_BAD_HEADER) {
		fprintf(stderr, "v05ctl journal: %s is not a v05 journal\n", path);
		return EXIT_FAILED;
	}
	fprintf(stderr,
		"v05ctl journal: %" PRIu64 " records, last seq %" PRIu64
		", %" PRIu64 " repeated seqs, tail %s",
		res.records, res.last_seq, res.duplicates,
		v05__journal_tail_name(res.tail));
	if (res.tail != V05_JTAIL_CLEAN)
		fprintf(stderr, " at offset %" PRIu64 " (%" PRIu64 " bytes after the last valid record)",
			res.bad_offset, (uint64_t)st.st_size - res.valid_bytes);
	fputc('\n', stderr);
	if (res.tail == V05_JTAIL_TORN)
		return 3;
	return res.tail == V05_JTAIL_CLEAN ? EXIT_OK : EXIT_FAILED;
}
