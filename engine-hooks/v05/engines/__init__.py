# SPDX-License-Identifier: MIT
"""Engine drivers: the shared driver (driver.py) that turns the plugin's
decisions into single-sample generate calls, the streamed fill on top of
it (fill.py: a step's batch of informative groups from a prompt source),
and one adapter per engine (vllm.py, sglang.py). They import the core
only."""
