/* SPDX-License-Identifier: MIT */
/* Journal writer: batched io_uring writes, one in flight, optional
 * fdatasync linked to each write; synchronous pwrite when io_uring is
 * refused. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "journal.h"
#include "../../shm/error.h"
#include "../../shm/proc.h"
#include "v05/plugin.h"

#define JBUF (256u * 1024u)

enum { TAG_WRITE = 1, TAG_SYNC = 2 };

struct v05_journal {
	int fd;
	uint32_t sync;
	struct io_uring ring;
	int ring_ok;
	uint8_t *buf[2];
	size_t len[2];
	uint64_t last_seq[2]; /* highest seq in each buffer */
	int fill;             /* buffer being filled */
	int inflight;         /* buffer being written, -1 none */
	unsigned cqes;        /* CQEs still expected for the write */
	uint64_t offset;      /* where the next write goes */
	uint64_t durable_seq;
	uint64_t writes;
	int error;
	char errmsg[160];
};

static int fail(struct v05_journal *j, int err, const char *what)
{
	if (!j->error) {
		j->error = err;
		snprintf(j->errmsg, sizeof(j->errmsg),
			 "journal %s failed: %s; journaling stopped", what,
			 v05__errstr(err));
		/* Loud: the engine's log must show it, not only a counter. */
		fprintf(stderr, "v05: %s\n", j->errmsg);
	}
	return j->error;
}

static int write_header(int fd, const char *segment)
{
	struct v05_journal_hdr h;

	memset(&h, 0, sizeof(h));
	h.magic = V05_JOURNAL_MAGIC;
	h.version = V05_JOURNAL_VERSION;
	h.hdr_size = sizeof(h);
	h.created_ns = v05__wall_ns();
	snprintf(h.segment, sizeof(h.segment), "%s", segment);
	h.checksum = XXH3_64bits(&h, offsetof(struct v05_journal_hdr, checksum));
	for (size_t done = 0; done < sizeof(h);) {
		/* A short write sets no errno: write the rest, which then
		 * fails with the real reason (ENOSPC, EIO, ...). */
		ssize_t n = pwrite(fd, (const char *)&h + done, sizeof(h) - done,
				   (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (size_t)n;
	}
	return fdatasync(fd) ? -errno : 0;
}

/* Validate an existing journal; truncate a torn tail. */
static int recover_file(int fd, const char *path, const char *segment,
			uint64_t size, uint64_t *valid, uint64_t *last_seq,
			uint64_t *truncated)
{
	struct v05_jscan res;
	void *map;
	int ret;

	map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return v05__fail(-errno, "mmap journal %s: %s", path,
				 v05__errstr(errno));
	ret = v05__journal_scan(map, size, NULL, NULL, &res);
	munmap(map, size);
	if (res.version && res.version != V05_JOURNAL_VERSION)
		return v05__fail(-EBADMSG,
				 "journal %s is format version %u, this build writes version %u (version 2 added the keep mask): give another path or move it away; it is left as it was",
				 path, res.version, V05_JOURNAL_VERSION);
	if (ret || res.tail == V05_JTAIL_BAD_HEADER)
		return v05__fail(-EBADMSG, "%s is not a v05 journal", path);
	if (res.tail == V05_JTAIL_CORRUPT)
		return v05__fail(-EILSEQ,
				 "journal %s is corrupt at offset %llu (not at its end); move it away",
				 path, (unsigned long long)res.bad_offset);
	*truncated = size - res.valid_bytes;
	if (*truncated && ftruncate(fd, (off_t)res.valid_bytes))
		return v05__fail(-errno, "truncate torn tail of %s: %s", path,
				 v05__errstr(errno));
	if (res.valid_bytes == 0) {
		/* The first header itself was torn (scan checked that what
		 * is there is a prefix of one): start over with a whole one,
		 * never leave a headerless file that nothing could read. */
		ret = write_header(fd, segment);
		if (ret)
			return v05__fail(ret, "write journal header %s: %s", path,
					 v05__errstr(ret));
		res.valid_bytes = sizeof(struct v05_journal_hdr);
	}
	*valid = res.valid_bytes;
	*last_seq = res.last_seq;
	return 0;
}

int v05__journal_open(const char *path, uint32_t sync, const char *segment,
		      unsigned mode, struct v05_journal **out,
		      uint64_t *last_seq, uint64_t *truncated)
{
	struct v05_journal *j;
	struct stat st;
	int ret;

	*last_seq = 0;
	*truncated = 0;
	j = calloc(1, sizeof(*j));
	if (!j)
		return v05__fail(-ENOMEM, "journal: out of memory");
	j->inflight = -1;
	j->sync = sync;
	/* No link followed (a planted link would aim the owner's writes at
	 * any file it can write); O_NONBLOCK so that a FIFO does not block
	 * the open (it is refused below); cleared again before writing. */
	j->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
		     0600);
	if (j->fd < 0) {
		ret = v05__fail(-errno, "open journal %s: %s%s", path,
				v05__errstr(errno),
				errno == ELOOP ? " (a symbolic link is not followed)" : "");
		free(j);
		return ret;
	}
	if (fstat(j->fd, &st) || !S_ISREG(st.st_mode)) {
		ret = v05__fail(-EINVAL, "journal %s is not a regular file", path);
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		ret = v05__fail(-EACCES,
				"journal %s belongs to uid %u, not to this process's uid %u",
				path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail;
	}
	if ((unsigned)st.st_mode & 0777u & ~(mode | 0600u)) {
		ret = v05__fail(-EACCES,
				"journal %s has mode %03o, wider than the segment's %03o",
				path, (unsigned)st.st_mode & 0777u, mode | 0600u);
		goto fail;
	}
	if (fcntl(j->fd, F_SETFL, 0)) {
		ret = v05__fail(-errno, "fcntl journal %s: %s", path,
				v05__errstr(errno));
		goto fail;
	}
	if (st.st_size == 0) {
		ret = write_header(j->fd, segment);
		if (ret) {
			v05__fail(ret, "write journal header %s: %s", path,
				  v05__errstr(ret));
			goto fail;
		}
		j->offset = sizeof(struct v05_journal_hdr);
	} else {
		ret = recover_file(j->fd, path, segment, (uint64_t)st.st_size,
				   &j->offset, last_seq, truncated);
		if (ret)
			goto fail;
	}
	j->durable_seq = *last_seq;
	j->buf[0] = malloc(JBUF);
	j->buf[1] = malloc(JBUF);
	if (!j->buf[0] || !j->buf[1]) {
		ret = v05__fail(-ENOMEM, "journal: out of memory");
		goto fail;
	}
	/* io_uring if we may; otherwise synchronous writes, same format. */
	j->ring_ok = io_uring_queue_init(8, &j->ring, 0) == 0;
	*out = j;
	return 0;
fail:
	close(j->fd);
	free(j->buf[0]);
	free(j->buf[1]);
	free(j);
	return ret;
}

/*
 * Write what is left of buffer b from byte done on, synchronously. A short
 * write is not an error in itself (a full disk takes what fits, then says
 * ENOSPC on the next write): go on until everything is written or a write
 * fails, and report that write's errno.
 */
static int write_rest(struct v05_journal *j, int b, size_t done)
{
	while (done < j->len[b]) {
		ssize_t n = pwrite(j->fd, j->buf[b] + done, j->len[b] - done,
				   (off_t)(j->offset + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fail(j, -errno, "write");
		if (n == 0)
			return fail(j, -EIO, "write (no progress)");
		done += (size_t)n;
	}
	return 0;
}

static void written(struct v05_journal *j, int b)
{
	j->offset += j->len[b];
	if (j->last_seq[b] > j->durable_seq)
		j->durable_seq = j->last_seq[b];
	j->len[b] = 0;
	j->last_seq[b] = 0;
	j->inflight = -1;
	j->writes++;
}

static int submit(struct v05_journal *j)
{
	int b = j->fill;
	struct io_uring_sqe *sqe;

	if (j->len[b] == 0 || j->inflight >= 0 || j->error)
		return j->error;
	if (!j->ring_ok) {
		if (write_rest(j, b, 0))
			return j->error;
		if (j->sync == V05_JOURNAL_SYNC_BATCH && fdatasync(j->fd))
			return fail(j, -errno, "fdatasync");
		written(j, b);
		return 0;
	}
	sqe = io_uring_get_sqe(&j->ring);
	if (!sqe)
		return fail(j, -EBUSY, "submission");
	io_uring_prep_write(sqe, j->fd, j->buf[b], (unsigned)j->len[b], j->offset);
	sqe->user_data = TAG_WRITE;
	j->cqes = 1;
	if (j->sync == V05_JOURNAL_SYNC_BATCH) {
		struct io_uring_sqe *s2;

		/* Linked: the sync runs only after the write succeeded; a
		 * failed write cancels it. */
		sqe->flags |= IOSQE_IO_LINK;
		s2 = io_uring_get_sqe(&j->ring);
		if (!s2)
			return fail(j, -EBUSY, "submission");
		io_uring_prep_fsync(s2, j->fd, IORING_FSYNC_DATASYNC);
		s2->user_data = TAG_SYNC;
		j->cqes = 2;
	}
	if (io_uring_submit(&j->ring) < 0)
		return fail(j, -EIO, "submission");
	j->inflight = b;
	j->fill = 1 - b;
	return 0;
}

/* Reap the in-flight write's CQEs; wait for them if asked. */
static int reap(struct v05_journal *j, int wait)
{
	while (j->inflight >= 0 && j->cqes) {
		struct io_uring_cqe *cqe;
		int ret = wait ? io_uring_wait_cqe(&j->ring, &cqe) :
				 io_uring_peek_cqe(&j->ring, &cqe);
		int b = j->inflight;

		if (ret == -EAGAIN && !wait)
			return 0;
		if (ret == -EINTR)
			continue;
		if (ret < 0)
			return fail(j, ret, "completion");
		if (cqe->user_data == TAG_WRITE) {
			if (cqe->res < 0)
				fail(j, cqe->res, "write");
			else if ((size_t)cqe->res != j->len[b])
				/* The rest, synchronously: it either fits
				 * or names the real error (ENOSPC). A linked
				 * fdatasync was cancelled: sync again. */
				if (!write_rest(j, b, (size_t)cqe->res) &&
				    j->sync == V05_JOURNAL_SYNC_BATCH &&
				    fdatasync(j->fd))
					fail(j, -errno, "fdatasync");
		} else if (cqe->user_data == TAG_SYNC && cqe->res < 0 &&
			   !j->error) {
			fail(j, cqe->res, "fdatasync");
		}
		io_uring_cqe_seen(&j->ring, cqe);
		if (--j->cqes == 0) {
			if (j->error) {
				j->inflight = -1;
				return j->error;
			}
			written(j, b);
		}
	}
	return j->error;
}

int v05__journal_busy(const struct v05_journal *j)
{
	return j->inflight >= 0 || j->len[j->fill] != 0;
}

int v05__journal_pump(struct v05_journal *j, int wait)
{
	do {
		if (j->ring_ok && reap(j, wait))
			return j->error;
		if (submit(j))
			return j->error;
	} while (wait && (j->inflight >= 0 || j->len[j->fill]));
	return j->error;
}

int v05__journal_append(struct v05_journal *j, const struct v05_jrec *fixed,
			const uint8_t *uid, const float *rewards,
			const float *adv)
{
	uint32_t size = v05__jrec_size(fixed->uid_len, fixed->k);
	uint32_t upad = (fixed->uid_len + 7u) & ~7u;
	struct v05_jrec rec = *fixed;
	uint8_t *p;

	if (j->error)
		return j->error;
	if (j->len[j->fill] + size > JBUF) {
		/* The filling buffer is full: hand it to the kernel, waiting
		 * for the write before it if that one still runs. */
		if (j->inflight >= 0 && reap(j, 1))
			return j->error;
		if (submit(j))
			return j->error;
	}
	p = j->buf[j->fill] + j->len[j->fill];
	rec.magic = V05_JREC_MAGIC;
	rec.size = size;
	memcpy(p, &rec, sizeof(rec));
	memset(p + sizeof(rec), 0, upad);
	memcpy(p + sizeof(rec), uid, fixed->uid_len);
	memcpy(p + sizeof(rec) + upad, rewards, 4u * fixed->k);
	memcpy(p + sizeof(rec) + upad + 4u * fixed->k, adv, 4u * fixed->k);
	rec.checksum = XXH3_64bits(p + 16, size - 16);
	memcpy(p + 8, &rec.checksum, sizeof(rec.checksum));
	j->len[j->fill] += size;
	if (fixed->seq > j->last_seq[j->fill])
		j->last_seq[j->fill] = fixed->seq;
	return 0;
}

uint64_t v05__journal_durable(const struct v05_journal *j)
{
	return j->durable_seq;
}

uint64_t v05__journal_offset(const struct v05_journal *j)
{
	return j->offset;
}

uint64_t v05__journal_writes(const struct v05_journal *j)
{
	return j->writes;
}

int v05__journal_error(const struct v05_journal *j, const char **msg)
{
	if (msg)
		*msg = j->errmsg;
	return j->error;
}

void v05__journal_close(struct v05_journal *j)
{
	if (!j)
		return;
	v05__journal_pump(j, 1);
	if (j->ring_ok)
		io_uring_queue_exit(&j->ring);
	close(j->fd);
	free(j->buf[0]);
	free(j->buf[1]);
	free(j);
}
