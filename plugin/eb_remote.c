/* SPDX-License-Identifier: MIT */
/*
 * v05_eb_state_get / v05_eb_state_set_remote: v05-eb's running fit for
 * and from the other engines (docs/STATISTICS.md, "Several engines").
 */
#include <errno.h>
#include <string.h>

#include "rules/stats_core.h"
#include "top.h"
#include "../shm/error.h"
#include "v05/observer.h"
#include "mechanics/one_thread.h"

static int check_stream_eb(const struct v05_plugin *p, const char *what)
{
	if (!p)
		return v05__fail(-EINVAL, "%s: NULL plugin", what);
	if (!(p->rule->flags & V05__RULE_MERGES) ||
	    p->cfg.schedule != V05_SCHEDULE_STREAM)
		return v05__fail(-EINVAL,
				 "%s: the running fit is v05-eb's under the stream schedule; segment %s runs mode %s, schedule %s",
				 what, p->seg.name, p->rule->name,
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

/* A state handed in: checked as every call that takes one checks it
 * (a state some folds could have made: eb_state.c). */
static int check_state(const struct v05_eb_state *s, const char *what)
{
	if (!s)
		return v05__fail(-EINVAL, "%s: NULL state", what);
	return v05__eb_state_check(s, what);
}

/* The fit changed: the memo is stale, and undecided prompts of a cold
 * start may be warm now. */
static void fit_changed(struct v05_plugin *p)
{
	p->fit_memo_ok = false;
	for (uint32_t b = 0; b < p->seg.hdr.geo.batch_count; b++)
		if (p->batch_recs[b].id && p->batches[b].n_held)
			v05__schedule_progress(p, b);
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
	ret = check_state(others, "eb_state_set_remote");
	if (ret) {
		/* Refused, as a state no fold could have made: counted. */
		if (ret == -EDOM)
			v05__count(p, V05_C_EB_PARTS_REFUSED, 1);
		return ret;
	}
	memcpy(&p->fit->remote, others, sizeof(*others));
	p->fit->remote_sets++;
	fit_changed(p);
	return 0;
}

V05_API int v05_eb_state_set_own(struct v05_plugin *p,
				 const struct v05_eb_state *own)
{
	V05_ONE_THREAD(p, "eb_state_set_own");
	uint32_t s;
	int ret;

	v05__clear_error();
	ret = check_stream_eb(p, "eb_state_set_own");
	if (!ret)
		ret = check_state(own, "eb_state_set_own");
	if (ret)
		return ret;
	/* Observers copy own under its sequence word (observer_reads.c). */
	s = v05_seq_begin(&p->fit->own_seq);
	memcpy(&p->fit->own, own, sizeof(*own));
	v05_seq_end(&p->fit->own_seq, s);
	fit_changed(p);
	return 0;
}
