/* SPDX-License-Identifier: MIT */
/*
 * v05: the V0.5 method (value-model prior fused with sampled rewards, OSLA
 * stopping) as a plugin for LLM rollout engines. Umbrella header.
 */
#ifndef V05_H
#define V05_H

#include "v05/common.h"
#include "v05/stats.h"
#include "v05/shm.h"
#include "v05/plugin.h"
#include "v05/observer.h"
#include "v05/rules.h"

#endif /* V05_H */
