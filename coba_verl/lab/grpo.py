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

from dataclasses import dataclass

import numpy as np
import torch
from transformers import Qwen2ForCausalLM
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig
from verl.workers.config.actor import PolicyLossConfig

from coba_verl.arithmetic.model import response_logprobs
from coba_verl.core.group_weight import check_group_weight, rollout_weights

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

    Returns:
        metrics under ``actor/...`` (loss, clip fractions, KL to the old policy, gradient norm).
    """
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
