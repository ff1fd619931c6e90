/* SPDX-License-Identifier: MIT */
/* Sealed memfds (memfd.h). */
#include "memfd.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

static_assert((F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW) ==
		      V05_MEMFD_SEALS_REQUIRED, "seal bits");

int v05__memfd_sealed(const char *name, uint64_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), ret;

	if (fd < 0)
		return v05__fail(-errno, "memfd_create: %s", v05__errstr(errno));
	if (ftruncate(fd, (off_t)size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		ret = v05__fail(-errno, "size and seal a memfd: %s",
				v05__errstr(errno));
		close(fd);
		return ret;
	}
	return fd;
}

int v05__memfd_check(int fd, uint64_t size, const char *what)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	/* F_GET_SEALS answers only for shmem files; a tmpfs file that is
	 * not a memfd carries F_SEAL_SEAL alone and can take no other. */
	if (seals < 0)
		return v05__fail(-EBADMSG, "%s is not a memfd (%s)", what,
				 v05__errstr(errno));
	if ((seals & V05_MEMFD_SEALS_REQUIRED) != V05_MEMFD_SEALS_REQUIRED ||
	    (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
		return v05__fail(-EBADMSG, "%s carries seals %#x, not shrink, grow and seal alone",
				 what, (unsigned)seals);
	if (fstat(fd, &st))
		return v05__fail(-errno, "fstat %s: %s", what, v05__errstr(errno));
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
		return v05__fail(-EMSGSIZE, "%s has %lld bytes, not %llu", what,
				 (long long)st.st_size, (unsigned long long)size);
	return 0;
}
