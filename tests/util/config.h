/* SPDX-License-Identifier: MIT */
/*
 * The config most tests start from: the library's own settings (k 4/2/16,
 * the rms normaliser, pad 32, halt 0.25, the streamed schedule) with mode
 * v05-eb, whatever the default mode is. A test that sets its mode or its
 * k by hand, or checks v05-eb's waves, starts here; a test of the default
 * itself calls v05_config_default.
 */
#ifndef V05_TEST_CONFIG_H
#define V05_TEST_CONFIG_H

#include "v05.h"

void tc_config(struct v05_config *c);

#endif
