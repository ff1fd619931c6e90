# SPDX-License-Identifier: MIT
"""One process of test_trl_real.py's runs with several processes, launched
as TRL users launch them (``torchrun --standalone --nproc-per-node 2`` or
``accelerate launch``, CPU, gloo): V05GRPOTrainer with this process's own
plugin (segment ``<prefix>-r<rank>``), the tiny Llama of tiny.py, and a
parity reward. Writes what the test checks to ``<out>/rank<rank>.json``:
per generation the plugin's own part of the running fit and the others'
part in effect when the generation was submitted (both as lists), the
exchange counts, and each group (its prompt, prior, k, rewards); the
plugin's counters; the loss log's weights; a checksum of the trained
weights."""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def prior_of(i: int) -> float:
    """Prompt i's prior (the test replays with the same): near its
    success rate under reward(), give or take 0.4."""
    return (0.5, -0.5, 0.0)[i % 3] + ((i * 7) % 5 - 2) / 5


def reward(prompts, completions, v05_id, **kw):
    """Prompts 3i always succeed, 3i+1 never; the others when the
    completion's first character has an even code (the tiny random
    model's, about half the time)."""
    return [1.0 if i % 3 == 0 else 0.0 if i % 3 == 1 else
            float(bool(c) and ord(c[0]) % 2 == 0)
            for i, c in zip(v05_id, completions)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--eb-cold", type=int, default=20)
    ap.add_argument("--merge", type=int, default=1)
    ap.add_argument("--k-max-last", type=int, default=8,
                    help="the last process's k_max (the others' is 8)")
    a = ap.parse_args()

    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    import v05
    from tiny import llama, tokenizer
    from v05.trainers.trl import V05GRPOTrainer

    rank = int(os.environ["RANK"])
    last = rank == int(os.environ["WORLD_SIZE"]) - 1
    work = os.path.join(a.out, f"rank{rank}")
    tok = tokenizer(os.path.join(work, "tok"))
    # The same seed in every process: the same initial weights (DDP also
    # broadcasts process 0's).
    model = llama(os.path.join(work, "model"), len(tok))
    n = 64
    data = Dataset.from_dict({
        "prompt": [f"question {i}:" for i in range(n)],
        "v05_id": list(range(n)),
        "v05_prior": [prior_of(i) for i in range(n)]})
    args = GRPOConfig(
        output_dir=os.path.join(work, "out"), per_device_train_batch_size=8,
        num_generations=2, max_completion_length=6, max_steps=a.steps,
        learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", seed=0, temperature=1.0,
        dataloader_num_workers=0)

    class Recording(V05GRPOTrainer):
        """Records the states each generation is decided under."""

        states = []

        def _v05_exchange_step(self):
            super()._v05_exchange_step()
            x = self.v05_exchange
            self.states.append({
                "own": self.v05.eb_state().to_list(),
                "others": (x.others.to_list()
                           if x is not None and x.others is not None
                           else None),
                "exchange": x.exchanges if x is not None else 0,
                "posted": x.posted if x is not None else 0})

    name = f"{a.prefix}-r{rank}"
    with v05.Plugin.create(name, mode="v05-eb", k_init=2, k_step=2,
                           k_max=a.k_max_last if last else 8,
                           pad_multiple=1, eb_window=0, eb_cold=a.eb_cold,
                           max_prompts=256) as plugin:
        trainer = Recording(model=model, reward_funcs=reward, args=args,
                            train_dataset=data, processing_class=tok,
                            v05_plugin=plugin, v05_merge=bool(a.merge))
        trainer.train()
        stats = plugin.stats()
        trainer.v05_writer.close()
    gens = []
    for groups in trainer.v05_groups:
        # Submit order: the uid's last field.
        order = sorted(groups, key=lambda u: int(u.rsplit("-", 1)[1]))
        gens.append([{"uid": u, "prompt": groups[u]["prompt"],
                      "prior": prior_of(groups[u]["prompt"]),
                      "k": groups[u]["k"],
                      "rewards": [float(r) for r in
                                  groups[u]["rewards"][:groups[u]["k"]]]}
                     for u in order])
    stats.pop("latency_hist", None)
    weights = torch.cat([p.detach().flatten().double()
                         for p in trainer.model.parameters()])
    out = {"rank": rank, "world": int(os.environ["WORLD_SIZE"]),
           "segment": name, "states": trainer.states,
           "fit_log": trainer.v05_fit_log, "generations": gens,
           "stats": stats,
           "weight_sums": [sum(m["weight"]) for m in trainer.v05_loss_log],
           "checksum": [float(weights.sum()), float((weights ** 2).sum())],
           "exchange": None if trainer.v05_exchange is None else {
               "posted": trainer.v05_exchange.posted,
               "exchanges": trainer.v05_exchange.exchanges,
               "pending": trainer.v05_exchange.pending}}
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
