"""Scored answers of a tiny arithmetic model: k samples of every prompt, each scored by the task's rule.

The one measurement of pass rates on the arithmetic task, used by the lab (held-out avg@k, the
``+prior`` runs' priors: `coba_verl.lab.evaluation`) and by the tiny recipe's prior file
(`coba_verl.arithmetic.tiny.measure_priors`); both turn the scores into prior records with the
tracker's success rule (`coba_verl.records.priors.outcome_records`), as ``coba-verl estimate`` does
with the generations of veRL's own rollout::

    prompts [a, b], k = 2  ->  rows [0, 1, 0, 1], scores [s_a1, s_b1, s_a2, s_b2]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from coba_verl.arithmetic.model import sample
from coba_verl.arithmetic.task import score_batch
from coba_verl.arithmetic.tokenizer import EOS, PAD, decode_responses

__all__ = ["sample_responses", "sample_scores", "trim_padding"]


def trim_padding(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the leading columns that are padding in every row of left-padded prompts."""
    first = int(torch.nonzero(mask.sum(0))[0, 0])
    return ids[:, first:], mask[:, first:]


def sample_responses(
    model: Qwen2ForCausalLM,
    tok: Tokenizer,
    ids: torch.Tensor,
    mask: torch.Tensor,
    generator: torch.Generator,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sampled response per prompt row: `trim_padding`, move to the model's device, `sample`.

    Args:
        ids, mask: (R, P) left-padded prompts, one row per response wanted.
        generator: the random numbers, on the model's device.

    Returns:
        (ids, mask, response, response_mask): the trimmed prompts and the responses, all on the
        model's device.
    """
    device = next(model.parameters()).device
    ids, mask = trim_padding(ids, mask)
    ids, mask = ids.to(device), mask.to(device)
    response, response_mask = sample(
        model, ids, mask, max_new_tokens=max_new_tokens, eos_id=tok.token_to_id(EOS),
        pad_id=tok.token_to_id(PAD), generator=generator, temperature=temperature,
    )  # fmt: skip
    return ids, mask, response, response_mask


def sample_scores(
    model: Qwen2ForCausalLM,
    tok: Tokenizer,
    ids: torch.Tensor,
    mask: torch.Tensor,
    answers: Sequence[str],
    k: int,
    generator: torch.Generator,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    chunk: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """k sampled answers of each of n prompts, scored against ``answers`` (`score_batch`).

    Args:
        ids, mask: (n, P) the prompts, left-padded (`encode_prompts`).
        answers: (n,) each prompt's gold answer.
        generator: the random numbers, on the model's device; rows are drawn from it in order.
        chunk: rows sampled at once (None: all n * k).

    Returns:
        rows (n*k,) prompt of each answer, [0..n-1] k times; scores (n*k,) float64, 1 or 0.
    """
    rows = np.tile(np.arange(len(answers)), k)
    scores = np.zeros(rows.size, dtype=np.float64)
    step = rows.size if chunk is None else chunk
    for start in range(0, rows.size, step):
        r = rows[start : start + step]
        _, _, response, response_mask = sample_responses(
            model, tok, ids[r], mask[r], generator, max_new_tokens=max_new_tokens, temperature=temperature
        )
        scores[start : start + r.size] = score_batch(
            decode_responses(tok, response, response_mask), [answers[i] for i in r]
        )
    return rows, scores
