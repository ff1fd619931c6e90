# SPDX-License-Identifier: MIT
"""Masked padding rows for verl's legacy trainer: a batch padded to a
multiple of what its data-parallel workers can split."""

import uuid

import numpy as np

from .rows import ROW_FIELDS

__all__ = ["pad_rows", "PAD_FIELD"]

# non_tensor_batch field: True on the padding rows the manager appends.
PAD_FIELD = "v05_padding"


def pad_rows(data, multiple: int, pad_token_id: int = 0):
    """Append rows to `data` (a DataProto) until len(data) % multiple == 0.

    A padding row is a one-token prompt and a one-token response of
    `pad_token_id` (attended, so no model sees an empty sequence), with
    response_mask all zero (masked out of the loss, the entropy and the KL
    terms), zero rewards and log-probs, one fresh ``pad<hex>`` uid for all
    padding rows (not a v05 uid: v05_k 0, so the estimator gives them 0),
    and ``v05_padding`` True. Non-tensor fields are copied from row 0.
    Returns the padded DataProto (data itself when nothing was needed)."""
    import torch
    from verl import DataProto

    n = len(data)
    if n == 0:
        raise ValueError("v05: no rows to pad")
    nt = data.non_tensor_batch
    if PAD_FIELD not in nt:
        nt[PAD_FIELD] = np.zeros(n, dtype=bool)
    extra = (-n) % multiple
    if extra == 0:
        return data
    tmpl = data.batch[:1]
    pad = {}
    plen = tmpl["prompts"].shape[-1]
    for key, t in tmpl.items():
        if key == "position_ids":
            continue
        if key in ("prompts", "responses", "input_ids"):
            pad[key] = torch.full((extra,) + tuple(t.shape[1:]), pad_token_id,
                                  dtype=t.dtype)
        else:  # masks, scores, log-probs, teacher fields: zero
            pad[key] = torch.zeros((extra,) + tuple(t.shape[1:]), dtype=t.dtype)
    attn = pad["attention_mask"]
    attn[:, plen - 1] = 1  # the prompt's last token (prompts are left-padded)
    attn[:, plen] = 1      # the response's first token (right-padded)
    if "position_ids" in tmpl.keys():
        t = tmpl["position_ids"]
        pos = torch.zeros((extra,) + tuple(t.shape[1:]), dtype=t.dtype)
        pos[..., plen] = 1  # positions 0, 1 (rope's extra dims alike)
        pad["position_ids"] = pos
    pad_uid = f"pad{uuid.uuid4().hex}"
    pad_nt = {}
    for key, v in nt.items():
        if key == "uid":
            col = np.array([pad_uid] * extra, dtype=object)
        elif key in ROW_FIELDS or key == "v05_gen":
            col = np.zeros(extra, dtype=v.dtype)
        elif key == PAD_FIELD:
            col = np.ones(extra, dtype=bool)
        else:
            col = np.empty(extra, dtype=v.dtype)
            for i in range(extra):
                col[i] = v[0]
        pad_nt[key] = col
    padding = DataProto.from_dict(tensors=pad, non_tensors=pad_nt,
                                  meta_info=dict(data.meta_info))
    out = DataProto.concat([data, padding])
    out.meta_info = data.meta_info
    return out
