# SPDX-License-Identifier: MIT
"""A tokenizer and a model made here (no hub): byte-level BPE without merges
(one token per byte, so any text round-trips) and a random-init tiny Llama."""
import os


def tokenizer(path):
    """A PreTrainedTokenizerFast saved in `path` (and returned)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<eos>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                   eos_token="<eos>")
    os.makedirs(path, exist_ok=True)
    fast.save_pretrained(path)
    return fast


def llama(path, vocab_size, seed=0, heads=4):
    """A 2-layer Llama with random weights saved in `path` (and returned).
    heads=2 makes heads of 32 (width 64), which vLLM's CPU attention needs."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    wide = heads == 2
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=64 if wide else 32,
                      intermediate_size=128 if wide else 64, num_hidden_layers=2,
                      num_attention_heads=heads, num_key_value_heads=2,
                      max_position_embeddings=128, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    return model


CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}A:{% endif %}")


def model_dir(path, seed=0, heads=4):
    """A directory verl's HFModelConfig loads: the tokenizer above (with a
    plain chat template, which verl's agent loops apply) and the Llama."""
    tok = tokenizer(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    llama(path, len(tok), seed=seed, heads=heads)
    return tok


class TinyServer:
    """verl's rollout server interface: what ``LLMServerClient.generate``
    awaits on the server actor the load balancer picks,
    ``generate(request_id, prompt_ids=, sampling_params=, image_data=,
    video_data=, **kw) -> TokenOutput``. verl's own implementation is
    ``vLLMHttpServer`` (it needs vLLM in verl's environment); this one
    samples from the tiny Llama above in this process (run it as a Ray
    actor). ``fail_after`` makes every call after that many raise."""

    def __init__(self, path, max_tokens, seed=0):
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.eos = self.model.config.eos_token_id
        self.max_tokens = max_tokens
        self.seed = seed
        self.calls = 0
        self.fail_after = None

    def set_fail_after(self, n):
        self.fail_after = n

    def num_calls(self):
        return self.calls

    def _next_call(self, who):
        """Count a request; past fail_after, refuse it (an injected
        failure). Shared with EngineServer."""
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError(f"{who}: request {self.calls} refused "
                               "(injected failure)")

    async def generate(self, request_id, *, prompt_ids, sampling_params,
                       image_data=None, video_data=None, **kwargs):
        import torch
        from verl.workers.rollout.replica import TokenOutput

        self._next_call("tiny server")
        g = torch.Generator().manual_seed(self.seed * 100003 + self.calls)
        temp = float(sampling_params.get("temperature", 1.0)) or 1.0
        ids = torch.tensor([list(prompt_ids)])
        out, logps = [], []
        with torch.no_grad():
            for _ in range(self.max_tokens):
                logits = self.model(ids).logits[0, -1].float() / temp
                probs = torch.softmax(logits, -1)
                tok = int(torch.multinomial(probs, 1, generator=g))
                out.append(tok)
                logps.append(float(torch.log(probs[tok])))
                if tok == self.eos:
                    break
                ids = torch.cat([ids, torch.tensor([[tok]])], 1)
        return TokenOutput(token_ids=out, log_probs=logps,
                           stop_reason="completed")


class HangServer:
    """verl's rollout server interface (as TinyServer) whose requests never
    finish on their own: each waits until its call is cancelled (counted),
    but call number `fail_at`, which fails at once (an injected failure):
    what a server sees of a batch v05 gives up on."""

    def __init__(self, fail_at):
        self.fail_at, self.calls, self.cancelled = fail_at, 0, 0

    def num_calls(self):
        return self.calls

    def num_cancelled(self):
        return self.cancelled

    async def generate(self, request_id, *, prompt_ids, sampling_params,
                       image_data=None, video_data=None, **kwargs):
        import asyncio

        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError(f"hang server: request {self.calls} refused "
                               "(injected failure)")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


BRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_bridge.py")


class EngineServer:
    """verl's rollout server interface (as TinyServer) backed by a real vLLM
    ``AsyncLLM`` running in the engine environment (build-venv/engine), in
    a child process reached over a pipe (engine_bridge.py): vLLM's CPU
    build cannot be installed next to verl's torch. A request cancelled
    here is aborted in the engine."""

    def __init__(self, python, path, max_tokens, seed=0):
        import subprocess
        import threading

        env = dict(os.environ, HF_HUB_OFFLINE="1")
        env.pop("PYTHONPATH", None)  # the engine environment's own packages
        self.proc = subprocess.Popen([python, BRIDGE, path], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        first = self.proc.stdout.readline()  # the engine is up (or died)
        if not first:
            raise RuntimeError(f"engine bridge exited ({self.proc.wait()}); "
                               "its stderr is in the Ray worker log")
        self.max_tokens, self.seed = max_tokens, seed
        self.calls, self.fail_after = 0, None
        self.pending, self.lock = {}, threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        import json

        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.lock:
                waiter = self.pending.pop(msg["id"], None)
            if waiter is not None:
                fut, loop = waiter
                loop.call_soon_threadsafe(
                    lambda f=fut, m=msg: f.done() or f.set_result(m))

    def _send(self, obj):
        import json

        with self.lock:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()

    set_fail_after = TinyServer.set_fail_after
    num_calls = TinyServer.num_calls
    _next_call = TinyServer._next_call

    def close(self):
        self.proc.stdin.close()
        return self.proc.wait(120)

    async def generate(self, request_id, *, prompt_ids, sampling_params,
                       image_data=None, video_data=None, **kwargs):
        import asyncio
        from verl.workers.rollout.replica import TokenOutput

        self._next_call("engine server")
        rid = f"r{self.calls}"
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self.lock:
            self.pending[rid] = (fut, loop)
        self._send({"id": rid, "prompt_ids": list(prompt_ids),
                    "max_tokens": self.max_tokens,
                    "temperature": float(sampling_params.get("temperature", 1.0)),
                    "seed": self.seed * 100003 + self.calls})
        try:
            msg = await fut
        except asyncio.CancelledError:
            self._send({"abort": rid})
            raise
        if "error" in msg:
            raise RuntimeError(f"engine: {msg['error']}")
        return TokenOutput(token_ids=msg["token_ids"], log_probs=msg["log_probs"],
                           stop_reason="completed")
