# SPDX-License-Identifier: MIT
"""Trainer integrations: verl (estimator, reward managers, the agent-loop
rollout component), TRL's GRPO trainer, and the coordination of several
engines (distributed.py). They import the core and the engine drivers."""
