/* SPDX-License-Identifier: MIT */
/*
 * v05_eb_state_get / v05_eb_state_set_remote: v05-eb's running fit for
 * and from the other engines (docs/STATISTICS.md, "Several engines").
 */
#include <errno.h>
#include <string.h>

#include "stats_core.h"
#include "top.h"
#include "../shm/error.h"
#include "v05/observer.h"
#include "one_thread.h"

static int check_stream_eb(const struct v05_plugin *p, const char *what)
{
	if (!p)
		return v05__fail(-EINVAL, "%s: NULL plugin", what);
	if (p->params.mode != V05_MODE_V05_EB ||
	    p->cfg.schedule != V05_SCHEDULE_STREAM)
		return v05__fail(-EINVAL,
				 "%s: the running fit is v05-eb's under the stream schedule; segment %s runs mode %s, schedule %s",
				 what, p->seg.name, v05_mode_name(p->params.mode),
				 v05_schedule_name(p->cfg.schedule));
	return 0;
}

V05_API int v05_eb_state_get(struct v05_plugin *p, struct v05_eb_state *own)
{
	V05_ONE_THREAD(p, "eb_state_get");
	int ret;

	v05__clear_error();
	ret = check_stream_eb(p, "eb_state_get");
	if (ret)
		return ret;
	if (!own)
		return v05__fail(-EINVAL, "eb_state_get: NULL state");
	memcpy(own, &p->fit->own, sizeof(*own));
	return 0;
}

V05_API int v05_eb_state_set_remote(struct v05_plugin *p,
				    const struct v05_eb_state *others)
{
	V05_ONE_THREAD(p, "eb_state_set_remote");
	int ret;

	v05__clear_error();
	ret = check_stream_eb(p, "eb_state_set_remote");
	if (ret)
		return ret;
	if (!others)
		return v05__fail(-EINVAL, "eb_state_set_remote: NULL state");
	ret = v05__eb_state_check(others, "eb_state_set_remote");
	if (ret)
		return ret;
	p->fit_memo_ok = false;
	memcpy(&p->fit->remote, others, sizeof(*others));
	p->fit->remote_sets++;
	/* Undecided prompts of a cold start may be warm now. */
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++)
		if (p->batch_recs[b].id && p->batches[b].n_held)
			v05__schedule_progress(p, b);
	return 0;
}
