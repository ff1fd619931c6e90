/* SPDX-License-Identifier: MIT */
/* Names: a segment's name checked, its path, its side directory's files'
 * names and paths, and a uid's 64-bit key. */
#include "segment.h"
#include "segment_parts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"

V05_API int v05_name_check(const char *name)
{
	size_t n;

	if (!name || !name[0])
		return v05__fail(-EINVAL, "segment name is empty");
	n = strlen(name);
	if (n > V05_NAME_MAX)
		return v05__fail(-ENAMETOOLONG,
				 "segment name is %zu characters, at most %d",
				 n, V05_NAME_MAX);
	if (strchr(name, '/'))
		return v05__fail(-EINVAL, "segment name '%s' contains '/'", name);
	if (name[0] == '.')
		return v05__fail(-EINVAL, "segment name '%s' starts with '.'",
				 name);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return v05__fail(-EINVAL,
					 "segment name has character 0x%02x; use [A-Za-z0-9._-]",
					 (unsigned char)c);
	}
	return 0;
}

V05_API uint64_t v05_key(const void *uid, size_t len)
{
	uint64_t k = XXH3_64bits(uid, len);

	return k ? k : 1;
}

const char *v05__shm_dir(void)
{
	const char *d = getenv("V05_SHM_DIR");

	return d && d[0] == '/' ? d : "/dev/shm";
}

void v05__segment_blank(struct v05_segment *seg)
{
	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	seg->bell_fd = -1;
	seg->dir_fd = -1;
}

int v05__segment_path(const char *name, char *path, size_t len)
{
	int ret = v05_name_check(name);

	if (ret)
		return ret;
	if ((size_t)snprintf(path, len, "%s/v05-%s", v05__shm_dir(), name) >= len)
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	return 0;
}

void v05__side_name(enum v05_seg_file kind, uint32_t lane, char *name,
		    size_t len)
{
	switch (kind) {
	case V05_FILE_LANE:
		snprintf(name, len, "lane.%u", lane);
		break;
	case V05_FILE_BROKER:
		snprintf(name, len, "broker");
		break;
	default:
		snprintf(name, len, "bell");
		break;
	}
}

int v05__segment_file_path(const char *seg_path, enum v05_seg_file kind,
			   uint32_t lane, char *path, size_t len)
{
	char name[32];
	int n;

	v05__side_name(kind, lane, name, sizeof(name));
	n = snprintf(path, len, "%s" V05_SIDE_SUFFIX "/%s", seg_path, name);
	if (n < 0 || (size_t)n >= len)
		return v05__fail(-ENAMETOOLONG, "segment path too long");
	return 0;
}

int v05__segment_file(const struct v05_segment *seg, enum v05_seg_file kind,
		      uint32_t lane, char *path, size_t len)
{
	return v05__segment_file_path(seg->path, kind, lane, path, len);
}
