"""The ``hf`` rollout's sampling: per-request seeds, top-k / top-p filtering and the batched decode.

Sampling is reproducible for a given model: the draws of a request come from a generator
seeded by ``(replica seed, global step of the weights, prompt token ids, k)`` where k counts
identical requests this server took since the last weight update (the global step, unlike a count
of updates, is the same in a run resumed from a checkpoint), so the ``B_i`` sessions of one prompt
get ``B_i`` distinct, repeatable samples whatever order the agent loop sends them in. The replica
seed is vLLM's engine seed, ``rollout.seed + replica rank`` (`replica_seed`): veRL's router sends
each session of a group to any replica, and two replicas counting k from 0 under one seed would
draw the same samples, a zero-variance group where the engine would give a spread. A one-replica
run draws what it drew with ``rollout.seed`` alone.

Log-probs are ``log_softmax(logits / temperature)`` of the sampled token, the quantity veRL's
actor recomputes (its ``compute_log_prob`` divides the logits by the same temperature).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from verl.workers.rollout.replica import TokenOutput

from coba_verl.decoding import kv_decode


def replica_seed(rollout_seed: int, replica_rank: int) -> int:
    """The seed of replica ``replica_rank``'s server: ``rollout.seed + replica_rank``, as veRL 0.9.1
    seeds each vLLM engine (``vllm_async_server.py:343``, and ``:152, :627`` under full determinism),
    so that the replicas sharing a group draw different samples."""
    return int(rollout_seed) + int(replica_rank)


def request_seed(base_seed: int, step: int, prompt_ids: Iterable[int], k: int) -> int:
    """63-bit seed of the k-th request for ``prompt_ids`` under the weights of global step ``step``,
    on a server whose seed is ``base_seed`` (`replica_seed`)."""
    text = f"{base_seed}|{step}|{k}|{','.join(map(str, prompt_ids))}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside each row's top-k and nucleus (top-p) with -inf.

    Args:
        logits: (R, V) float, already divided by the temperature.
        top_k: (R,) int64, <= 0 keeps every token.
        top_p: (R,) float in (0, 1]; 1 keeps every token.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (R, V)
    rank = torch.arange(logits.shape[-1]).expand_as(logits)  # (R, V) 0, 1, 2, ...
    drop = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    probs = sorted_logits.softmax(-1)
    mass_before = probs.cumsum(-1) - probs  # probability of the tokens ranked above
    drop |= mass_before >= top_p[:, None]  # the top token is always kept (mass_before = 0)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


@dataclass
class SampleRequest:
    """One ``generate`` call as `sample_batch` decodes it (`HFServer` builds it from the call)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    want_logprobs: bool
    stop_ids: frozenset[int]
    seed: int
    future: asyncio.Future = field(repr=False)


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    requests: list[SampleRequest],
    pad_id: int,
    abort: threading.Event | None = None,
    pace_s: float = 0.0,
) -> list[TokenOutput]:
    """Sample every request in one batched decode (left padding, KV cache).

    Row r draws its t-th token by inverse-CDF with ``u[r, t]`` from its own seeded generator, so
    a row's sample does not depend on which other requests share the batch. Once ``abort`` is set,
    decoding stops after the current token: unfinished rows answer with their tokens so far and
    ``stop_reason="aborted"``. ``pace_s`` > 0: each token waits that long before the next one
    (an abort ends the wait).
    """
    r = len(requests)
    width = max(len(q.prompt_ids) for q in requests)
    steps = max(q.max_tokens for q in requests)
    ids = torch.full((r, width), pad_id, dtype=torch.long)  # (R, P) left-padded
    mask = torch.zeros((r, width), dtype=torch.long)
    for i, q in enumerate(requests):
        ids[i, width - len(q.prompt_ids) :] = torch.tensor(q.prompt_ids)
        mask[i, width - len(q.prompt_ids) :] = 1
    u = torch.stack([torch.rand(steps, generator=torch.Generator().manual_seed(q.seed)) for q in requests])
    temperature = torch.tensor([q.temperature for q in requests], dtype=torch.float32)  # (R,)
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    top_k = torch.tensor([q.top_k for q in requests], dtype=torch.long)
    top_p = torch.tensor([q.top_p for q in requests], dtype=torch.float32)
    limit = torch.tensor([q.max_tokens for q in requests])

    decoder = kv_decode(model, ids, mask)
    logits = next(decoder)
    done = torch.zeros(r, dtype=torch.bool)
    tokens: list[list[int]] = [[] for _ in range(r)]
    logprobs: list[list[float]] = [[] for _ in range(r)]
    for t in range(steps):
        if abort is not None and abort.is_set():
            break
        logits = logits / scale  # (R, V)
        logp = F.log_softmax(logits, -1)
        probs = filter_logits(logits, top_k, top_p).softmax(-1)
        cdf = probs.cumsum(-1)
        drawn = torch.searchsorted(cdf, (u[:, t] * cdf[:, -1])[:, None]).squeeze(-1)
        drawn = drawn.clamp(max=logits.shape[-1] - 1)
        nxt = torch.where(greedy, logits.argmax(-1), drawn)  # (R,)
        for i in range(r):
            if done[i]:
                continue
            tok = int(nxt[i])
            tokens[i].append(tok)
            logprobs[i].append(float(logp[i, tok]))
            if tok in requests[i].stop_ids or len(tokens[i]) >= limit[i]:
                done[i] = True
        if bool(done.all()):
            break
        if pace_s > 0:
            if abort is None:
                time.sleep(pace_s)
            else:
                abort.wait(pace_s)
        logits = decoder.send(torch.where(done, torch.full_like(nxt, pad_id), nxt))
    return [
        TokenOutput(
            token_ids=tokens[i],
            log_probs=logprobs[i] if q.want_logprobs else None,
            stop_reason="completed" if done[i] else "aborted",
        )
        for i, q in enumerate(requests)
    ]
