/* SPDX-License-Identifier: MIT */
#include "shm/table.h"

#include <errno.h>
#include <string.h>

void v05__table_init(struct v05_table *t, void *mem, uint32_t capacity)
{
	t->e = mem;
	t->mask = capacity - 1;
	t->count = 0;
	for (uint32_t i = 0; i < capacity; i++)
		t->count += t->e[i].key != 0;
}

int v05__table_insert(struct v05_table *t, uint64_t key,
		      struct v05_prompt **out)
{
	uint32_t i;

	if (key == 0)
		return -EINVAL;
	for (i = v05__table_home(t, key); t->e[i].key; i = (i + 1) & t->mask) {
		if (t->e[i].key == key) {
			*out = &t->e[i];
			return -EEXIST;
		}
	}
	if ((uint64_t)(t->count + 1) * 2 > (uint64_t)t->mask + 1)
		return -ENOSPC;
	memset(&t->e[i], 0, sizeof(t->e[i]));
	t->e[i].key = key;
	t->count++;
	*out = &t->e[i];
	return 0;
}

void v05__table_delete(struct v05_table *t, struct v05_prompt *e)
{
	uint32_t hole = (uint32_t)(e - t->e);
	uint32_t j = hole;

	for (;;) {
		uint32_t home;

		j = (j + 1) & t->mask;
		if (t->e[j].key == 0)
			break;
		home = v05__table_home(t, t->e[j].key);
		/* Entry j may fill the hole iff the hole lies on its probe
		 * path, i.e. no farther from j than its home is. */
		if (((j - home) & t->mask) >= ((j - hole) & t->mask)) {
			t->e[hole] = t->e[j];
			hole = j;
		}
	}
	memset(&t->e[hole], 0, sizeof(t->e[hole]));
	t->count--;
}
