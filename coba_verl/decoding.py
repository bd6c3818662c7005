"""Incremental decoding with a KV cache over left-padded prompts: the one decode loop of the package.

`kv_decode` owns the cache, the attention mask and the position ids; the caller owns sampling and
stopping. The ``hf`` rollout (`coba_verl.cpu.hf_sampling.sample_batch`: per-request seeds, top-k/p,
stop sets, log-probs) and the arithmetic task's sampler (`coba_verl.arithmetic.model.sample`:
one generator, ``<eos>``) both drive it. It needs torch and a transformers causal LM only::

    steps = kv_decode(model, input_ids, attention_mask)   # (R, P) left-padded prompts
    logits = next(steps)                                   # (R, V) float, the last position
    while not finished:
        nxt = pick(logits)                                 # (R,) next tokens, any id for done rows
        logits = steps.send(nxt)
"""

from __future__ import annotations

from collections.abc import Generator

import torch

__all__ = ["kv_decode", "positions"]


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch: mask ``[0, 0, 1, 1, 1]`` -> ``[0, 0, 0, 1, 2]``."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def kv_decode(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> Generator[torch.Tensor, torch.Tensor, None]:
    """Yield the next-token logits (R, V) in float32; receive the (R,) tokens to append.

    The first ``next()`` runs the prompts (R, P); each ``send(tokens)`` appends one token per row
    (attended, at the next position) and runs one step on the cache. Rows keep their own
    positions, so a row's logits do not depend on the other rows' prompts or tokens.
    """
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    mask = attention_mask
    pos = positions(mask)
    out = model(
        input_ids=input_ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True
    )
    last_pos = pos[:, -1:]
    while True:
        tokens = yield out.logits[:, -1, :].float()
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=mask.device)], dim=1)
        last_pos = last_pos + 1
        out = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=last_pos,
            past_key_values=cache,
            use_cache=True,
        )
