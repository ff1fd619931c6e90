# SPDX-License-Identifier: MIT
"""A tiny causal language model made on this machine, and a verifiable task
on it, for running a real engine without a model hub (tests, the demo on
vLLM, the engine benchmark).

The model: a 2-layer Llama with random weights (vocabulary 128, width 64,
2 heads of 32: vLLM's CPU attention has no kernel for heads under 32),
float32, saved with ``transformers``, with a character tokenizer beside it
(``make_tokenizer``: one token per character, the ids the model's
vocabulary has, and a plain chat template) so that a trainer that loads a
tokenizer from the model's directory (verl) can use it; the engines run
with ``skip_tokenizer_init=True`` and token-id prompts. Its output head is
scaled up so that next-token distributions are peaked and differ between
prompts.

The task: a prompt is ``[BOS, a, b, c]``; a sample succeeds (+1) when its
first generated token has the parity of ``a + b + c``, else -1. The
reward is a function of the generated tokens alone, and a prompt's true
success probability is the model's next-token probability mass on that
residue class, computed exactly here (``success_probs``) to score the
baseline's error and to make noisy priors.

Needs torch and transformers (the engine environment has both); importing
``v05`` does not import this module.
"""

import json
import os
from typing import List, Sequence

import numpy as np

__all__ = ["VOCAB", "BOS", "make_model", "make_tokenizer", "CHARS",
           "CHAT_TEMPLATE", "make_prompts", "reward",
           "success_probs", "noisy_priors", "vllm_engine", "sglang_engine",
           "sglang_shutdown"]

VOCAB = 128
BOS, EOS = 1, 2
_FIRST_TOKEN = 3          # prompt tokens a, b, c are drawn from 3..VOCAB-1
_CLASSES = 2
_HEAD_SCALE = 20.0        # output-head gain: peaked, prompt-dependent
_META = "v05-tiny.json"
# The tokenizer's characters: token id i + _FIRST_TOKEN is CHARS[i] (ids 0,
# 1 and 2 are the pad, BOS and EOS tokens): ASCII's 95 printable ones
# (space included), the newline and 29 Latin-1 letters.
CHARS = "".join(chr(c) for c in [*range(0x20, 0x7F), 0x0A,
                                 *range(0xC0, 0xDD)])
assert len(CHARS) == VOCAB - _FIRST_TOKEN
# A chat template that verl's agent loop applies: each message's content on
# its own line, then "A:" when a generation is asked for.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}A:{% endif %}")


def make_model(path: str, seed: int = 0, max_positions: int = 256) -> str:
    """Write the model to `path` (a directory) unless it is there already
    with the same seed and context; returns `path`. max_positions: the
    longest prompt + output it takes (the engine benchmark's long tail
    needs more than the default)."""
    meta = {"seed": seed, "vocab": VOCAB, "head_scale": _HEAD_SCALE,
            "version": 1, "tokenizer": 1}
    if max_positions != 256:  # the default's meta as it always was
        meta["max_positions"] = max_positions
    mfile = os.path.join(path, _META)
    try:
        with open(mfile) as f:
            if json.load(f) == meta:
                return path
    except (OSError, ValueError):
        pass
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2,
                      max_position_embeddings=max_positions,
                      bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(_HEAD_SCALE)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    # No generation defaults: the caller's SamplingParams are the whole
    # sampling configuration (vLLM would otherwise merge them in).
    gc = os.path.join(path, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    make_tokenizer(path)
    with open(mfile, "w") as f:
        json.dump(meta, f)
    return path


def make_tokenizer(path: str):
    """Write the model's tokenizer to `path` and return it (a
    ``PreTrainedTokenizerFast``): one token per character of CHARS (id
    ``3 + CHARS.index(c)``), "<pad>" 0, "<s>" 1, "</s>" 2, anything else the
    pad token; no merges, so any text of CHARS round-trips; CHAT_TEMPLATE."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": BOS, "</s>": EOS}
    vocab.update({c: _FIRST_TOKEN + i for i, c in enumerate(CHARS)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<pad>"))
    tok.decoder = decoders.Fuse()  # characters joined as they are
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    os.makedirs(path, exist_ok=True)
    fast.save_pretrained(path)
    return fast


def make_prompts(n: int, seed: int = 0) -> List[List[int]]:
    """n distinct prompts [BOS, a, b, c]."""
    rng = np.random.default_rng(seed)
    seen, out = set(), []
    while len(out) < n:
        t = tuple(int(x) for x in rng.integers(_FIRST_TOKEN, VOCAB, size=3))
        if t not in seen:
            seen.add(t)
            out.append([BOS, *t])
    return out


def _target(prompt: Sequence[int]) -> int:
    return sum(prompt[1:4]) % _CLASSES


def reward(prompt: Sequence[int], output_ids: Sequence[int]) -> float:
    """+1 if the first generated token is in the prompt's residue class,
    else -1 (also for an empty output)."""
    if len(output_ids) == 0:
        return -1.0
    return 1.0 if int(output_ids[0]) % _CLASSES == _target(prompt) else -1.0


def success_probs(path: str, prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """Each prompt's exact success probability at temperature 1: the
    model's next-token mass on the prompt's residue class."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model.eval()
    ids = torch.tensor([list(p) for p in prompts], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -1, :].double()
    probs = torch.softmax(logits, dim=-1).numpy()
    cls = np.arange(VOCAB) % _CLASSES
    return np.array([probs[i, cls == _target(p)].sum()
                     for i, p in enumerate(prompts)])


def noisy_priors(p: np.ndarray, noise: float, hallucination: float,
                 seed: int = 0) -> np.ndarray:
    """A value model's priors V on [-1, 1]: the truth 2p - 1 plus Gaussian
    noise (std `noise`), and a share `hallucination` drawn at random."""
    rng = np.random.default_rng(seed)
    v = 2.0 * p - 1.0 + rng.normal(0.0, noise, size=len(p))
    wild = rng.random(len(p)) < hallucination
    v[wild] = rng.uniform(-1.0, 1.0, size=int(wild.sum()))
    return np.clip(v, -1.0, 1.0)


def vllm_engine(path: str, *, max_num_seqs: int = 256, kv_cache_gib: int = 1,
                seed: int = 0, tensor_parallel_size: int = 1,
                max_model_len: int = 64, **engine_args):
    """An AsyncLLM (vLLM's V1 front end) on the model at `path`: float32,
    eager, token-id prompts, a small KV cache. Call it inside the event
    loop that will drive the engine for its whole life. With
    tensor_parallel_size > 1, one worker process per rank (vLLM's "mp"
    executor, gloo between them on the CPU). engine_args: more of vLLM's
    AsyncEngineArgs (e.g. logits_processors)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(model=path, skip_tokenizer_init=True,
                           dtype="float32", enforce_eager=True,
                           max_model_len=max_model_len,
                           max_num_seqs=max_num_seqs,
                           seed=seed, gpu_memory_utilization=0.08,
                           generation_config="vllm", disable_log_stats=True,
                           tensor_parallel_size=tensor_parallel_size,
                           **engine_args)
    return AsyncLLM.from_engine_args(args)


def sglang_engine(path: str, *, max_running_requests: int = 256,
                  max_total_tokens: int = 32768, seed: int = 0,
                  tp_size: int = 1, context_length: int = 64, **kwargs):
    """An sglang Engine on the model at `path`, on sglang's CPU engine:
    float32, token-id prompts, a KV cache of `max_total_tokens` tokens (the
    default sizes it from free memory: 15 GB here, 36 s to allocate). Needs
    the sglang environment's python (scripts/setup-sglang --print), which
    puts the CUDA driver stub on LD_LIBRARY_PATH. Create it inside the
    event loop that will drive it: its TokenizerManager binds that loop."""
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import sglang

    env = {}
    if tp_size > 1:
        # One core set per rank, as sglang's CPU engine asks (it binds the
        # ranks' threads only with its own CPU kernels, which PyPI's
        # sglang-kernel lacks: on this build the list is only checked).
        ncpu = os.cpu_count() or 1
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(
            str(r % ncpu) for r in range(tp_size))
        # PyPI's torch brings NCCL (libtorch_cuda needs it), and sglang's
        # tensor-parallel group then opens a NCCL communicator on the CPU
        # device, which fails. A library name that does not load takes
        # sglang's own way for machines without NCCL: the ranks talk over
        # gloo only.
        env["SGLANG_NCCL_SO_PATH"] = "libnccl-absent-on-cpu.so.2"
    saved = {k: os.environ.get(k) for k in env}
    for k, v in env.items():  # the caller's own settings win
        if saved[k] is None:
            os.environ[k] = v
    try:  # the engine's processes start here and inherit the environment
        return sglang.Engine(model_path=path, device="cpu", dtype="float32",
                             skip_tokenizer_init=True,
                             context_length=context_length,
                             max_total_tokens=max_total_tokens,
                             max_running_requests=max_running_requests,
                             random_seed=seed, tp_size=tp_size,
                             log_level=kwargs.pop("log_level", "warning"),
                             **kwargs)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


def sglang_shutdown(engine) -> None:
    """`engine.shutdown()` with SIGQUIT ignored while it runs. sglang's
    child processes tell their parent of a failure with SIGQUIT, and a
    tensor-parallel rank whose peer is killed first by the shutdown does
    so while the engine is going down (seen in CI: the test process killed
    by SIGQUIT after every test had passed). The shutdown has reaped every
    child when it returns, so none is left to send one after. Python sets
    signal handlers only from the main thread; elsewhere this is a plain
    shutdown."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        engine.shutdown()
        return
    old = signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    try:
        engine.shutdown()
    finally:
        signal.signal(signal.SIGQUIT, old)
