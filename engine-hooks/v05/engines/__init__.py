# SPDX-License-Identifier: MIT
"""Engine drivers: the shared driver (driver.py) that turns the plugin's
decisions into single-sample generate calls, and one adapter per engine
(vllm.py, sglang.py). They import the core only."""
