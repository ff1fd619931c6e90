/* SPDX-License-Identifier: MIT */
/*
 * Replace a dead owner's segment with a new one, never removing what
 * cannot be replaced: the old segment is claimed first (its owner word,
 * so no one takes it over meanwhile), the new one is made whole under a
 * name of its own, and the two are swapped with atomic exchanges
 * (renameat2 RENAME_EXCHANGE, the side directory first, then the segment
 * file): at no moment is the name free for another process to take, and
 * until the swap nothing of the old segment has changed. Only then is the
 * old one removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mechanics/internal.h"
#include "../shm/error.h"
#include "../shm/proc.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/* a and b's side directories exchanged (or b's made a's name, where a has
 * none: its file alone was left). */
static int swap_side(const char *a, const char *b)
{
	char sa[PATH_MAX], sb[PATH_MAX];
	struct stat st;

	if (v05__side_path(a, sa, sizeof(sa)) || v05__side_path(b, sb, sizeof(sb)))
		return -ENAMETOOLONG;
	if (lstat(sa, &st) && errno == ENOENT)
		return renameat2(AT_FDCWD, sb, AT_FDCWD, sa, RENAME_NOREPLACE) ?
			       -errno : 0;
	return renameat2(AT_FDCWD, sb, AT_FDCWD, sa, RENAME_EXCHANGE) ? -errno : 0;
}

V05_API int v05_plugin_replace(const char *name, const struct v05_config *c,
			       struct v05_plugin **out)
{
	static unsigned counter;
	char tmp[64], tpath[PATH_MAX], path[PATH_MAX];
	struct v05_segment old;
	struct v05_plugin *p;
	uint64_t me, was;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "plugin_replace: NULL out");
	ret = v05_config_check(c);
	if (!ret)
		ret = v05__segment_path(name, path, sizeof(path));
	if (ret)
		return ret;
	me = v05__owner_self();
	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	/* Nothing but side files left: nothing to keep. */
	ret = v05__segment_attach(name, V05_ROLE_OWNER, 0, &old);
	if (ret == -ENOENT) {
		ret = v05_segment_reclaim(name, 0);
		if (ret && ret != -ENOENT)
			return ret;
		return v05_plugin_create(name, c, out);
	}
	if (ret)
		return ret;
	/* Ours from here (A5/R5's kind: acquire, as a takeover's). */
	was = v05_load_acquire(&old.ctl->owner);
	if ((was && v05__owner_alive(was)) ||
	    !v05_cas_acq_rel(&old.ctl->owner, &was, me)) {
		v05__segment_detach(&old);
		return v05__fail(-EBUSY, "segment %s is owned by live pid %u", name,
				 v05__owner_pid(was));
	}
	snprintf(tmp, sizeof(tmp), "v05-replace-%d-%u", (int)getpid(), counter++);
	ret = v05__plugin_create_at(tmp, name, c, &p);
	if (ret)
		goto restore;
	snprintf(tpath, sizeof(tpath), "%s", p->seg.path);
	ret = swap_side(path, tpath);
	if (ret) {
		ret = v05__fail(ret, "exchange the side directories of %s: %s",
				name, v05__errstr(-ret));
		goto drop_new;
	}
	if (renameat2(AT_FDCWD, tpath, AT_FDCWD, path, RENAME_EXCHANGE)) {
		ret = v05__fail(-errno, "exchange %s: %s", path, v05__errstr(errno));
		swap_side(path, tpath); /* back as it was */
		goto drop_new;
	}
	/* The new segment is NAME now; the old one is at tmp: removed. */
	snprintf(p->seg.path, sizeof(p->seg.path), "%s", path);
	v05__segment_detach(&old);
	unlink(tpath);
	v05__side_remove(tpath);
	*out = p;
	return 0;
drop_new:
	v05_plugin_close(p, 0);
	unlink(tpath);
	v05__side_remove(tpath);
restore:
	/* Release: the old segment as it was, for another attempt. */
	v05_store_release(&old.ctl->owner, was);
	v05__segment_detach(&old);
	return ret;
}
