# SPDX-License-Identifier: MIT
"""v05: the V0.5 method (value-model prior fused with sampled rewards, OSLA
stopping) inside an LLM rollout engine. Pure Python over libv05 (ctypes).

    plugin = v05.Plugin.create("run1", max_prompts=1024)
    for d in plugin.submit([(uid, v05.prior_from_p(p)) for uid, p in batch]):
        ...                       # generate d.samples for d.uid
    writer = v05.RewardWriter.attach("run1")   # in each reward worker
    writer.push(uid, sample, v05.reward_from_binary(correct), gen=d.gen)
    for d in plugin.poll(): ...   # "sample", "final", "drop"
    g = plugin.group(d)           # g.rewards, g.advantages: views, no copy
    plugin.release(d)
"""

from .core._lib import V05Error, lib
from .core.decision import Decision, SubmitError, key_of
from .core.eb_state import EbState
from .core.group import Group
from .core.plugin import Plugin
from .core.reader import Reader
from .core.segments import reclaim, unlink
from .core.stats import (eb_first_wave, eb_fit, estimate, knapsack_plan,
                         prior_from_p, reward_from_binary)
from .core.writer import RewardWriter

__all__ = ["__version__", "Plugin", "RewardWriter", "Reader", "Decision", "Group",
           "V05Error", "SubmitError", "prior_from_p", "reward_from_binary",
           "estimate", "eb_fit", "eb_first_wave", "knapsack_plan", "EbState",
           "key_of",
           "version", "unlink",
           "reclaim"]


def version() -> str:
    """The loaded libv05's version (v05_version())."""
    return lib.v05_version().decode()


try:
    # An installed package: generated from meson.build's project version,
    # the one the wheel's metadata and its libv05 carry too.
    from ._version import version as __version__
except ImportError:
    # A source checkout (engine-hooks/ on the path): the library's, which
    # comes from the same meson.build.
    __version__ = version()
