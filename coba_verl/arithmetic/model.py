"""A tiny Qwen2 causal LM built from a config, with batched sampling (`coba_verl.decoding`) and log-probs.

Shapes used below:

    N  prompts in a batch          P  prompt width (left-padded)
    T  generated tokens            R  rollouts (prompts repeated by their budgets)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

from coba_verl.decoding import kv_decode, positions

__all__ = ["ModelSpec", "build_model", "build_model_for", "sample", "response_logprobs"]


@dataclass(frozen=True)
class ModelSpec:
    """Size of the tiny Qwen2 (a real architecture: RoPE, GQA, SwiGLU, RMSNorm)."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 32


def build_model(
    spec: ModelSpec, vocab_size: int, *, pad_id: int, bos_id: int, eos_id: int, seed: int
) -> Qwen2ForCausalLM:
    """Randomly initialise a ``Qwen2ForCausalLM`` from ``spec`` with ``torch.manual_seed(seed)``."""
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg)


def build_model_for(tokenizer: Any, spec: ModelSpec, *, seed: int) -> Qwen2ForCausalLM:
    """`build_model` for a transformers tokenizer: its length and its pad, bos and eos ids."""
    return build_model(
        spec,
        len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        bos_id=tokenizer.bos_token_id,
        eos_id=tokenizer.eos_token_id,
        seed=seed,
    )


@torch.no_grad()
def sample(
    model: Qwen2ForCausalLM,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one continuation per row at ``temperature`` (0 = greedy), reusing the KV cache.

    Runs on the device of ``input_ids`` (the model's); ``generator`` must live there too.

    Args:
        input_ids: (R, P) left-padded prompts.
        attention_mask: (R, P), 0 on padding.

    Returns:
        response_ids: (R, T) sampled tokens, ``pad_id`` after ``<eos>``; T <= max_new_tokens.
        response_mask: (R, T) int64, 1 up to and including ``<eos>``.
    """
    r, device = input_ids.shape[0], input_ids.device
    steps = kv_decode(model, input_ids, attention_mask)
    logits = next(steps)
    done = torch.zeros(r, dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    alive: list[torch.Tensor] = []
    for t in range(max_new_tokens):
        if temperature > 0:
            probs = F.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        else:
            nxt = logits.argmax(-1)
        alive.append(~done)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        done = done | (nxt == eos_id)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        logits = steps.send(nxt)
    return torch.stack(tokens, 1), torch.stack(alive, 1).long()


def response_logprobs(
    model: Qwen2ForCausalLM,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    """log pi(y_t | x, y_<t) of each response token, shape (R, T); differentiable.

    The sequence is ``[left-padded prompt | response]``; the logits at position P-1+t predict
    response token t.
    """
    ids = torch.cat([prompt_ids, response_ids], 1)  # (R, P+T)
    mask = torch.cat([prompt_mask, response_mask], 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=False).logits
    p = prompt_ids.shape[1]
    logits = logits[:, p - 1 : -1, :].float()  # (R, T, V)
    return torch.gather(F.log_softmax(logits, -1), 2, response_ids[:, :, None]).squeeze(-1)
