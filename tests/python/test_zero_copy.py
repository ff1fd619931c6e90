# SPDX-License-Identifier: MIT
"""Zero copy, proven: numpy and torch.frombuffer views share the slot's
address (the plugin's own pointer into the segment) and see what the
plugin writes there afterwards."""
import ctypes
import mmap
import os

import numpy as np
import torch

import v05
from v05.core import _lib


def finish(p, w, first, reward):
    """Push the 4 rewards of `first` (the prompt's submit decision)."""
    uid = first.uid
    for s in range(4):
        w.push(first, s, reward)
    while True:
        assert p.wait_blocking(5.0)
        for d in p.poll():
            if d.uid == uid and d.kind == "final":
                return d


def test_numpy_and_torch_share_the_slot(segname):
    with v05.Plugin.create(segname, max_prompts=1, mode="v05-fixed") as p, \
            v05.RewardWriter.attach(segname) as w:
        (first,) = p.submit([("first", 0.0)])
        d1 = finish(p, w, first, 1.0)
        g = p.group(d1)
        raw = _lib.Group_()
        assert _lib.lib.v05_group(p._handle(), d1.slot, ctypes.byref(raw)) == 0
        c_adv = ctypes.addressof(raw.advantages.contents)
        c_rew = ctypes.addressof(raw.rewards.contents)
        t_rew, t_adv = g.torch()
        # One address for the plugin's pointer, numpy and torch.
        assert g.advantages.ctypes.data == c_adv == t_adv.data_ptr()
        assert g.rewards.ctypes.data == c_rew == t_rew.data_ptr()
        before = g.advantages.copy()
        # Release, reuse the (only) slot for another group: the same views
        # now show what the plugin wrote for it.
        p.release(d1)
        (first,) = p.submit([("second", 0.6)])
        d2 = finish(p, w, first, -1.0)
        assert d2.slot == d1.slot
        fresh = p.group(d2)
        assert not np.array_equal(before, fresh.advantages)
        assert np.array_equal(g.advantages, fresh.advantages)
        assert torch.equal(t_adv, torch.from_numpy(fresh.advantages.copy()))
        assert np.all(g.rewards == -1.0)
        # And another process mapping the segment file reads the same bytes.
        roff, aoff = p.slot_offsets(d2)
        fd = os.open(f"/dev/shm/v05-{segname}", os.O_RDONLY)
        try:
            with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
                other = np.frombuffer(m, dtype=np.float32, count=4, offset=aoff).copy()
        finally:
            os.close(fd)
        assert np.array_equal(other, fresh.advantages)
        del g, fresh, t_rew, t_adv
        p.release(d2)
