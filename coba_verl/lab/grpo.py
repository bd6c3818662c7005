"""One GRPO policy update with veRL's own advantage estimator and clipped policy loss.

Nothing here re-implements GRPO: the group-normalised outcome advantage is
``verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage`` (looked up through
``get_adv_estimator_fn("grpo")``, as ``RayPPOTrainer`` does), the loss is the function
``get_policy_loss_fn(actor.policy_loss.loss_mode)`` returns (``vanilla``: PPO's clipped ratio
objective with dual clip, aggregated by ``agg_loss``), configured by a real veRL ``ActorConfig``.
What remains is the plumbing veRL's FSDP actor does on a GPU: recompute old log-probs, split the
rollouts into mini-batches, backward, clip the gradient norm, step the optimiser.

Shapes: R rollouts (prompts repeated by their budgets B_i, so group sizes vary), T response tokens.

    index:          (R,) int64   group key of each rollout (its prompt's row in the step batch)
    scores:         (R,) float32 verifier reward in {0, 1}
    response_mask:  (R, T) int64 1 up to and including <eos>
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import Qwen2ForCausalLM
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig
from verl.workers.config.actor import PolicyLossConfig

from coba_verl.arithmetic.model import response_logprobs
from coba_verl.core.group_weight import check_group_weight, rollout_weights
from coba_verl.lab.config import UPDATE_ROWS
from coba_verl.refusal import CobaRefusal

__all__ = ["RolloutBatch", "make_actor_config", "outcome_rewards", "zero_gradient_groups", "grpo_update"]


@dataclass
class RolloutBatch:
    """The rollouts of one step, grouped by ``index`` (rows of a group need not be contiguous)."""

    prompt_ids: torch.Tensor  # (R, P) left-padded
    prompt_mask: torch.Tensor  # (R, P)
    response_ids: torch.Tensor  # (R, T)
    response_mask: torch.Tensor  # (R, T)
    scores: np.ndarray  # (R,) float32
    index: np.ndarray  # (R,) int64


def make_actor_config(
    *,
    rollout_n: int,
    mini_batch_size: int,
    clip_ratio_low: float,
    clip_ratio_high: float,
    loss_mode: str = "vanilla",
) -> ActorConfig:
    """A veRL ``ActorConfig`` carrying the policy-loss settings the lab uses.

    ``loss_agg_mode="token-mean"`` and ``loss_mode="vanilla"`` (a name in veRL's policy-loss
    registry) are veRL's defaults; the asymmetric clip (0.2 / 0.28) is the paper's (spec §8).
    """
    return ActorConfig(
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
        strategy="fsdp",
        rollout_n=rollout_n,
        ppo_mini_batch_size=mini_batch_size,
        ppo_micro_batch_size_per_gpu=mini_batch_size,
        clip_ratio=clip_ratio_low,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        loss_agg_mode="token-mean",
        use_torch_compile=False,
        use_kl_loss=False,
        entropy_coeff=0.0,
    )


def outcome_rewards(scores: np.ndarray, response_mask: torch.Tensor) -> torch.Tensor:
    """Put each rollout's score on its last response token, as veRL's reward manager does: (R, T)."""
    device = response_mask.device
    rewards = torch.zeros(response_mask.shape, dtype=torch.float32, device=device)
    last = response_mask.sum(-1).clamp(min=1) - 1  # (R,) index of the last valid token
    rewards[torch.arange(len(scores), device=device), last] = torch.as_tensor(
        scores, dtype=torch.float32, device=device
    )
    return rewards


def zero_gradient_groups(scores: np.ndarray, index: np.ndarray) -> tuple[int, int]:
    """(groups whose scores are all equal, groups): GRPO advantages are 0 in the former."""
    order = np.argsort(index, kind="stable")
    idx, sc = index[order], scores[order]
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    lo = np.minimum.reduceat(sc, starts)
    hi = np.maximum.reduceat(sc, starts)
    return int(np.sum(lo == hi)), int(starts.size)


def grpo_update(
    model: Qwen2ForCausalLM,
    optimizer: torch.optim.Optimizer,
    batch: RolloutBatch,
    actor: ActorConfig,
    *,
    grad_clip: float = 1.0,
    group_weight: str = "proportional",
    rows: str = "all",
) -> dict[str, float]:
    """Advantages from veRL's GRPO estimator, then one pass of clipped policy-gradient mini-batches.

    ``group_weight`` (``coba.group_weight``) scales each rollout's advantage by
    `coba_verl.core.group_weight.rollout_weights` over the whole step's batch: ``proportional`` leaves
    it alone (the tensor is not touched), ``equal`` multiplies it by (R / G) / B_g. The factor is
    positive, and PPO's clipped (and dual-clipped) objective is homogeneous of degree 1 in the
    advantage, so scaling it scales the group's loss terms by exactly that factor.

    The rollouts are split, in order, into mini-batches of ``actor.ppo_mini_batch_size`` rows;
    each gets one optimiser step (veRL's ``ppo_epochs=1``). With one mini-batch the update is
    exactly on-policy (ratio 1); with several, later ones are clipped against the old policy.

    ``rows`` picks the rows each mini-batch runs: ``all`` (every one) or ``signal`` (only those
    whose advantage has a non-zero token, through the old log-prob pass too; then the prompt
    columns that are padding in all of them and the response columns past their longest response
    are cut). The gradient is the same: with m the response mask, N = sum_{i in mb, t} m_it
    the mini-batch's valid tokens and S = {i in mb : A_i != 0}, the vanilla token-mean loss is

        L = 1/N sum_{i in mb} sum_t m_it l_it,   l_it = max(-A_it r_it, -A_it clip(r_it)) (dual clip:
                                                  min(., -A_it c) where A_it < 0),

    and every branch of l_it is a multiple of A_it, so a row with A_i = 0 adds exactly 0 to L and to
    its gradient: L = 1/N sum_{i in S} sum_t m_it l_it. ``signal`` computes that sum with N still the
    whole mini-batch's count, handed to veRL's ``agg_loss`` through ``actor.global_batch_info``
    (``batch_num_tokens``; ``global_batch_size`` and ``loss_scale_factor`` as well, for the
    sequence-mean modes), restored afterwards. A mini-batch with S empty skips the forward pass but
    still steps the optimiser on explicit zero gradients, so AdamW's weight decay, momentum and
    step count move as under ``all`` (a ``None`` gradient would make AdamW skip the weights).
    Mini-batches are the same R rows in the same order either way. Metrics: ``pg_loss``,
    ``grad_norm`` and the clip fractions (0 on rows with A = 0, so the signal rows' means are
    scaled by their share of the N tokens) are those of ``all``; ``ppo_kl`` is over the signal
    rows only, averaged over the mini-batches that have any (NaN when none has). The result
    equals ``all``'s up to float rounding (other batch shapes), not bit for bit; only veRL's
    ``vanilla`` loss mode is accepted, the loss this argument is about.

    Returns:
        metrics under ``actor/...`` (loss, clip fractions, KL to the old policy, gradient norm).

    Raises:
        CobaRefusal: ``rows`` unknown, or ``signal`` with a loss mode other than ``vanilla``.
    """
    if rows not in UPDATE_ROWS:
        raise CobaRefusal(f"rows={rows!r} is unknown; use one of {', '.join(UPDATE_ROWS)}.")
    if rows == "signal" and actor.policy_loss.loss_mode != "vanilla":
        raise CobaRefusal(
            f"rows='signal' with loss_mode={actor.policy_loss.loss_mode!r}: leaving out rows with a "
            "zero advantage is exact for veRL's 'vanilla' clipped loss only; use rows='all'."
        )
    rewards = outcome_rewards(batch.scores, batch.response_mask)  # (R, T)
    adv_fn = core_algos.get_adv_estimator_fn(core_algos.AdvantageEstimator.GRPO)
    advantages, _ = adv_fn(token_level_rewards=rewards, response_mask=batch.response_mask, index=batch.index)
    if check_group_weight(group_weight) != "proportional":
        weights = torch.as_tensor(rollout_weights(batch.index, group_weight), dtype=advantages.dtype)  # (R,)
        advantages = advantages * weights.to(advantages.device)[:, None]  # (R, T)
    loss_fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    mask = batch.response_mask.float()
    r = len(batch.scores)
    mb = max(1, min(actor.ppo_mini_batch_size, r))
    if rows == "signal":
        check_normalisers_reach_the_loss(loss_fn, actor)
        return _signal_update(model, optimizer, batch, actor, advantages, loss_fn, mb=mb, grad_clip=grad_clip)
    with torch.no_grad():
        old_log_prob = (
            response_logprobs(
                model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
            )
            if mb < r
            else None
        )
    model.train()
    sums: dict[str, float] = {}
    n_mb = 0
    for start in range(0, r, mb):
        sl = slice(start, min(start + mb, r))
        log_prob = response_logprobs(
            model,
            batch.prompt_ids[sl],
            batch.prompt_mask[sl],
            batch.response_ids[sl],
            batch.response_mask[sl],
        )  # (r_mb, T)
        old = log_prob.detach() if old_log_prob is None else old_log_prob[sl]
        pg_loss, pg_metrics = loss_fn(
            old_log_prob=old,
            log_prob=log_prob,
            advantages=advantages[sl],
            response_mask=mask[sl],
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
        )
        optimizer.zero_grad(set_to_none=True)
        pg_loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        n_mb += 1
        for k, v in {
            **pg_metrics,
            "actor/pg_loss": float(pg_loss.detach()),
            "actor/grad_norm": float(grad_norm),
        }.items():
            sums[k] = sums.get(k, 0.0) + float(v)
    model.eval()
    return {k: v / n_mb for k, v in sums.items()}


def _rows(batch: RolloutBatch, keep: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], int]:
    """Rows ``keep`` (k,) of the batch as `response_logprobs` arguments, without the prompt columns
    that are padding in all of them (left) and the response columns past their longest response:
    both are masked, and the positions (`coba_verl.decoding.positions`) of the rest are unchanged.
    Also returns the kept response width T'."""
    p_mask, r_mask = batch.prompt_mask[keep], batch.response_mask[keep]  # (k, P), (k, T)
    used = torch.nonzero(p_mask.any(0)).squeeze(-1)
    first = min(int(used[0]) if len(used) else 0, p_mask.shape[1] - 1)
    valid = torch.nonzero(r_mask.any(0)).squeeze(-1)
    t = int(valid[-1]) + 1 if len(valid) else 1
    ids = (
        batch.prompt_ids[keep][:, first:],
        p_mask[:, first:],
        batch.response_ids[keep][:, :t],
        r_mask[:, :t],
    )
    return ids, t


def _normalisers(mask: torch.Tensor) -> dict[str, Any]:
    """What `all` divides a mini-batch's loss by, from its (r_mb, T) response mask: its valid tokens
    (``batch_num_tokens``, token-mean), its sequences with one (``global_batch_size``, the
    sequence-mean modes) and its width (``loss_scale_factor``, ``seq-mean-token-sum-norm``)."""
    return {
        "batch_num_tokens": mask.sum(),
        "global_batch_size": (mask.sum(-1) > 0).float().sum(),
        "loss_scale_factor": mask.shape[1],
    }


def check_normalisers_reach_the_loss(loss_fn: Callable[..., Any], actor: ActorConfig) -> None:
    """Refuse ``rows="signal"`` where veRL's loss ignores ``actor.global_batch_info``.

    ``signal`` leans on veRL's policy loss handing ``ActorConfig.global_batch_info`` to ``agg_loss``
    (veRL 0.9.1: ``agg_loss(..., **config.global_batch_info)``); a veRL that stopped would divide by
    the signal rows' tokens alone and change the gradient silently. Checked on two rows of two
    tokens, one with advantage 1 and one with 0, at ratio 1: the loss of the first row alone under
    `_normalisers` of both must equal the loss of both.

    Raises:
        CobaRefusal: the two differ.
    """
    adv = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    mask = torch.ones_like(adv)
    zeros = torch.zeros_like(adv)
    args = dict(loss_agg_mode=actor.loss_agg_mode, config=actor)
    with _normalised_by(actor):  # as `all` runs it: nothing set
        both, _ = loss_fn(old_log_prob=zeros, log_prob=zeros, advantages=adv, response_mask=mask, **args)
    with _normalised_by(actor, **_normalisers(mask)):
        first, _ = loss_fn(
            old_log_prob=zeros[:1], log_prob=zeros[:1], advantages=adv[:1], response_mask=mask[:1], **args
        )
    if not torch.allclose(both, first):
        raise CobaRefusal(
            f"rows='signal': veRL's policy loss ({actor.policy_loss.loss_mode}, {actor.loss_agg_mode}) does "
            "not divide by ActorConfig.global_batch_info as veRL 0.9.1's does, so leaving out rows with a "
            "zero advantage would change the gradient; use rows='all'."
        )


@contextmanager
def _normalised_by(actor: ActorConfig, **normalisers: Any) -> Iterator[None]:
    """``actor.global_batch_info`` (what veRL's ``agg_loss`` divides by; veRL's ``ppo_loss`` sets it
    in place per micro-batch) with ``normalisers`` where it sets none, as it was afterwards."""
    info = actor.global_batch_info
    saved = dict(info)
    info.update({k: v for k, v in normalisers.items() if saved.get(k) is None})
    try:
        yield
    finally:
        info.clear()
        info.update(saved)


def _signal_update(
    model: Qwen2ForCausalLM,
    optimizer: torch.optim.Optimizer,
    batch: RolloutBatch,
    actor: ActorConfig,
    advantages: torch.Tensor,
    loss_fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]],
    *,
    mb: int,
    grad_clip: float,
) -> dict[str, float]:
    """`grpo_update` with ``rows="signal"``: its mini-batches, each run on its rows with A != 0."""
    mask = batch.response_mask.float()  # (R, T)
    r = mask.shape[0]
    signal = torch.nonzero((advantages != 0).any(-1)).squeeze(-1)  # (k,) rows with a gradient
    old_log_prob = None
    if mb < r and len(signal):
        with torch.no_grad():
            ids, t = _rows(batch, signal)
            old_log_prob = mask.new_zeros(mask.shape)  # (R, T), filled on the signal rows only
            old_log_prob[signal, :t] = response_logprobs(model, *ids)
    model.train()
    clip_keys = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower")
    sums = dict.fromkeys((*clip_keys, "actor/pg_loss", "actor/grad_norm"), 0.0)
    kl, n_kl, n_mb = 0.0, 0, 0
    for start in range(0, r, mb):
        sl = slice(start, min(start + mb, r))
        keep = signal[(signal >= sl.start) & (signal < sl.stop)]  # (k_mb,)
        optimizer.zero_grad(set_to_none=True)
        if len(keep):
            ids, t = _rows(batch, keep)
            log_prob = response_logprobs(model, *ids)  # (k_mb, T')
            old = log_prob.detach() if old_log_prob is None else old_log_prob[keep, :t]
            tokens = mask[sl].sum()  # N: the whole mini-batch's valid tokens, as `all` divides by
            with _normalised_by(actor, **_normalisers(mask[sl])):
                pg_loss, pg_metrics = loss_fn(
                    old_log_prob=old,
                    log_prob=log_prob,
                    advantages=advantages[keep, :t],
                    response_mask=mask[keep, :t],
                    loss_agg_mode=actor.loss_agg_mode,
                    config=actor,
                )
            pg_loss.backward()
            share = float(mask[keep, :t].sum() / tokens)
            for k in clip_keys:
                sums[k] += float(pg_metrics.get(k, 0.0)) * share
            sums["actor/pg_loss"] += float(pg_loss.detach())
            kl, n_kl = kl + float(pg_metrics.get("actor/ppo_kl", 0.0)), n_kl + 1
        else:  # all advantages 0: the gradient `all` computes is exactly 0, not absent
            for p in model.parameters():
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
        sums["actor/grad_norm"] += float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
        optimizer.step()
        n_mb += 1
    model.eval()
    return {**{k: v / n_mb for k, v in sums.items()}, "actor/ppo_kl": kl / n_kl if n_kl else float("nan")}
