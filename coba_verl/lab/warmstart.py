"""Supervised warm start: teach the random model the answer format and the easy levels.

A randomly initialised model solves nothing, so every GRPO group would have zero reward and zero
gradient, and allocation would have nothing to act on. Real RL runs start from an instruct
model whose pass rates already span 0 to 1; a short cross-entropy fit on freshly drawn problems
(the same level mixture, never the training or evaluation prompts themselves) reproduces that:
it is long enough for the short sums to be solved almost always, and too short for the products
and long differences, which stay mostly or entirely unsolved.

Loss: token-mean negative log-likelihood of ``answer + <eos>`` given ``<bos> + prompt``.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from coba_verl.lab.model import response_logprobs
from coba_verl.lab.task import sample_problems
from coba_verl.lab.tokenizer import EOS, PAD, encode_prompts

__all__ = ["encode_answers", "warm_start"]

logger = logging.getLogger(__name__)


def encode_answers(tok: Tokenizer, answers: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``answer + <eos>`` right-padded: (N, T) ids and (N, T) mask."""
    eos, pad = tok.token_to_id(EOS), tok.token_to_id(PAD)
    rows = [[*e.ids, eos] for e in tok.encode_batch(answers, add_special_tokens=False)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def warm_start(
    model: Qwen2ForCausalLM,
    tok: Tokenizer,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[float]:
    """Fit ``model`` in place for ``steps`` AdamW steps on fresh problems; returns the loss curve.

    ``exclude`` holds prompts (training and evaluation sets) that are never used for the fit.
    The learning rate decays linearly to 10 % over the run.
    """
    rng = np.random.default_rng([seed, 0x5F7])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - 0.9 * s / max(1, steps))
    model.train()
    losses: list[float] = []
    for step in range(steps):
        prompts, answers, _ = sample_problems(rng, batch_size)
        keep = [i for i, p in enumerate(prompts) if p not in exclude]
        p_ids, p_mask = encode_prompts(tok, [prompts[i] for i in keep])
        a_ids, a_mask = encode_answers(tok, [answers[i] for i in keep])
        lp = response_logprobs(model, p_ids, p_mask, a_ids, a_mask)  # (N, T)
        loss = -(lp * a_mask).sum() / a_mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if (step + 1) % max(1, steps // 5) == 0:
            logger.info("warm start %d/%d: nll %.3f", step + 1, steps, float(loss))
    model.eval()
    return losses
