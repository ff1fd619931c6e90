# SPDX-License-Identifier: MIT
"""A name verl configurations already use: VERL_USE_EXTERNAL_MODULES=v05.verl.
Importing it registers v05's estimator and reward managers, exactly as
importing v05.trainers.verl does, where the code lives."""

from .trainers.verl import (ROW_FIELDS, V05Uid, compute_v05_advantage,  # noqa: F401
                            legacy_reward_manager_cls, record_group,
                            register_with_verl, reward_loop_manager_cls,
                            rows_in_sample_order, score_to_reward,
                            segment_of, tag_rows)
from .trainers.verl import __all__  # noqa: F401
