# SPDX-License-Identifier: MIT
"""v05's rollout component for verl 0.9.1's agent-loop architecture.

Read against verl 0.9.1 from PyPI (requirements/trainers.txt):

* Both trainers build their rollout with
  ``load_class_from_fqn(actor_rollout_ref.rollout.agent.agent_loop_manager_class)``
  and call ``cls.create(config=, llm_client=, teacher_client=,
  reward_loop_worker_handles=)``. ``llm_client`` is verl's
  ``LLMServerClient`` (its ``generate(request_id, prompt_ids=,
  sampling_params=)`` picks a server through the global load balancer and
  awaits the server actor's ``generate``); the reward loop workers score
  each trajectory as it finishes (``_compute_score``).
* The default trainer (``trainer.use_v1=True``, main_ppo's ``TaskRunnerV1``)
  uses ``AgentLoopManagerTQ``: ``generate_sequences(TensorDict)`` hands
  chunks to ``AgentLoopWorkerTQ`` actors and returns at once; each worker
  puts every finished trajectory into TransferQueue under
  ``{uid}_{session}_{i}`` and tags the prompt's uid ``finished``; the
  trainer takes every key of a finished uid, so a prompt may have any
  number of rows, and pads the batch itself (``_balance_batch``:
  ``pad<hex>`` rows up to ``lcm(dp, ppo_mini_batch_size * rollout.n)``).
  ``V05AgentLoopManagerTQ`` is that path.
* The legacy trainer (``trainer.use_v1=False``, ``RayPPOTrainer``) uses
  ``AgentLoopManager``: ``generate_sequences(DataProto) -> DataProto``.
  ``V05AgentLoopManager`` returns one row per generated sample, padded to a
  multiple with masked rows. ``RayPPOTrainer.fit`` itself then does
  ``batch.repeat(rollout.n).union(output)``, which needs exactly
  ``prompts * n`` rows: the returned batch is for a driver loop that takes
  it as it is (see docs/TRAINERS.md).

What the workers do with a training chunk: submit its prompts to their own
plugin as one batch and run the plugin's decisions with
``v05.rollout.GroupRollout``. A "sample" decision's sample ``s`` is one
``_run_agent_loop(..., session_id=s)`` (the configured agent loop, one n=1
request through ``LLMServerClient``); its reward is the reward loop's score
(``score_to_reward``), which GroupRollout pushes. When every group is final
its rows carry the group's numbers (``v05.verl.tag_rows``: the uid is a
``V05Uid``), so the "v05" estimator finds each row's advantage on any host
without the segment. On any error GroupRollout cancels the outstanding
agent-loop tasks and the batch in the plugin; the worker then raises the
error (legacy) or tags the chunk's uids ``failure`` (TransferQueue).
Every sample cancelled (that, an early start's abort) is cancelled in the
server too: the worker's ``LLMServerClient`` is wrapped so that its Ray
call is ``ray.cancel``-ed with the task awaiting it (server_abort.py).
Validation chunks keep verl's own fixed-n path.

Configuration (added with ``+``; verl's dataclasses refuse unknown keys
under ``actor_rollout_ref.rollout``, so they live in ``algorithm``, read
from the raw config): ``algorithm.v05_segment`` (the run's name: worker i's
segment is ``<name>-w<i>``, default "v05"; run.py says how segments end
with their worker), ``algorithm.v05_report`` (the run report),
``algorithm.v05_plugin`` (a dict of
``v05.Plugin.create`` parameters), ``algorithm.v05_row_multiple`` (legacy
manager: pad rows to a multiple of this; default lcm(32, the actor's world
size ``trainer.n_gpus_per_node * trainer.nnodes``)).

The fill (default trainer, TransferQueue path): ``+algorithm.v05_fill=
contrast`` (or ``signal``, v05.core.fill) tags a group that is not
informative ``failure`` with no rows, and ``+algorithm.v05_skip={margin:
0.05, strength: 16, revisit: 0.01, seed: 0}`` (SkipRule's settings) tags a
prompt its prior predicts all-same ``failure`` before any sample; with
``trainer.v1.sampler.sync_refill_failed_groups=True`` verl's own replay
buffer evicts exactly those prompts and refills exactly as many
(docs/TRAINERS.md, "Full batches").
"""

import asyncio
import atexit
import logging
import math
import os
import uuid
import weakref
from typing import Any, Dict, List, Optional

from ...core.admission import SKIP, Admission
from ...core.eb_state import EbState
from ...core.fill import COUNTS, SkipRule
from ...core.plugin import Plugin
from ...engines.driver import GroupRollout
from ..reaper import start_reaper
from ..report import report
from .config import cfg_get, score_range, score_to_reward
from .history import RuleHistory, history_config, prompt_id
from .run import reclaim_run, segment_name
from .server_abort import cancel_on_abort

__all__ = ["V05Core", "row_multiple", "plugin_params", "PLUGIN_KEYS",
           "fill_config",
           "actor_base", "sampling_params", "row_fields", "lazy_classes"]

log = logging.getLogger(__name__)

# Plugin.create parameters a config may set (algorithm.v05_plugin).
PLUGIN_KEYS = ("cost", "k_init", "k_step", "k_max", "keep_n",
               "halt_fraction", "pad_multiple", "mode", "schedule",
               "max_prompts", "max_producers", "lane_capacity", "max_batches",
               "stream_deadline_us", "sigma", "paper", "eb_window", "eb_cold",
               "eb_early", "eb_first", "pc_lower", "pc_upper", "ebpo_window",
               "pg")
DEFAULT_ROW_MULTIPLE = 32  # the paper's pad


def plugin_params(config) -> Dict[str, Any]:
    """Plugin.create keyword arguments from algorithm.v05_plugin."""
    algo = cfg_get(config, "algorithm")
    raw = cfg_get(algo, "v05_plugin", {}) or {}
    params = _plain(raw) if hasattr(raw, "items") else {}
    unknown = sorted(set(params) - set(PLUGIN_KEYS))
    if unknown:
        raise ValueError(f"v05: algorithm.v05_plugin has unknown keys {unknown}; "
                         f"known: {PLUGIN_KEYS}")
    return params


def _plain(v):
    """A config value as plain dicts and lists (hydra hands in DictConfig
    and ListConfig; a nested one, as v05-pg's pg={skip: 0.75}, goes to
    Plugin.create as the dict and list it takes)."""
    if hasattr(v, "items"):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        return v
    return [_plain(x) for x in v]


def row_multiple(config) -> int:
    """What the legacy manager pads its rows to: algorithm.v05_row_multiple,
    else lcm(32, actor world size). The data-parallel size divides the world
    size, so the default splits evenly over the actor's ranks."""
    algo = cfg_get(config, "algorithm")
    m = cfg_get(algo, "v05_row_multiple")
    if m is None:
        trainer = cfg_get(config, "trainer")
        world = int(cfg_get(trainer, "n_gpus_per_node", 1)) * \
            int(cfg_get(trainer, "nnodes", 1))
        m = math.lcm(DEFAULT_ROW_MULTIPLE, max(world, 1))
    m = int(m)
    if m < 1:
        raise ValueError(f"v05: algorithm.v05_row_multiple must be >= 1, not {m}")
    return m


def actor_base(cls):
    """The plain class behind a @ray.remote class (Ray refuses subclasses
    of actor classes; verl decorates AgentLoopWorkerTQ)."""
    meta = getattr(cls, "__ray_metadata__", None)
    return meta.modified_class.__ray_actor_class__ if meta is not None else cls


def sampling_params(rollout_config) -> Dict[str, Any]:
    """The training sampling parameters, as verl's workers build them."""
    return dict(temperature=rollout_config.temperature,
                top_p=rollout_config.top_p, top_k=rollout_config.top_k,
                repetition_penalty=1.0,
                logprobs=rollout_config.calculate_log_probs)


def _score_of(out, uid, sample, rng) -> float:
    final = out[-1] if isinstance(out, list) else out
    score = getattr(final, "reward_score", None)
    if score is None:
        raise RuntimeError(
            "v05: a trajectory came back without a reward score. v05 decides "
            "from each sample's reward during the rollout, so the reward "
            "loop must score in the agent loop (verl does when there is no "
            "reward model, or the reward model has its own resource pool: "
            "reward.reward_model.enable_resource_pool=True)")
    return score_to_reward(score, rng,
                           what=f"verl score of uid {uid!r} sample {sample}")


class V05Core:
    """The part both workers share: one plugin per worker process (its own
    segment, created on first use in the actor's event loop) and the
    GroupRollout that runs its decisions."""

    def _v05_init(self):
        algo = cfg_get(self.config, "algorithm")
        self._v05_prefix = cfg_get(algo, "v05_segment") or \
            os.environ.get("V05_SEGMENT") or "v05"
        self._v05_params = plugin_params(self.config)
        self._v05_score_range = score_range(algo)
        self._v05_history_cfg = history_config(algo, self._v05_params)
        self._v05_fill, self._v05_skip = fill_config(algo)
        self._v05_policy: Optional[Admission] = None  # v05_admission()
        self._v05_history = None  # the run's RuleHistory actor, on first use
        self._v05_report = cfg_get(algo, "v05_report") or None
        self._v05_index: Optional[int] = None  # set by the manager
        self._v05_reaper = None
        self._v05_restored: Optional[dict] = None  # a checkpoint's state
        self.v05_plugin: Optional[Plugin] = None
        self._v05_driver: Optional[GroupRollout] = None
        self._v05_lock: Optional[asyncio.Lock] = None

    def v05_setup(self, index: int) -> str:
        """The manager names this worker (its index in the run): its
        segment is then ``<v05_segment>-w<index>``. Segments of this run
        left on this host by a dead run are reclaimed first. Returns the
        segment's name."""
        self._v05_index = int(index)
        gone = reclaim_run(self._v05_prefix)
        if gone:
            log.warning("v05: reclaimed %d segments of run %r left by a "
                        "dead run on this host: %s", len(gone),
                        self._v05_prefix, ", ".join(gone))
            report(self._v05_report, {"kind": "reclaimed", "segments": gone,
                                      "worker": self._v05_index})
        return segment_name(self._v05_prefix, self._v05_index)

    async def _v05_run(self, items, step):
        """One chunk through the plugin, at training step `step`. A plugin
        has one driver, which runs one batch at a time: a chunk that comes
        while another runs (Ray runs an async actor's calls concurrently;
        the v1 trainer submits without waiting) waits for it. Under
        algorithm.v05_history the run's RuleHistory gives the priors
        (knapsack) or skips prompts (greso: they have no result, and so
        no rows), and gets every finished group."""
        if self._v05_lock is None:
            self._v05_lock = asyncio.Lock()
        async with self._v05_lock:
            items = self._v05_skipped(items, step)
            if not items:
                return {}
            if self._v05_report:
                report(self._v05_report, {
                    "kind": "chunk_start", "worker": self._v05_index,
                    "pid": os.getpid(), "step": int(step),
                    "uids": [u for u, _, _ in items]})
            if self._v05_history_cfg is None:
                results = await self._v05_rollout().run(items)
                self._v05_report_chunk(step, results)
                return results
            if int(step) < 0:
                raise ValueError("v05: algorithm.v05_history needs the "
                                 "training step (meta_info global_steps)")
            pids = [prompt_id(kw) for _, (_, _, kw), _ in items]
            if len(set(pids)) != len(pids):
                raise ValueError("v05: algorithm.v05_history: two prompts of "
                                 "a chunk share a dataset index; the index "
                                 "must name one prompt")
            hist = self._v05_history_actor()
            plan = await hist.plan.remote(int(step), pids)
            if self._v05_history_cfg["rule"] == "knapsack":
                items = [(u, x, p) for (u, x, _), p in zip(items, plan)]
            else:
                keep = [i for i, k in enumerate(plan) if k] or [0]
                items = [items[i] for i in keep]  # a chunk keeps one at least
                pids = [pids[i] for i in keep]
            results = await self._v05_rollout().run(items)
            await hist.fold.remote(int(step), [
                (pid, [float(r) for r in results[u].group.rewards[
                    :results[u].group.k]])
                for pid, (u, _, _) in zip(pids, items)])
            self._v05_report_chunk(step, results)
            return results

    def v05_admission(self) -> Optional[Admission]:
        """The one admission policy (v05.core.admission) of
        algorithm.v05_fill and v05_skip, made with the plugin (its mode
        and k_init); None without the fill. verl's replay buffer refills
        what it tags failed, so of the policy only the skip and the count
        are used here."""
        if self._v05_fill is None:
            return None
        if self._v05_policy is None:
            self._v05_rollout()  # the plugin, made on first use
            self._v05_policy = Admission(
                self.v05_plugin.mode, _k_init(self.v05_plugin),
                count=self._v05_fill, skip=self._v05_skip)
        return self._v05_policy

    def _v05_skipped(self, items, step):
        """The chunk's prompts less those algorithm.v05_skip skips (their
        prior predicts an all-same first wave); they have no result."""
        if self._v05_skip is None:
            return items
        policy = self.v05_admission()
        return [x for x in items if policy.screen(
            x[0], x[2], visit=max(int(step), 0)) != SKIP]

    def v05_informative(self, res) -> bool:
        """Whether a chunk's result counts (algorithm.v05_fill): False for
        a skipped prompt (no result) or a group that is not informative;
        without the fill, every group the plugin did not drop."""
        if res is None:
            return False
        if self._v05_fill is None:
            return not res.dropped
        return self.v05_admission().counts(res.group, dropped=res.dropped)

    def _v05_report_chunk(self, step, results) -> None:
        """The chunk's groups and the plugin's counters after it, to the
        run report (algorithm.v05_report)."""
        if not self._v05_report:
            return
        groups = []
        for uid, res in results.items():
            g = res.group
            groups.append({"uid": uid, "k": int(g.k), "dropped": res.dropped,
                           "kept": list(g.kept),
                           "baseline": float(g.baseline),
                           "rewards": [float(x) for x in g.rewards[:g.k]],
                           "advantages": [float(x) for x in
                                          g.advantages[:g.k]]})
        stats = self.v05_plugin.stats()
        stats.pop("latency_hist", None)
        report(self._v05_report, {
            "kind": "chunk", "worker": self._v05_index, "pid": os.getpid(),
            "segment": self.v05_plugin.name, "step": int(step),
            "groups": groups, "stats": stats,
            "fit_folded": self._v05_folded()})

    def _v05_folded(self) -> Optional[int]:
        """First waves in the running fit (own + handed in), v05-eb."""
        try:
            own = self.v05_plugin.eb_state()
        except ValueError:
            return None
        rem = getattr(self, "_v05_remote", None)
        return own.folded + (rem.folded if rem is not None else 0)

    def _v05_history_actor(self):
        """The run's RuleHistory: one named actor per segment prefix and
        rule, made by the first worker that asks."""
        if self._v05_history is None:
            import ray
            h = self._v05_history_cfg
            self._v05_history = ray.remote(RuleHistory).options(
                name=f"v05-history-{self._v05_prefix}-{h['rule']}",
                get_if_exists=True, num_cpus=0).remote(
                    h["rule"], h["seed"], h["path"], h.get("pc"))
        return self._v05_history

    def _v05_rollout(self) -> GroupRollout:
        if self._v05_driver is None:
            # One segment per worker: several workers share a host, and a
            # segment has one owner. Named by run and worker, so a later
            # start reclaims what a dead run left; a worker made outside
            # the manager (no index) gets a name of its own.
            if self._v05_index is not None:
                name = segment_name(self._v05_prefix, self._v05_index)
            else:
                name = f"{self._v05_prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self.v05_plugin = Plugin.create(name, on_stale="remove",
                                            **self._v05_params)
            # The reaper removes the segment when this process ends, however
            # it ends (Ray ends workers without running exit handlers).
            self._v05_reaper = start_reaper(
                name, self._v05_report, {"worker": self._v05_index})
            atexit.register(_close_quietly, weakref.ref(self))
            client = getattr(self, "llm_client", None)
            if client is not None:
                cancel_on_abort(client)
            self._v05_driver = GroupRollout(
                self.v05_plugin, self._v05_generate_one,
                score=lambda uid, s, out: _score_of(out, uid, s,
                                                    self._v05_score_range),
                release=True)
        return self._v05_driver

    async def _v05_generate_one(self, prompt, uid, sample, batch):
        sampling_params, trajectory, kwargs = prompt
        trajectory = dict(trajectory, rollout_n=sample)
        return await self._run_agent_loop(dict(sampling_params), trajectory,
                                          trace=False, session_id=sample,
                                          **kwargs)

    def _v05_items(self, prompts: List[Dict[str, Any]], sampling_params,
                   trajectories) -> list:
        """(uid, (sampling params, trajectory, kwargs), prior) per prompt."""
        items, seen = [], set()
        for kwargs, traj in zip(prompts, trajectories):
            kwargs = dict(kwargs)
            if "v05_prior" in kwargs and self._v05_history_cfg is not None \
                    and self._v05_history_cfg["rule"] == "knapsack":
                raise ValueError("v05: algorithm.v05_history.rule=knapsack "
                                 "gives the priors; the data has a "
                                 "v05_prior column too")
            prior = kwargs.pop("v05_prior", 0.0)  # checked by submit
            kwargs.pop("__rollout_n__", None)
            kwargs.pop("__do_sample__", None)
            uid = str(kwargs["uid"])
            if uid in seen:
                raise ValueError(
                    f"v05: uid {uid!r} appears twice in a chunk: v05 decides "
                    "each prompt's number of samples, so set "
                    "actor_rollout_ref.rollout.n=1")
            seen.add(uid)
            kwargs["uid"] = uid
            items.append((uid, (sampling_params, traj, kwargs), prior))
        return items

    def v05_close(self):
        if self._v05_history is not None:
            import ray
            try:  # the run's end: the file has every finished step
                ray.get(self._v05_history.save.remote())
                ray.kill(self._v05_history)
            except Exception:  # another worker closed it first
                pass
            self._v05_history = None
        if self._v05_driver is not None:
            self._v05_driver.close()
            self._v05_driver = None
        if self.v05_plugin is not None:
            self.v05_plugin.close()
            self.v05_plugin = None

    def v05_stats(self) -> dict:
        """The plugin's counters (a test reads them through the actor)."""
        return {} if self.v05_plugin is None else self.v05_plugin.stats()

    def v05_segment(self) -> Optional[str]:
        return None if self.v05_plugin is None else self.v05_plugin.name

    # ---- the running fit: merged across workers, saved, restored --------
    # Coroutines, so that Ray runs them on the actor's event loop, the
    # thread that runs the plugin's driver loop (a plugin is called from
    # one thread).

    async def v05_eb_part(self) -> Optional[list]:
        """This worker's own part of v05-eb's running fit (EbState as a
        list), or None when its plugin has none (another mode, schedule
        rounds) or no plugin yet."""
        if self.v05_plugin is None:
            self._v05_rollout()
        try:
            return self.v05_plugin.eb_state().to_list()
        except ValueError:
            return None

    async def v05_eb_others(self, others: list) -> None:
        self._v05_set_others(others)

    def _v05_set_others(self, others: list) -> None:
        """The sum of the other workers' parts (the manager's exchange at
        a step boundary): this worker decides under the run's whole fit."""
        st = EbState.from_list(others)
        self.v05_plugin.set_eb_remote(st)
        self._v05_remote = st

    async def v05_state(self) -> dict:
        """What this worker's decisions depend on, for verl's checkpoint:
        its own part of the running fit and the others' last handed in."""
        part = await self.v05_eb_part()
        rem = getattr(self, "_v05_remote", None)
        return {"worker": self._v05_index, "own": part,
                "remote": None if rem is None else rem.to_list()}

    async def v05_history_state(self) -> Optional[dict]:
        """The run's rule history (algorithm.v05_history), for a checkpoint."""
        if self._v05_history_cfg is None:
            return None
        return await self._v05_history_actor().state.remote()

    async def v05_history_restore(self, state: dict) -> None:
        if self._v05_history_cfg is not None:
            await self._v05_history_actor().load_state.remote(state)

    async def v05_restore(self, state: dict) -> None:
        """Back to a checkpoint's state (v05_state of the same worker)."""
        self._v05_rollout()
        if state.get("own") is not None:
            self.v05_plugin.set_eb_own(EbState.from_list(state["own"]))
        if state.get("remote") is not None:
            self._v05_set_others(state["remote"])


def fill_config(algo):
    """(algorithm.v05_fill, a SkipRule from algorithm.v05_skip), each
    checked; (None, None) when they are not set."""
    fill = cfg_get(algo, "v05_fill")
    if fill is not None and fill not in COUNTS:
        raise ValueError(f"v05: algorithm.v05_fill={fill!r}; known: {COUNTS}")
    raw = cfg_get(algo, "v05_skip")
    if raw is None:
        return fill, None
    if fill is None:
        raise ValueError("v05: algorithm.v05_skip needs algorithm.v05_fill "
                         "(a skipped prompt is refilled as a failed one)")
    kw = dict(raw.items()) if hasattr(raw, "items") else None
    keys = {"margin", "strength", "pseudo", "hallucination", "revisit", "seed"}
    if kw is None or set(kw) - keys:
        raise ValueError(f"v05: algorithm.v05_skip={raw!r}: a dict of "
                         f"{sorted(keys)}")
    return fill, SkipRule(**kw)


def _k_init(plugin) -> int:
    from ...core.observer import Observer
    with Observer(plugin.name) as o:
        return o.info()["k_init"]


def _close_quietly(ref):
    worker = ref()
    if worker is not None:
        try:
            worker.v05_close()
        except Exception:  # exiting anyway
            pass


def row_fields(res, s) -> Dict[str, Any]:
    g = res.group
    # v05_gen: the prompt instance, which a reward pushed for the row
    # (the "v05" reward manager, on the segment's host) must carry.
    return {"v05_sample": s, "v05_gen": res.decision.gen, "v05_k": g.k,
            "v05_baseline": g.baseline,
            "v05_sigma": g.sigma, "v05_reward": float(g.rewards[s]),
            "v05_advantage": float(g.advantages[s]), "v05_keep": int(g.keep)}


def lazy_classes(module_globals: dict, makers: dict):
    """A module __getattr__ that builds each class of `makers` (name ->
    function) on first use: the classes subclass verl's, which needs verl
    (and for the TransferQueue pair, transfer_queue) at import, while
    load_class_from_fqn and Ray's unpickling only import the module and
    take the attribute. The module's own code calls it by name too (a
    global lookup does not reach a module __getattr__)."""

    def getattr_(name):
        if name in module_globals:
            return module_globals[name]
        make = makers.get(name)
        if make is None:
            raise AttributeError(f"module {module_globals['__name__']!r} "
                                 f"has no attribute {name!r}")
        cls = make()
        module_globals[name] = cls
        return cls

    return getattr_
