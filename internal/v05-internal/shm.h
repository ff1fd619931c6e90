/* SPDX-License-Identifier: MIT */
/*
 * The segment and its transport (shm/), for the in-tree programs that use
 * the library's internals: v05ctl, the tests, the benchmarks and the fuzz
 * targets. They see shm/ only through this header (their include path has
 * internal/ and include/, not the source root); the library's own layers
 * include shm/ directly. Not installed.
 */
#ifndef V05_INTERNAL_SHM_H
#define V05_INTERNAL_SHM_H

#include "../../shm/arena.h"
#include "../../shm/atomics.h"
#include "../../shm/broker.h"
#include "../../shm/completion.h"
#include "../../shm/doorbell.h"
#include "../../shm/error.h"
#include "../../shm/lanes.h"
#include "../../shm/memfd.h"
#include "../../shm/layout.h"
#include "../../shm/proc.h"
#include "../../shm/ring.h"
#include "../../shm/segment.h"
#include "../../shm/table.h"
#include "../../shm/waiter.h"

#endif
