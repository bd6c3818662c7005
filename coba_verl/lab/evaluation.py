"""The lab's measurements of a model by sampling at temperature 1, each with its own random numbers:
held-out avg@k (`evaluate`) and the warm start's pass rates of the training prompts, the priors of
the ``+prior`` runs (`measure_priors`, `seed_priors`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import Qwen2ForCausalLM

from coba_verl.arithmetic.outcomes import sample_scores
from coba_verl.core import BudgetAllocator
from coba_verl.lab.seeds import SeedContext
from coba_verl.records.priors import PriorRecords, apply_priors, outcome_records
from coba_verl.records.prompt_ids import PromptIdMap

logger = logging.getLogger(__name__)


@dataclass
class EvalResult:
    """Held-out accuracy avg@k at temperature 1, overall and per level."""

    acc: float
    per_level: dict[str, float]
    pass_rates: np.ndarray  # (n_eval,) float64, successes / k per prompt


def sampling_generator(model: Qwen2ForCausalLM, seed: int) -> torch.Generator:
    """A generator on the model's device (sampling draws its random numbers there)."""
    return torch.Generator(device=next(model.parameters()).device).manual_seed(seed)


def evaluate(model: Qwen2ForCausalLM, ctx: SeedContext, k: int, *, chunk: int = 1024) -> EvalResult:
    """avg@k on the held-out set at temperature 1, with the same random numbers at every call."""
    gen = sampling_generator(model, 1_000_003 * (ctx.seed + 1))
    rows, scores = sample_scores(
        model, ctx.tok, ctx.eval_ids, ctx.eval_mask, ctx.eval.answers, k, gen,
        max_new_tokens=ctx.max_new_tokens, chunk=chunk,
    )  # fmt: skip
    rates = np.bincount(rows, weights=scores, minlength=len(ctx.eval)) / k
    per_level = {
        lv.name: float(rates[ctx.eval.levels == i].mean())
        for i, lv in enumerate(ctx.levels)
        if np.any(ctx.eval.levels == i)
    }
    return EvalResult(acc=float(rates.mean()), per_level=per_level, pass_rates=rates)


def measure_priors(
    model: Qwen2ForCausalLM, ctx: SeedContext, k: int, success_value: float, *, chunk: int = 1024
) -> PriorRecords:
    """(successes, k) of every training prompt: k samples of ``model`` at temperature 1.

    The offline measurement of the ``+prior`` runs, so that their first epoch is allocated too:
    each training position i gets the record (#{score_i == success_value}, k), the tracker's success rule
    (`coba_verl.records.priors.outcome_records`). Its random numbers are its own, so the runs'
    sampling is unchanged.
    """
    gen = sampling_generator(model, 104_729 * (ctx.seed + 1))
    rows, scores = sample_scores(
        model, ctx.tok, ctx.train_ids, ctx.train_mask, ctx.train.answers, k, gen,
        max_new_tokens=ctx.max_new_tokens, chunk=chunk,
    )  # fmt: skip
    return outcome_records(rows.tolist(), scores.tolist(), success_value, f"warm start, {k} samples a prompt")


def seed_priors(
    allocator: BudgetAllocator, model: Qwen2ForCausalLM, ctx: SeedContext, k: int, success_value: float
) -> dict[str, float]:
    """The seed's prior records (measured on first use, on the warm start) into ``allocator``."""
    if k not in ctx.priors:
        start = time.perf_counter()
        ctx.priors[k] = measure_priors(model, ctx, k, success_value)
        logger.info("seed %d: priors of %d prompts x %d samples in %.1f s", ctx.seed, len(ctx.train), k,
                    time.perf_counter() - start)  # fmt: skip
    positions = PromptIdMap(range(len(ctx.train)), name="training position")
    return apply_priors(allocator.tracker, positions, ctx.priors[k])
