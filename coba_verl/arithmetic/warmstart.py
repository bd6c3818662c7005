"""Supervised warm start: bring a random model to a chosen capability before GRPO starts.

A randomly initialised model solves nothing, so every GRPO group would have zero reward and zero
gradient, and allocation would have nothing to act on. Real RL runs start from an instruct
model whose pass rates already span 0 to 1. A cross-entropy fit on freshly drawn problems
(never the training or evaluation prompts themselves) reproduces that.

How long to fit is the delicate part. A tiny model learns each arithmetic level abruptly, after
a plateau whose length varies from seed to seed: a fixed number of steps left one seed at 11 %
held-out accuracy and another at 30 %. So the fit stops at a target instead: every
``check_every`` steps the model samples (temperature 1) one answer to each problem of a fixed
probe set, and the fit ends once the probe accuracy reaches ``target`` (or after ``max_steps``).
With the default target of 0.4 on the warm-start levels, the short sums are solved most of the
time, two-digit sums and products by one digit some of the time, and the three-by-two-digit
products (absent from the warm-start data) never: the easy / in-between / hard mix.

Loss: token-mean negative log-likelihood of ``answer + <eos>`` given ``<bos> + prompt``, AdamW,
constant learning rate after a 20-step linear warm-up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from coba_verl.arithmetic.model import response_logprobs, sample
from coba_verl.arithmetic.task import LEVELS, Level, sample_problems, score_batch
from coba_verl.arithmetic.tokenizer import EOS, PAD, decode_responses, encode_prompts, pad_rows

__all__ = ["WARM_LEVELS", "WarmStartResult", "encode_answers", "warm_start"]

# The warm start's data: the task's levels without the three-by-two-digit products, which a
# model this size cannot learn in a minute and whose long answers would dominate the loss.
WARM_LEVELS: tuple[Level, ...] = tuple(lv for lv in LEVELS if not (lv.op == "*" and lv.a_digits == 3))

logger = logging.getLogger(__name__)


@dataclass
class WarmStartResult:
    """How the fit went: steps taken, the probe accuracy at each check, and the NLL curve."""

    steps: int
    probe_acc: list[tuple[int, float]]
    losses: list[float]
    reached_target: bool


def encode_answers(tok: Tokenizer, answers: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``answer + <eos>`` right-padded: (N, T) ids and (N, T) mask."""
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    rows = [[*e.ids, eos] for e in tok.encode_batch(answers, add_special_tokens=False)]
    return pad_rows(rows, pad, left=False)


def _fresh(
    rng: np.random.Generator, n: int, levels: Sequence[Level], exclude: frozenset[str]
) -> tuple[list[str], list[str]]:
    prompts, answers, _ = sample_problems(rng, n, levels)
    keep = [i for i, p in enumerate(prompts) if p not in exclude]
    return [prompts[i] for i in keep], [answers[i] for i in keep]


def warm_start(
    model: Qwen2ForCausalLM,
    tok: Tokenizer,
    *,
    max_steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    target: float = 0.4,
    check_every: int = 100,
    probe_size: int = 256,
    exclude: frozenset[str] = frozenset(),
    levels: Sequence[Level] = WARM_LEVELS,
) -> WarmStartResult:
    """Fit ``model`` in place on fresh problems until the probe accuracy reaches ``target``.

    ``exclude`` holds prompts (training and evaluation sets) never used for the fit or the probe.
    ``target <= 0`` disables the check (exactly ``max_steps`` steps).
    """
    rng = np.random.default_rng([seed, 0x5F7])
    probe_p, probe_a = _fresh(rng, probe_size, levels, exclude)
    device = next(model.parameters()).device
    probe_ids, probe_mask = (t.to(device) for t in encode_prompts(tok, probe_p))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    probe_gen = torch.Generator(device=device).manual_seed(seed + 17)
    longest = max(len(a) for a in probe_a) + 1
    losses: list[float] = []
    probes: list[tuple[int, float]] = []

    def probe() -> float:
        model.eval()
        resp, rmask = sample(
            model, probe_ids, probe_mask, max_new_tokens=longest, eos_id=tok.token_to_id(EOS),
            pad_id=tok.token_to_id(PAD), generator=probe_gen,
        )  # fmt: skip
        model.train()
        return float(score_batch(decode_responses(tok, resp, rmask), probe_a).mean())

    model.train()
    step = 0
    reached = False
    while step < max_steps:
        prompts, answers = _fresh(rng, batch_size, levels, exclude)
        p_ids, p_mask = (t.to(device) for t in encode_prompts(tok, prompts))
        a_ids, a_mask = (t.to(device) for t in encode_answers(tok, answers))
        lp = response_logprobs(model, p_ids, p_mask, a_ids, a_mask)  # (N, T)
        loss = -(lp * a_mask).sum() / a_mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        step += 1
        if target > 0 and step % check_every == 0:
            acc = probe()
            probes.append((step, acc))
            logger.info(
                "warm start step %d: nll %.3f, probe accuracy %.3f (target %.2f)",
                step,
                losses[-1],
                acc,
                target,
            )
            if acc >= target:
                reached = True
                break
    model.eval()
    if target > 0 and not reached:
        logger.warning("warm start stopped at max_steps=%d below the probe target %.2f", max_steps, target)
    return WarmStartResult(steps=step, probe_acc=probes, losses=losses, reached_target=reached)
