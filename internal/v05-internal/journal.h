/* SPDX-License-Identifier: MIT */
/*
 * The journal: its file format and reader (plugin/journal/journal_format.h) and its
 * writer (plugin/journal/journal.h), for v05ctl journal, the journal tests and
 * faults, and the journal fuzzer and its seed generator. Not installed.
 */
#ifndef V05_INTERNAL_JOURNAL_H
#define V05_INTERNAL_JOURNAL_H

#include "../../plugin/journal/journal.h"
#include "../../plugin/journal/journal_format.h"

#endif
