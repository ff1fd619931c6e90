# SPDX-License-Identifier: MIT
"""A name verl configurations already use: VERL_USE_EXTERNAL_MODULES=v05.verl.
Importing it registers v05's estimator and reward managers, exactly as
importing v05.trainers.verl does, where the code lives."""

from .trainers.verl import *  # noqa: F401,F403 (the same names)
from .trainers.verl import __all__  # noqa: F401
