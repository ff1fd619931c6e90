/* SPDX-License-Identifier: MIT */
/*
 * What the plugin keeps in the segment: its counters, and the states and
 * flags of its prompts, batches and final slots (plugin/mechanics/vocab.h), for the
 * programs that read a segment without being the plugin (v05ctl ls and
 * stat, tests that check the plugin's state from outside). Not installed.
 */
#ifndef V05_INTERNAL_VOCAB_H
#define V05_INTERNAL_VOCAB_H

#include "../../plugin/mechanics/vocab.h"

#endif
