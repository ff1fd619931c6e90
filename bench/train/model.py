# SPDX-License-Identifier: MIT
"""A tiny causal language model (one GRU layer) and what the trainer needs
of it: batched sampling, sequence log-probabilities, entropy, and the exact
probability of the verified answer (the verifier is exact match, so a
prompt's true success rate at temperature 1 is pi(answer + EOS | prompt),
one teacher-forced pass)."""

from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from task import EOS, MAX_ANSWER, PAD, VOCAB, Prompt, answer, tokens


class TinyLM(nn.Module):
    def __init__(self, emb: int = 32, hidden: int = 96):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, emb)
        self.rnn = nn.GRU(emb, hidden, batch_first=True)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, x, h=None):
        y, h = self.rnn(self.emb(x), h)
        return self.head(y), h


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _pad(seqs: Sequence[List[int]], value: int = PAD) -> torch.Tensor:
    L = max(len(s) for s in seqs)
    return torch.tensor([s + [value] * (L - len(s)) for s in seqs],
                        dtype=torch.long)


def _encode_prompts(model: TinyLM, prompts: Sequence[Prompt]):
    """Run the prompts (of different lengths) through the GRU; return the
    logits after each prompt's last token and the hidden state there."""
    toks = [tokens(p) for p in prompts]
    x = _pad(toks)
    lens = torch.tensor([len(t) for t in toks])
    packed = nn.utils.rnn.pack_padded_sequence(
        model.emb(x), lens, batch_first=True, enforce_sorted=False)
    _, h = model.rnn(packed)
    return model.head(h[-1]), h


@torch.no_grad()
def decode(model: TinyLM, prompts: Sequence[Prompt], pick) -> List[List[int]]:
    """One completion per prompt (up to MAX_ANSWER tokens, ending at EOS):
    pick(logits, t, alive) chooses step t's tokens from the logits."""
    logits, h = _encode_prompts(model, prompts)
    B = len(prompts)
    outs: List[List[int]] = [[] for _ in range(B)]
    alive = torch.ones(B, dtype=torch.bool)
    for t in range(MAX_ANSWER):
        tok = pick(logits, t, alive)
        for i in torch.nonzero(alive).flatten().tolist():
            outs[i].append(int(tok[i]))
        alive &= tok != EOS
        if not bool(alive.any()):
            break
        y, h = model.rnn(model.emb(tok).unsqueeze(1), h)
        logits = model.head(y[:, 0])
    return outs


def sample(model: TinyLM, prompts: Sequence[Prompt], gen: torch.Generator,
           temperature: float = 1.0) -> Tuple[List[List[int]], float, int]:
    """One sampled completion per prompt. Returns the completions, the
    summed per-token entropy of the sampling distributions and the number
    of tokens sampled."""
    acc = [0.0, 0]

    def pick(logits, t, alive):
        logp = F.log_softmax(logits / temperature, dim=-1)
        probs = logp.exp()
        tok = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        ent = -(probs * logp).sum(-1)
        acc[0] += float(ent[alive].sum())
        acc[1] += int(alive.sum())
        return tok
    outs = decode(model, prompts, pick)
    return outs, acc[0], acc[1]


def seq_logprob(model: TinyLM, prompts: Sequence[Prompt],
                outs: Sequence[Sequence[int]]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per sequence: the mean over its completion tokens of log pi(token),
    and the number of completion tokens (with gradient)."""
    full = [tokens(p) + list(o) for p, o in zip(prompts, outs)]
    x = _pad(full)
    logits, _ = model(x[:, :-1])
    logp = F.log_softmax(logits, dim=-1)
    tgt = x[:, 1:]
    lp = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    mask = torch.zeros_like(lp)
    for i, (p, o) in enumerate(zip(prompts, outs)):
        s = len(tokens(p)) - 1           # position predicting the 1st answer token
        mask[i, s:s + len(o)] = 1.0
    n = mask.sum(1)
    return (lp * mask).sum(1) / n.clamp(min=1), n


@torch.no_grad()
def success_prob(model: TinyLM, prompts: Sequence[Prompt]) -> torch.Tensor:
    """Exact P(sampled completion == answer + EOS) at temperature 1."""
    ans = [answer(p) for p in prompts]
    full = [tokens(p) + a for p, a in zip(prompts, ans)]
    x = _pad(full)
    logits, _ = model(x[:, :-1])
    lp = F.log_softmax(logits, dim=-1).gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1)
    tot = torch.zeros(len(prompts))
    for i, (p, a) in enumerate(zip(prompts, ans)):
        s = len(tokens(p)) - 1
        tot[i] = lp[i, s:s + len(a)].sum()
    return tot.exp()


@torch.no_grad()
def greedy_accuracy(model: TinyLM, prompts: Sequence[Prompt]) -> float:
    logits, h = _encode_prompts(model, prompts)
    B = len(prompts)
    outs: List[List[int]] = [[] for _ in range(B)]
    for _ in range(MAX_ANSWER):
        tok = logits.argmax(-1)
        for i in range(B):
            if not outs[i] or outs[i][-1] != EOS:
                outs[i].append(int(tok[i]))
        y, h = model.rnn(model.emb(tok).unsqueeze(1), h)
        logits = model.head(y[:, 0])
    return sum(o == answer(p) for o, p in zip(outs, prompts)) / B


def warmup(model: TinyLM, stream, steps: int, batch: int = 64,
           lr: float = 3e-3, seed: int = 0) -> None:
    """Brief supervised training on correct answers (teacher forcing)."""
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        ps = stream.take(batch)
        lp, n = seq_logprob(model, ps, [answer(p) for p in ps])
        loss = -(lp).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
