# SPDX-License-Identifier: MIT
"""Where a group's requests go (docs/SERVERS.md, "Affinity and
priority"): one data-parallel rank inside a server, chosen from the uid
alone, so that every front end, every process and every restart agrees
without sharing a table; between servers, the routing headers the client
sends (v05.servers.client.ROUTING_HEADERS) do the same in the router."""

import hashlib

__all__ = ["dp_rank"]


def dp_rank(uid: str, size: int) -> int:
    """The rank of `size` that every request of group `uid` goes to: a
    hash of the uid (blake2b, not Python's hash(), which is salted per
    process), so its samples, first wave and second, find the prompt's
    prefix in that rank's cache."""
    if size < 1:
        raise ValueError(f"size must be at least 1, not {size}")
    h = hashlib.blake2b(uid.encode("utf-8", "surrogateescape"),
                        digest_size=8).digest()
    return int.from_bytes(h, "little") % size
