# SPDX-License-Identifier: MIT
"""Stand-in of slime/utils/types.py's Sample at slime 624b824: the fields
v05.trainers.slime reads or writes, with slime's defaults."""
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list = ""
    tokens: list = field(default_factory=list)
    multimodal_inputs: dict | None = None
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict | None = None
    loss_mask: list | None = None
    rollout_log_probs: list | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    custom_rm_path: str | None = None
    session_id: str | None = None

    @dataclass
    class PrefixCacheInfo:
        cached_tokens: int = 0
        total_prompt_tokens: int = 0

    prefix_cache_info: PrefixCacheInfo = field(
        default_factory=PrefixCacheInfo)

    def get_reward_value(self, args) -> Any:
        # slime: the reward, or its reward_key entry when it is a dict
        return self.reward if not args.reward_key else \
            self.reward[args.reward_key]
