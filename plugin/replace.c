/* SPDX-License-Identifier: MIT */
/*
 * Replace a dead owner's segment with a new one, crash-consistent: the
 * old segment is claimed first (its owner word, so no one takes it over or
 * removes it meanwhile), the new one is made whole in a temporary
 * directory only this uid can write, with a random name no other user
 * can plant first (shm/segment_stage.c), its lanes held until it has the
 * name; then the side directories are exchanged, then the segment files
 * (renameat2 RENAME_EXCHANGE): that second exchange is the commit. At no
 * moment is the name free for another process to take. Killed before the
 * commit, the name keeps the old segment (the next takeover, replace or
 * reclaim exchanges the side directories back if it died between the two
 * exchanges); after it, the new one; whatever is left in the temporary is
 * removed by the next one, and counted. Only after the commit is the old
 * segment removed.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mechanics/internal.h"
#include "../shm/error.h"
#include "../shm/proc.h"
#include "../shm/testpoint.h"

/* The side directory at the name, if there is one, must be the old
 * segment's uid's and closed to others: it is exchanged into the
 * temporary and removed with it. Another user's name is never touched. */
static int side_ours(const char *path, uint32_t uid)
{
	int fd = v05__side_dir_open(path, uid, false);

	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

/* The old segment claimed and what dead replaces left settled: make the
 * new one, exchange, commit. On failure nothing of the old one changed. */
static int swap_in(const char *name, const char *path, uint64_t me,
		   const struct v05_config *c, struct v05_plugin **out)
{
	char stage[PATH_MAX], spath[PATH_MAX];
	struct v05_plugin *p;
	bool had_side;
	int ret;

	ret = v05__stage_make(path, me, stage, sizeof(stage));
	if (ret)
		return ret;
	v05__test_point("replace.staged");
	if ((size_t)snprintf(spath, sizeof(spath), "%s/seg", stage) >= sizeof(spath)) {
		ret = v05__fail(-ENAMETOOLONG, "segment path too long");
		goto drop_stage;
	}
	ret = v05__plugin_create_at(spath, name, c, V05__CREATE_RESERVED, &p);
	if (ret)
		goto drop_stage;
	v05__test_point("replace.created");
	ret = v05__stage_swap_sides(path, spath, false, &had_side);
	if (ret)
		goto drop_new;
	v05__test_point("replace.sides");
	ret = v05__stage_commit(path, spath);
	if (ret) {
		v05__stage_swap_sides(path, spath, true, &had_side);
		goto drop_new;
	}
	v05__test_point("replace.files");
	/* The new segment is NAME now, and its lanes free to claim. */
	snprintf(p->seg.path, sizeof(p->seg.path), "%s", path);
	v05__segment_unreserve(&p->seg, me);
	/* The old one, in the temporary: removed. A failure here leaves it
	 * to the next settle (this process's owner word names the
	 * temporary: once it is gone). */
	v05__stage_remove(stage, "replace.cleaning");
	*out = p;
	return 0;
drop_new:
	{
		char keep[512];

		snprintf(keep, sizeof(keep), "%s", v05_errmsg());
		v05_plugin_close(p, 0);
		v05__fail(ret, "%s", keep);
	}
drop_stage:
	{
		char keep[512];

		snprintf(keep, sizeof(keep), "%s", v05_errmsg());
		v05__stage_remove(stage, NULL);
		v05__fail(ret, "%s", keep);
	}
	return ret;
}

V05_API int v05_plugin_replace(const char *name, const struct v05_config *c,
			       struct v05_plugin **out)
{
	struct v05_settled settled = { 0, 0 };
	struct v05_claim old;
	uint64_t me;
	int ret;

	v05__clear_error();
	if (!out)
		return v05__fail(-EINVAL, "plugin_replace: NULL out");
	ret = v05_config_check(c);
	if (ret)
		return ret;
	me = v05__owner_self();
	if (!me)
		return v05__fail(-EIO, "cannot read /proc/self/stat");
	ret = v05__claim_open(name, 0, &old);
	if (ret == -ENOENT) {
		/* No segment file: nothing to keep. What is left of one
		 * (this uid's side files, a dead replace's temporaries)
		 * goes, another user's name stays and is named. */
		ret = v05_segment_reclaim(name, 0);
		if (ret && ret != -ENOENT)
			return ret;
		return v05_plugin_create(name, c, out);
	}
	if (ret)
		return ret;
	ret = v05__claim_take(&old, me, V05_CLAIM_REPLACE);
	if (ret) {
		v05__claim_close(&old, false);
		return ret;
	}
	ret = v05__stage_settle(old.path, old.uid, me, &settled);
	if (!ret)
		ret = side_ours(old.path, old.uid);
	if (!ret)
		ret = swap_in(name, old.path, me, c, out);
	if (ret) {
		char keep[512];

		/* The old segment as it was, for another attempt (or a
		 * takeover), the temporaries of dead replaces settled. */
		snprintf(keep, sizeof(keep), "%s", v05_errmsg());
		v05__claim_close(&old, true);
		return v05__fail(ret, "%s", keep);
	}
	/* The old one is removed: its word stays ours. */
	v05__claim_close(&old, false);
	v05__count(*out, V05_C_REPLACES_UNDONE, settled.undone);
	v05__count(*out, V05_C_REPLACES_CLEANED, settled.cleaned);
	return 0;
}
