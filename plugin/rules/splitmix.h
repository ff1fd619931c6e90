/* SPDX-License-Identifier: MIT */
/* splitmix64 (Steele, Lea, Flood 2014): a seeded stream of 64-bit values,
 * for the support buffer's sampling and the simulator's draws. */
#ifndef V05_PLUGIN_SPLITMIX_H
#define V05_PLUGIN_SPLITMIX_H

#include <stdint.h>

static inline uint64_t v05__splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif
