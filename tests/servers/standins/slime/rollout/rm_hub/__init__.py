# SPDX-License-Identifier: MIT
"""Stand-in of slime/rollout/rm_hub/__init__.py's async_rm at slime
624b824: the sample's custom_rm_path, else --custom-rm-path, loaded by
path and awaited as `fn(args, sample)`. slime's built-in rule rewards
(--rm-type) are not here: the tests use custom reward functions."""
from slime.utils.misc import load_function


async def async_rm(args, sample, **kwargs):
    path = sample.custom_rm_path or args.custom_rm_path
    if path is None:
        raise NotImplementedError("the stand-in has no --rm-type rewards")
    return await load_function(path)(args, sample, **kwargs)
