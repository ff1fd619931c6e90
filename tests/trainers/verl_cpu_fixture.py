# SPDX-License-Identifier: MIT
"""TEST FIXTURE: what verl 0.9.1 needs to run ``main_ppo`` on a machine
without a GPU. This is verl's limitation, not v05's; nothing here is part of
v05. Drop it (and the overrides in ``CPU_OVERRIDES``) when verl runs on a
CPU by itself.

Loaded in every verl process (the driver, the TaskRunner and every Ray
actor) through verl's own hook, ``VERL_USE_EXTERNAL_MODULES=
verl_cpu_fixture`` (verl/__init__.py ~49 imports the named modules at the
end of ``import verl``), with this directory on ``PYTHONPATH``. Each piece
names the verl 0.9.1 file and line it works around:

1. A "cpu" platform in verl's platform registry, chosen with
   ``VERL_PLATFORM=cpu``: without it ``plugin/platform/platform_manager.py``
   ~114 falls back to "nvidia" and ``utils/device.py`` ~160
   (``auto_set_device``) turns ``trainer.device=cpu`` into cuda.
2. ``utils/distributed.py`` ~89 builds the process-group backend
   "cpu:gloo,{device}:{backend}", which is "cpu:gloo,cpu:gloo" here and
   torch refuses: the module attribute is replaced by one that asks for
   plain gloo (``workers/engine_workers.py`` ~89 imports it by name after
   this module ran).
3. The FSDP training engines are registered for cuda and npu only
   (``workers/engine/fsdp/transformer_impl.py`` ~1143 and ~1594): they are
   registered for "cpu" too (same classes).
4. There is no rollout backend without vLLM, sglang or TensorRT-LLM in
   verl's environment (``workers/rollout/replica.py`` ~388 registers those
   three; ``workers/rollout/base.py`` ~89 maps the same names to the
   in-worker adapters; the old ``workers/rollout/hf_rollout.py`` is in no
   registry): "hf_cpu" is registered in both, an HF-transformers server
   (``HFServer``, a Ray actor with the interface verl's
   ``LLMServerClient`` awaits) and the adapter in the trainer's worker that
   hands it the actor's weights after each update.
5. ``CPU_OVERRIDES``: the configuration a CPU run needs (each with the verl
   file that needs it): Ray is told of one (fake) GPU per trainer process,
   since ``single_controller/ray/base.py`` ~210/~240 asks Ray for GPUs and
   refuses to start with 0; SDPA attention (``workers/config/model.py``
   ~185 defaults to FlashAttention 2); FSDP2 (FSDP1 wants its module states
   on a GPU, ``sync_module_states``); rollout tensor parallel 1
   (``workers/engine_workers.py`` ~655, default 2); two TransferQueue storage
   units (the default 8 of one CPU each never all schedule on 2-4 CPUs and
   ``tq.init`` waits for ever without a message).
"""

import asyncio
import contextlib
import logging
import os
import types
from typing import Any, Dict, Optional

log = logging.getLogger(__name__)

ROLLOUT_NAME = "hf_cpu"

# The overrides main_ppo needs on a CPU (hydra syntax), beside the
# platform chosen by VERL_PLATFORM=cpu and this module loaded.
CPU_OVERRIDES = [
    "trainer.device=cpu",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    "critic.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.free_cache_engine=false",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
]

# The environment every verl process needs (the driver's; Ray workers
# inherit it from the raylet when the test starts the cluster).
ENV = {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cpu"}


# ---- 1. the platform ----------------------------------------------------

def _cpu_device_module():
    """torch.cpu, plus the calls verl makes on its device module that
    torch.cpu lacks (no-ops or zeros on a CPU)."""
    import torch

    mod = types.ModuleType("verl_cpu_fixture.device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(mod, name, getattr(torch.cpu, name))
    mod.empty_cache = lambda: None
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.set_device = lambda *a, **k: None
    mod.memory_allocated = lambda *a, **k: 0
    mod.memory_reserved = lambda *a, **k: 0
    mod.max_memory_allocated = lambda *a, **k: 0
    mod.max_memory_reserved = lambda *a, **k: 0
    mod.reset_peak_memory_stats = lambda *a, **k: None
    mod.mem_get_info = lambda *a, **k: (0, 0)
    mod.is_available = lambda: True
    # utils/checkpoint/checkpoint_manager.py ~218 restores the device's RNG
    # from the state's entry under the device's name, which on a CPU is
    # the "cpu" entry: the CPU generator is the device's.
    mod.get_rng_state = torch.get_rng_state
    mod.set_rng_state = torch.set_rng_state
    # utils/flops_counter.py ~80 names the device to look up its peak FLOPS.
    mod.get_device_name = lambda *a, **k: "cpu"
    mod.device_count = lambda: 1
    mod.current_device = lambda: "cpu"  # a torch device, as below
    return mod


def _register_platform():
    import torch
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    dev = _cpu_device_module()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: dev)

        def is_available(self): return True
        def is_platform_available(self, use_smi_check=False): return True
        # utils/device.py ~114 get_device_id() is used as a torch device
        # (fsdp_utils.py ~507 model.to(device=get_device_id())): 0 would be
        # cuda:0.
        def current_device(self): return "cpu"
        def device_count(self): return 1
        def set_device(self, device_index): pass
        def synchronize(self, device_index=None): pass
        def manual_seed(self, seed): torch.manual_seed(seed)
        def manual_seed_all(self, seed): torch.manual_seed(seed)
        def set_allocator_settings(self, settings): pass
        def empty_cache(self): pass
        def get_device_capability(self, device_index=0): return None, None
        def communication_backend_name(self): return "gloo"
        def visible_devices_envvar(self): return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self): pass
        def profiler_stop(self): pass
        # Ray knows the trainer's processes as GPU holders (fake ones, see
        # CPU_OVERRIDES): verl's resource pools ask for "GPU".
        def ray_resource_name(self): return "GPU"
        def ray_noset_envvars(self):
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]
        def is_ipc_supported(self): return False
        def cudart(self): return None

    return PlatformCPU


# ---- 2. the process group's backend ------------------------------------

def _patch_process_group():
    from verl.utils import distributed

    orig = distributed.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return orig(timeout_second=timeout_second, backend=backend or "gloo")

    distributed.initialize_global_process_group_ray = \
        initialize_global_process_group_ray


# ---- 3. the FSDP engines for "cpu" --------------------------------------

def _register_engines():
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl as ti

    EngineRegistry.register(model_type="language_model",
                            backend=["fsdp", "fsdp2"],
                            device=["cpu"])(ti.FSDPEngineWithLMHead)
    EngineRegistry.register(model_type="value_model",
                            backend=["fsdp", "fsdp2"],
                            device=["cpu"])(ti.FSDPEngineWithValueHead)


# ---- 4. an HF-transformers rollout ------------------------------------------

def _log_fault(what: str, **more) -> None:
    """A fault injected here, appended to $V05_FAULT_LOG (as ppo_task's
    log_fault: the test reads which faults fired)."""
    import json

    path = os.environ.get("V05_FAULT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(what=what, pid=os.getpid(), **more)) + "\n")


def server_name(replica_rank: int) -> str:
    """The HF server actor of a replica (found by the adapter by name)."""
    return f"verl-cpu-fixture-hf-server-{replica_rank}"


class HFServer:
    """A Ray actor with what verl's LLMServerClient and replica call on a
    rollout server: ``generate(request_id, prompt_ids=, sampling_params=,
    ...) -> TokenOutput`` (one sample, token by token from the HF model)
    and the control calls (no-ops: there is no KV cache to free)."""

    def __init__(self, model_path: str, response_length: int, seed: int = 0):
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, torch_dtype=torch.float32).eval()
        self.eos = self.model.config.eos_token_id
        self.response_length = response_length
        self.seed = seed
        self.calls = 0
        # A test's fault injection: V05_HF_SERVER_FAIL="5,15", the
        # requests that fail; V05_HF_SERVER_FAIL_STEP=S, every request of
        # training step S and later.
        self.fail_calls = {int(x) for x in os.environ.get(
            "V05_HF_SERVER_FAIL", "").split(",") if x}
        self.fail_step = int(os.environ.get("V05_HF_SERVER_FAIL_STEP", 0))
        self.version = 0  # weight updates received
        self.global_steps = 0  # the trainer's step of the weights

    def load_weights(self, state: Dict[str, Any],
                     global_steps: Optional[int]) -> int:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected:
            raise KeyError(f"hf_cpu server: unknown weights {unexpected[:4]}")
        self.version += 1
        if global_steps is not None:
            self.global_steps = int(global_steps)
        return len(state)

    async def generate(self, request_id, *, prompt_ids, sampling_params,
                       image_data=None, video_data=None, **kwargs):
        import torch
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        # The training step this request rolls out for: verl's sync trainer
        # hands the server the weights of step s at the end of step s
        # (trainer/ppo/v1/trainer_sync.py, on_step_end), and those of the
        # checkpoint it starts from (on_init_end).
        step = self.global_steps + 1
        if self.calls in self.fail_calls or \
                0 < self.fail_step <= step:  # a test's fault injection
            _log_fault("server", call=self.calls, step=step)
            raise RuntimeError(f"hf_cpu server: request {self.calls} "
                               f"(step {step}) refused (injected failure)")
        hold = os.environ.get("V05_HF_SERVER_HOLD")
        if hold and step >= int(hold.split(":")[0]):
            # V05_HF_SERVER_HOLD="S:PATH": the requests of step S and
            # later wait until PATH exists (a test holds a chunk in flight).
            while not os.path.exists(hold.split(":", 1)[1]):
                await asyncio.sleep(0.05)
        g = torch.Generator().manual_seed(self.seed * 1000003 + self.calls)
        temp = float(sampling_params.get("temperature", 1.0)) or 1.0
        limit = int(sampling_params.get("max_tokens",
                                        sampling_params.get("max_new_tokens",
                                                            self.response_length)))
        limit = min(limit, self.response_length)
        ids = torch.tensor([list(prompt_ids)])
        out, logps = [], []
        with torch.no_grad():
            past = None
            step_in = ids
            for _ in range(limit):
                res = self.model(step_in, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1].float() / temp
                logp = torch.log_softmax(logits, -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=g))
                out.append(tok)
                logps.append(float(logp[tok]))
                if tok == self.eos:
                    break
                step_in = torch.tensor([[tok]])
                await asyncio.sleep(0)  # let other requests interleave
        # workers/rollout/llm_server.py ~160 reads the weights' step here
        # (vLLM's server reports it); the trainer's metrics need it.
        return TokenOutput(token_ids=out, log_probs=logps,
                           stop_reason="completed",
                           extra_fields={"global_steps": self.global_steps})

    def num_calls(self) -> int:
        return self.calls

    async def wake_up(self): pass
    async def sleep(self): pass
    async def clear_kv_cache(self): pass
    async def release_kv_cache(self): pass
    async def resume_kv_cache(self): pass
    async def abort_all_requests(self, reject_request: bool = False): pass
    async def resume_generation(self): pass
    async def start_profile(self, **kwargs): pass
    async def stop_profile(self): pass


def _replica_cls():
    import ray
    from verl.workers.rollout.replica import RolloutReplica

    class HFReplica(RolloutReplica):
        """One HFServer per replica, on the node the replica's first worker
        is on (here: the one node)."""

        async def launch_servers(self):
            server = ray.remote(HFServer).options(
                name=server_name(self.replica_rank), num_cpus=0,
                max_concurrency=self.max_concurrency).remote(
                    self.model_config.get("local_path") or
                    self.model_config.path,
                    self.config.response_length, self.config.seed)
            await server.num_calls.remote()  # it is up
            self.servers = [server]
            self._server_handle = server
            self._server_address = f"{ROLLOUT_NAME}-{self.replica_rank}"

    return HFReplica


def _adapter_cls():
    import ray
    from verl.workers.rollout.base import BaseRollout

    class HFServerAdapter(BaseRollout):
        """In the trainer's worker: hands the actor's weights to the
        replica's HFServer (verl's update_weights, after each update)."""

        async def resume(self, tags):
            pass

        async def release(self):
            pass

        async def update_weights(self, weights, wire_format="named_tensors",
                                 **kwargs):
            if wire_format != "named_tensors":
                raise NotImplementedError(f"hf_cpu: {wire_format}")
            state = {n: t.detach().to("cpu").clone() for n, t in weights}
            import torch.distributed as dist
            if dist.is_initialized() and dist.get_rank() != 0:
                return
            server = ray.get_actor(server_name(0))
            await server.load_weights.remote(state, kwargs.get("global_steps"))

    return HFServerAdapter


def _register_rollout():
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica_cls)
    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = \
        f"{__name__}.HFServerAdapter"


def __getattr__(name):
    # verl's get_rollout_class imports this module and takes the attribute.
    if name == "HFServerAdapter":
        cls = _adapter_cls()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def install() -> None:
    """Every piece, once per process."""
    if getattr(install, "done", False):
        return
    install.done = True
    _register_platform()
    _patch_process_group()
    _register_engines()
    _register_rollout()


# Loaded by verl's hook (a main_ppo process and its Ray workers, where
# VERL_USE_EXTERNAL_MODULES names this module): install. Imported by a
# test for CPU_OVERRIDES and ENV: nothing of verl changes in that process
# (its other tests' Ray workers must not see a "cpu" platform they lack).
if __name__ in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(","):
    install()
