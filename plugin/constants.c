/* SPDX-License-Identifier: MIT */
/* The public headers' integer constants by name, so that bindings take
 * them from the library they load instead of copying them by hand. */
#include <errno.h>
#include <string.h>

#include "../shm/error.h"
#include "../shm/layout.h"
#include "v05.h"

#define C(x) { #x, (int64_t)(x) }

static const struct {
	const char *name;
	int64_t value;
} constants[] = {
	C(V05_DECISION_SAMPLE), C(V05_DECISION_FINAL), C(V05_DECISION_DROP),
	C(V05_DECISION_BARRIER), C(V05_DECISION_REJECT), C(V05_DECISION_ABORT),
	C(V05_DECISION_CANCEL), C(V05_PROMPT_COLLECTING), C(V05_PROMPT_HELD),
	C(V05_PROMPT_FINAL),
	C(V05_DF_PADDED), C(V05_DF_HALTED), C(V05_DF_RECOVERED),
	C(V05_DF_NONFINITE), C(V05_DF_RANGE), C(V05_SUPPORT_GROUPS),
	C(V05_CONFIG_WAIT_THREAD), C(V05_CONFIG_EXTERNAL_HALT),
	C(V05_CONFIG_PRODUCER_BROKER), C(V05_CONFIG_BROKER_OVERFLOW_IDS),
	C(V05_CONFIG_ABORT_RECORDS),
	C(V05_BROKER_ALLOW_MAX),
	C(V05_CONFIG_INIT_PAPER), C(V05_CONFIG_SIZE_MIN),
	C(V05_CLOSE_UNLINK), C(V05_CLOSE_KEEP_READABLE),
	C(V05_ATTACH_ANY_UID),
	C(V05_PRODUCER_DEFER), C(V05_PRODUCER_ANY_UID),
	C(V05_UID_MAX_BYTES), C(V05_JOURNAL_PATH_MAX), C(V05_NAME_MAX),
	C(V05_COUNTER_SLOTS), C(V05_K_LIMIT),
	C(V05_JOURNAL_SYNC_NONE), C(V05_JOURNAL_SYNC_BATCH),
	C(V05_MODE_COUNT),
	/* The segment ABI this library speaks (docs/SHM.md, "Telling
	 * segment ABIs apart"). */
	C(V05_SHM_ABI),
};

V05_API int v05_constant(const char *name, int64_t *value)
{
	if (!name || !value)
		return v05__fail(-EINVAL, "constant: NULL argument");
	for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
		if (!strcmp(constants[i].name, name)) {
			*value = constants[i].value;
			return 0;
		}
	}
	return v05__fail(-ENOENT, "constant: no constant %.64s", name);
}
