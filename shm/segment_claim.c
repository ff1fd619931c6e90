/* SPDX-License-Identifier: MIT */
/*
 * Acting on a segment whose owner is gone (a takeover, a replace, a
 * reclaim) starts with its owner word: whoever changes what the names
 * v05-NAME and v05-NAME:side hold first swaps that word from a dead
 * owner's (or 0) to its own, so two such processes never act on the same
 * segment at once, and none acts on a live owner's. The check that the
 * owner is dead and the claim are one CAS: nothing can come between them.
 *
 * And the binding of a segment file to its side directory: the control
 * block keeps the directory's identity, so the directory at the name is
 * known to be the file's, or not (a replace killed between its two
 * exchanges leaves the file of one segment with the directory of the
 * other; shm/segment_stage.c).
 */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "error.h"
#include "proc.h"

int v05__claim_busy(const char *name, const struct v05_shm_control *ctl,
		    uint64_t word)
{
	/* Relaxed: for the message only. */
	uint32_t why = v05_load_relaxed(&ctl->claim);
	unsigned pid = v05__owner_pid(word);

	if (why == V05_CLAIM_RECLAIM)
		return v05__fail(-EBUSY,
				 "segment %s is being removed by pid %u (a reclaim: v05ctl reclaim, v05.reclaim or a reaper); once it is gone the name is free: create it again",
				 name, pid);
	if (why == V05_CLAIM_REPLACE)
		return v05__fail(-EBUSY,
				 "segment %s is being replaced by pid %u (v05_plugin_replace, Plugin.create(on_stale='remove')); it owns the new one once done",
				 name, pid);
	return v05__fail(-EBUSY, "segment %s is owned by live pid %u", name, pid);
}

int v05__claim_open(const char *name, unsigned flags, struct v05_claim *c)
{
	const struct v05_region *r;
	struct v05_shm_header h;
	struct stat st;
	void *map;
	int ret;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	ret = v05__segment_path(name, c->path, sizeof(c->path));
	if (ret)
		return ret;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->fd = open(c->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (c->fd < 0)
		return v05__fail(-errno, "open %s: %s", c->path, v05__errstr(errno));
	if (fstat(c->fd, &st)) {
		ret = v05__fail(-errno, "fstat %s: %s", c->path, v05__errstr(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = v05__fail(-EBADMSG, "%s is not a regular file", c->path);
		goto fail;
	}
	if (st.st_uid != geteuid() && !(flags & V05_ATTACH_ANY_UID)) {
		ret = v05__fail(-EACCES, "%s belongs to uid %u, not to this process's uid %u",
				c->path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail;
	}
	if (pread(c->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		ret = v05__fail(-EMSGSIZE, "read header of %s", c->path);
		goto fail;
	}
	ret = v05__header_validate(&h, (uint64_t)st.st_size);
	if (ret)
		goto fail;
	/* The control block alone: validated, page-aligned, inside. */
	r = &h.regions[V05_REGION_CONTROL];
	map = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd,
		   (off_t)r->offset);
	if (map == MAP_FAILED) {
		ret = v05__fail(-errno, "mmap %s: %s", c->path, v05__errstr(errno));
		goto fail;
	}
	c->map = map;
	c->map_len = r->size;
	c->ctl = map;
	c->uid = (uint32_t)st.st_uid;
	c->st_dev = (uint64_t)st.st_dev;
	c->st_ino = (uint64_t)st.st_ino;
	return 0;
fail:
	close(c->fd);
	c->fd = -1;
	return ret;
}

int v05__claim_take(struct v05_claim *c, uint64_t me, uint32_t why)
{
	/* A5's kind: acquire pairs with the last owner's release (R5) or
	 * with nothing if it died: its stores are complete either way. */
	uint64_t was = v05_load_acquire(&c->ctl->owner);

	if (was == me || (was && v05__owner_alive(was)) ||
	    !v05_cas_acq_rel(&c->ctl->owner, &was, me))
		return v05__claim_busy(c->name, c->ctl, was);
	c->was = was;
	c->held = true;
	/* Relaxed: for messages (v05__claim_busy). */
	v05_store_relaxed(&c->ctl->claim, why);
	return 0;
}

void v05__claim_close(struct v05_claim *c, bool give_back)
{
	if (c->held && give_back) {
		v05_store_relaxed(&c->ctl->claim, (uint32_t)V05_CLAIM_OWNER);
		/* Release: whatever this process wrote before the segment is
		 * free to take again. */
		v05_store_release(&c->ctl->owner, c->was);
	}
	c->held = false;
	if (c->map)
		munmap(c->map, c->map_len);
	c->map = NULL;
	c->ctl = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

bool v05__claim_same_file(const struct v05_claim *c)
{
	struct stat st;

	return !lstat(c->path, &st) && (uint64_t)st.st_dev == c->st_dev &&
	       (uint64_t)st.st_ino == c->st_ino;
}

void v05__side_bind(struct v05_shm_control *ctl, int dir_fd)
{
	struct stat st;

	if (fstat(dir_fd, &st))
		return;
	/* Relaxed: owner-only words, read by the next owner after its A5. */
	v05_store_relaxed(&ctl->side_dev, (uint64_t)st.st_dev);
	v05_store_relaxed(&ctl->side_ino, (uint64_t)st.st_ino);
}

bool v05__side_bound(const struct v05_shm_control *ctl, const struct stat *dir)
{
	uint64_t ino = v05_load_relaxed(&ctl->side_ino);

	return !ino || (ino == (uint64_t)dir->st_ino &&
			v05_load_relaxed(&ctl->side_dev) == (uint64_t)dir->st_dev);
}
