/* SPDX-License-Identifier: MIT */
/*
 * The cut-off of a brokered producer (docs/SHM.md, "Cutting a lane off"):
 * its granted lane goes back to its file at once, and its uid gets no new
 * lane from the broker for a backoff that doubles with each cut-off.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/cutoff_fx.h"
#include "util/rawgrant.h"
#include "util/seg.h"
#include "v05-internal/plugin.h"
#include "v05-internal/shm.h"
#include "v05.h"

/*
 * A brokered producer that never claims its grant (its lane's owner word
 * stays the broker's token, the owner's own word) is cut off after
 * lane_cut_records records all the same: its lane goes back to its file
 * at once. Reconnecting gets no new lane until its uid's backoff is over
 * (-EAGAIN, a message, counted), and the backoff doubles with each cut:
 * a reconnect loop gets one window per backoff, not one per connection.
 */
static void test_cut_brokered_and_backoff(void **state)
{
	struct v05_decision d[PROMPTS];
	struct raw_grant g;
	struct v05_plugin *p;
	uint64_t until1, until2, now;
	uint32_t lane, tries = 0;
	char name[64];
	int ret;

	(void)state;
	test_name(name, sizeof(name), "cutbrk");
	p = cut_make_as(name, V05_MODE_V05, PROMPTS, 4, 16, 64, true);
	cut_submit(p, "q", PROMPTS, d);
	assert_int_equal(raw_grant(name, &g), 0);
	assert_int_equal(raw_grant_map(&g), 0);
	lane = g.g.lane;
	assert_int_equal(v05_load_relaxed(&g.lane->owner), g.g.token);
	for (int round = 0; round < 8 && !cut_ctr(p, V05_C_LANES_CUT_OFF); round++) {
		raw_publish(g.lane, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 32);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);
	assert_int_equal(cut_ctr(p, V05_C_REJ_LATE), 64);
	/* Back to its file at once, free for the next claim; what the
	 * memfd holds is nobody's concern. */
	assert_false(v05__lane_granted(&p->seg.lane_own[lane]));
	assert_int_equal(v05_load_relaxed(&v05__lane(&p->seg, lane)->owner), 0);
	assert_int_equal(v05_load_relaxed(&g.lane->owner), V05_OWNER_CUT);
	raw_publish(g.lane, LANE_CAP, d[0].key, d[0].gen ^ 1, 200);
	assert_int_equal(v05_poll(p, NULL, 0), 0);
	assert_int_equal(cut_ctr(p, V05_C_REJ_LATE), 64);
	raw_grant_close(&g);
	/* The reconnect loop: refused for the backoff, counted. */
	now = v05__now_ns();
	until1 = p->st->backoff[0].until_ns;
	assert_int_equal(p->st->backoff[0].uid, geteuid());
	assert_int_equal(p->st->backoff[0].cuts, 1);
	assert_true(until1 > now + 500000000ull && until1 <= now + 1000000000ull);
	for (int i = 0; i < 20; i++) {
		ret = raw_grant(name, &g);
		assert_int_equal(ret, -EAGAIN);
		assert_non_null(strstr(g.g.msg, "cut off"));
		tries++;
	}
	assert_int_equal(cut_ctr(p, V05_C_BROKER_BACKOFF), tries);
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 1);
	/* Its backoff over (as time would cut_make it): one more window, cut
	 * again; the next backoff twice as long. */
	p->st->backoff[0].until_ns = 0;
	assert_int_equal(raw_grant(name, &g), 0);
	assert_int_equal(raw_grant_map(&g), 0);
	for (int round = 0; round < 8 && cut_ctr(p, V05_C_LANES_CUT_OFF) < 2; round++) {
		raw_publish(g.lane, LANE_CAP, d[0].key, d[0].gen ^ 0x5a5a5a5a, 32);
		assert_true(v05_poll(p, NULL, 0) >= 0);
	}
	assert_int_equal(cut_ctr(p, V05_C_LANES_CUT_OFF), 2);
	now = v05__now_ns();
	until2 = p->st->backoff[0].until_ns;
	assert_int_equal(p->st->backoff[0].cuts, 2);
	assert_true(until2 > now + 1500000000ull && until2 <= now + 2000000000ull);
	assert_int_equal(raw_grant(name, &g), -EAGAIN);
	raw_grant_close(&g);
	/* The backoff survives a takeover: it is in the segment. */
	assert_int_equal(v05_plugin_close(p, 0), 0);
	assert_int_equal(v05_plugin_attach(name, 0, &p), 0);
	assert_int_equal(raw_grant(name, &g), -EAGAIN);
	v05_plugin_close(p, V05_CLOSE_UNLINK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cut_brokered_and_backoff),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
