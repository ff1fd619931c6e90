# SPDX-License-Identifier: MIT
"""A bounded map: what a long run remembers per prompt stays bounded."""

import collections

__all__ = ["LruMap"]


class LruMap:
    """A dict that keeps its `cap` most recently set keys: what a long run
    remembers per prompt stays bounded."""

    def __init__(self, cap: int):
        self.cap = cap
        self._d = collections.OrderedDict()

    def __setitem__(self, key, value):
        self._d[key] = value
        self._d.move_to_end(key)
        if len(self._d) > self.cap:
            self._d.popitem(last=False)

    def get(self, key, default=None):
        return self._d.get(key, default)

    def pop(self, key, default=None):
        return self._d.pop(key, default)

    def __len__(self):
        return len(self._d)
