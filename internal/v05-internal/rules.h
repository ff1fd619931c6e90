/* SPDX-License-Identifier: MIT */
/*
 * The rules' unchecked arithmetic (plugin/rules/stats_core.h: v05-eb's
 * posterior, predictive and expected variance among them), for white-box
 * tests of a rule's row. Not installed.
 */
#ifndef V05_INTERNAL_RULES_H
#define V05_INTERNAL_RULES_H

#include "../../plugin/rules/stats_core.h"

#endif
