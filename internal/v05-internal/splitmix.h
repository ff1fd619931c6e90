/* SPDX-License-Identifier: MIT */
/*
 * The plugin's seeded 64-bit stream (plugin/rules/splitmix.h), for v05ctl sim's
 * draws. Not installed.
 */
#ifndef V05_INTERNAL_SPLITMIX_H
#define V05_INTERNAL_SPLITMIX_H

#include "../../plugin/rules/splitmix.h"

#endif
