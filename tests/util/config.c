/* SPDX-License-Identifier: MIT */
/* The config most tests start from (config.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

void tc_config(struct v05_config *c)
{
	v05_config_default(c);
	/* v05-eb has no preset of its own: v05_config_mode gives it the
	 * library's settings, every field written. */
	if (v05_config_mode(c, V05_MODE_V05_EB) != 0) {
		fprintf(stderr, "tc_config: v05_config_mode(v05-eb): %s\n",
			v05_errmsg());
		abort();
	}
}
