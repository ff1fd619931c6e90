/* SPDX-License-Identifier: MIT */
/*
 * Sealed memfds: memory the owner hands to a producer it does not trust
 * (a lane the broker grants, the brokered producers' doorbell). The owner
 * creates each one, sizes it and seals it with F_SEAL_SHRINK, F_SEAL_GROW
 * and F_SEAL_SEAL before anyone else holds it: from then on no process,
 * the owner included, can change its size (ftruncate, a write past its
 * end, fallocate growing it), nor add a seal (F_SEAL_FUTURE_WRITE would
 * stop a later writable mapping). A holder can still punch a hole
 * (fallocate PUNCH_HOLE): the pages read as zeros again, refilled on the
 * next touch from the kernel's internal shm mount, which has no size
 * limit, so it is never a SIGBUS; zeros in a lane are records the owner
 * rejects. No name in /dev/shm is involved.
 */
#ifndef V05_SHM_MEMFD_H
#define V05_SHM_MEMFD_H

#include <stdint.h>

/* The seals every memfd handed out carries (and the write seals it must
 * not: a writable shared mapping needs neither). */
#define V05_MEMFD_SEALS_REQUIRED 0x7u /* F_SEAL_SEAL | SHRINK | GROW */

/* A new sealed memfd of size bytes (close-on-exec), named for /proc.
 * Returns the descriptor or a negative errno. */
int v05__memfd_sealed(const char *name, uint64_t size);

/* Is fd a memfd of exactly size bytes carrying the required seals and no
 * write seal? 0, or a negative errno with a message naming what. */
int v05__memfd_check(int fd, uint64_t size, const char *what);

#endif
