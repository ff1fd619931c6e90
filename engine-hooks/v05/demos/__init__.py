# SPDX-License-Identifier: MIT
"""Demos, the simulated engine and the tiny test model: what scripts/demo,
the tests and the benchmarks run. A library user never imports these."""
