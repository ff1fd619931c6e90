/* SPDX-License-Identifier: MIT */
/* The lane broker's admission (broker.h): who may have a lane, a pure
 * function of the peer's credentials and the owner's allow-list, and the
 * kernel's overflow ids it refuses unless listed. */
#include "broker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static bool listed(const uint32_t *ids, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

void v05__overflow_ids(uint32_t *uid, uint32_t *gid)
{
	static const char *const path[2] = { "/proc/sys/kernel/overflowuid",
					     "/proc/sys/kernel/overflowgid" };
	uint32_t *out[2] = { uid, gid };

	for (int i = 0; i < 2; i++) {
		FILE *f = fopen(path[i], "re");
		unsigned v;

		*out[i] = 65534;
		if (f) {
			if (fscanf(f, "%u", &v) == 1)
				*out[i] = v;
			fclose(f);
		}
	}
}

int v05__broker_admit(const struct v05_broker_allow *a, uint32_t owner_uid,
		      const struct v05_peer *peer, char *why, size_t len)
{
	bool ok;

	/* Every user of the host that this user namespace does not map
	 * looks like the overflow id: admitting it admits them all. */
	if (!a->overflow_ok &&
	    (peer->uid == a->overflow_uid || peer->gid == a->overflow_gid)) {
		snprintf(why, len,
			 "uid %u (gid %u) is the kernel's overflow id (any user this user namespace does not map); refused unless listed with V05_CONFIG_BROKER_OVERFLOW_IDS (Python: broker_overflow_ids=True)",
			 peer->uid, peer->gid);
		return -EPERM;
	}
	ok = peer->uid == owner_uid || listed(a->uids, a->n_uids, peer->uid) ||
	     listed(a->gids, a->n_gids, peer->gid);
	for (uint32_t i = 0; i < peer->ngroups && !ok; i++)
		ok = (a->overflow_ok || peer->groups[i] != a->overflow_gid) &&
		     listed(a->gids, a->n_gids, peer->groups[i]);
	if (!ok) {
		snprintf(why, len,
			 "uid %u (gid %u) is not on the owner's allow-list; the owner admits it by listing the uid or a group of it (struct v05_config broker_uids/broker_gids; Python: broker_allow_uids/broker_allow_gids)",
			 peer->uid, peer->gid);
		return -EPERM;
	}
	/* Owner words name pids: a producer must share our pid namespace. */
	if (peer->pid <= 0) {
		snprintf(why, len,
			 "uid %u (gid %u) is admitted but runs in another pid namespace; a producer must share the owner's (its lane's owner word names its pid)",
			 peer->uid, peer->gid);
		return -EXDEV;
	}
	return 0;
}
