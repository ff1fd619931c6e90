# SPDX-License-Identifier: MIT
"""Stand-in of ROLL's DataProto (roll/distributed/scheduler/protocol.py at
ROLL 8eb27cc): rows of tensors (`batch`, a TensorDict upstream, a dict
here), of numpy arrays (`non_tensor_batch`) and a `meta_info` dict; the
constructors and `union` v05.trainers.roll and the tests use, with
upstream's refusal of a key both sides hold with different values."""
import numpy as np
import torch


class DataProto:
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = dict(batch or {})
        self.non_tensor_batch = dict(non_tensor_batch or {})
        self.meta_info = dict(meta_info or {})

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None):
        return cls(tensors, non_tensors, meta_info)

    @classmethod
    def from_single_dict(cls, data, meta_info=None):
        t = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        n = {k: v for k, v in data.items() if isinstance(v, np.ndarray)}
        return cls(t, n, meta_info)

    def __len__(self):
        for v in (*self.batch.values(), *self.non_tensor_batch.values()):
            return len(v)
        return 0

    def union(self, other):
        for mine, theirs in ((self.batch, other.batch),
                             (self.non_tensor_batch, other.non_tensor_batch)):
            for k, v in theirs.items():
                if k in mine and not np.array_equal(np.asarray(mine[k]),
                                                    np.asarray(v)):
                    raise AssertionError(f"{k} differs in the union")
                mine[k] = v
        for k, v in other.meta_info.items():
            if k in self.meta_info and self.meta_info[k] != v:
                raise AssertionError(f"meta_info {k} differs in the union")
            self.meta_info[k] = v
        return self
