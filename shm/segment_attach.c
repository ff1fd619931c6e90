/* SPDX-License-Identifier: MIT */
/* Attach to a segment (its header copied and validated before use) and
 * detach from it. */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

int v05__segment_attach(const char *name, enum v05_role role, unsigned flags,
			struct v05_segment *seg)
{
	/* A producer reads the segment file (the header) and nothing more. */
	bool rw = role == V05_ROLE_OWNER || role == V05_ROLE_READER;
	struct stat st;
	ssize_t n;
	void *base;
	int fd, ret;

	v05__segment_blank(seg);
	if (flags & ~(V05_ATTACH_ANY_UID | V05__ATTACH_NO_FILES))
		return v05__fail(-EINVAL, "unknown attach flags 0x%x", flags);
	ret = v05__segment_path(name, seg->path, sizeof(seg->path));
	if (ret)
		return ret;
	fd = open(seg->path, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == EACCES && rw)
		return v05__fail(-EACCES,
				 "open %s for writing: %s (only its owner's uid may write a segment; a producer of another uid needs the plugin's broker)",
				 seg->path, v05__errstr(errno));
	if (fd < 0)
		return v05__fail(-errno, "open %s: %s", seg->path, v05__errstr(errno));
	if (fstat(fd, &st)) {
		ret = v05__fail(-errno, "fstat %s: %s", seg->path, v05__errstr(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = v05__fail(-EBADMSG, "%s is not a regular file", seg->path);
		goto fail;
	}
	if (st.st_uid != geteuid() && !(flags & V05_ATTACH_ANY_UID)) {
		ret = v05__fail(-EACCES,
				"%s belongs to uid %u, not to this process's uid %u",
				seg->path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail;
	}
	if ((uint64_t)st.st_size < V05_PAGE) {
		ret = v05__fail(-EMSGSIZE, "%s is truncated (%lld bytes)",
				seg->path, (long long)st.st_size);
		goto fail;
	}
	/* Validate a private copy: a writer of the shared page cannot change
	 * what was checked after the check. */
	n = pread(fd, &seg->hdr, sizeof(seg->hdr), 0);
	if (n != (ssize_t)sizeof(seg->hdr)) {
		ret = v05__fail(n < 0 ? -errno : -EMSGSIZE, "read header of %s",
				seg->path);
		goto fail;
	}
	ret = v05__header_validate(&seg->hdr, (uint64_t)st.st_size);
	if (ret)
		goto fail;
	seg->st_dev = (uint64_t)st.st_dev;
	seg->st_ino = (uint64_t)st.st_ino;
	if (role == V05_ROLE_PRODUCER) {
		seg->role = role;
		seg->st_uid = (uint32_t)st.st_uid;
		seg->mode = (uint32_t)st.st_mode & 0777u;
		snprintf(seg->name, sizeof(seg->name), "%s", name);
		close(fd);
		return v05__segment_attach_producer(seg);
	}
	/* Map everything PROT_NONE, then open up what the role needs. */
	base = mmap(NULL, (size_t)st.st_size, PROT_NONE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = v05__fail(-errno, "mmap %s: %s", seg->path, v05__errstr(errno));
		goto fail;
	}
	seg->base = base;
	seg->size = (size_t)st.st_size;
	seg->fd = fd;
	seg->role = role;
	seg->st_uid = (uint32_t)st.st_uid;
	seg->mode = (uint32_t)st.st_mode & 0777u;
	snprintf(seg->name, sizeof(seg->name), "%s", name);
	ret = v05__segment_map_role(seg);
	if (!ret && (role == V05_ROLE_OWNER || role == V05_ROLE_INSPECT) &&
	    !(flags & V05__ATTACH_NO_FILES))
		ret = v05__segment_map_files(seg);
	if (ret) {
		v05__segment_detach(seg);
		return ret;
	}
	return 0;
fail:
	close(fd);
	return ret;
}

void v05__segment_detach(struct v05_segment *seg)
{
	if (seg->bell_map)
		munmap(seg->bell_map, seg->hdr.regions[V05_REGION_DOORBELL].size);
	seg->bell_map = NULL;
	seg->bell = NULL;
	seg->lane_own = NULL;
	seg->lanes_mapped = false;
	v05__files_close(seg);
	/* The files mapped over the view go with it. */
	if (seg->base)
		munmap(seg->base, seg->size);
	if (seg->fd >= 0)
		close(seg->fd);
	seg->base = NULL;
	seg->ctl = NULL;
	seg->fd = -1;
	for (int i = 0; i < V05_REGION_COUNT; i++)
		seg->region[i] = NULL;
}

void v05__segment_detach_readable(struct v05_segment *seg)
{
	/* MAP_FIXED replaces the old mapping in one step: no moment in which
	 * the range is unmapped and another mapping could land there. */
	if (seg->base &&
	    mmap(seg->base, seg->size, PROT_READ,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
		seg->base = NULL; /* not ours to unmap any more */
	v05__segment_detach(seg);
}
