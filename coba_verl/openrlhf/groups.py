"""OpenRLHF's group baselines over variable groups, and the experience maker that applies them.

OpenRLHF 0.11.2 groups a round's rewards with ``rewards.reshape(-1, n)``
(``trainer/ppo_utils/experience_maker.py:256-274``). With budgets [6, 2] that reshape mixes the two
groups silently. `grouped_rewards` computes the same four baselines per group of any size, and
`CobaExperienceMaker` then scales each sample's advantage by ``coba.group_weight``'s factor
(`coba_verl.core.group_weight.rollout_weights`, the rule veRL's and TRL's glue apply too)::

    group  [0, 0, 0, 0, 0, 0, 1, 1]         (N,) group of each sample, from the round's budgets [6, 2]
    mean   [m0, m0, m0, m0, m0, m0, m1, m1]  (N,) that group's mean, std and sum the same way
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from coba_verl.core.group_weight import check_group_weight, rollout_weights
from coba_verl.records.rounds import Round

__all__ = ["CobaExperienceMaker", "grouped_rewards"]

#: The estimators whose baseline is a statistic of the prompt's group (OpenRLHF's list).
GROUP_ESTIMATORS = ("group_norm", "dr_grpo", "reinforce_baseline", "rloo")


def grouped_rewards(
    rewards: torch.Tensor, group: torch.Tensor, estimator: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group baseline of OpenRLHF's ``estimator``, over groups of any size.

    Args:
        rewards: (N,) float rewards.
        group: (N,) int64 group of each sample in [0, G).
        estimator: ``--algo.advantage.estimator``; only the four group estimators change rewards.

    Returns:
        (shaped (N,), group_std (N,)): the shaped rewards, and each sample's group reward std
        (unbiased, as ``torch.std``), which OpenRLHF logs as ``group_reward_std``.
    """
    g = int(group.max()) + 1
    size = torch.bincount(group, minlength=g).to(rewards.dtype)  # (G,)
    total = torch.zeros(g, dtype=rewards.dtype).index_add_(0, group, rewards)  # (G,)
    mean = total / size
    sq = torch.zeros(g, dtype=rewards.dtype).index_add_(0, group, (rewards - mean[group]) ** 2)
    std = (sq / (size - 1)).sqrt()  # (G,) NaN for a group of one, as torch.std
    if estimator == "rloo":
        shaped = rewards - (total[group] - rewards) / (size[group] - 1)
    elif estimator in ("reinforce_baseline", "dr_grpo"):
        shaped = rewards - mean[group]
    elif estimator == "group_norm":
        shaped = (rewards - mean[group]) / (std[group] + 1e-9)
    else:
        shaped = rewards
    return shaped, std[group]


@contextlib.contextmanager
def _without_group_step(args: Any) -> Iterator[None]:
    """OpenRLHF's advantage code with its reshape-by-n step and its length penalties switched off.

    The rewards handed in are already penalised and shaped per group; the upstream method then
    only computes returns and, for reinforce_baseline, whitens across the batch as it always does.
    A group ``estimator`` is renamed so that none of upstream's baseline branches match
    (reinforce_baseline becomes reinforce, whose only branch is the batch whitening; the others a
    name no branch knows); the other estimators keep theirs. n = 1 makes the reshape a no-op.
    """
    adv, rollout, reward = args.algo.advantage, args.rollout, args.reward
    saved = (adv.estimator, rollout.n_samples_per_prompt, reward.overlong_buffer_len)
    saved_stop = reward.stop_properly_penalty_coef
    if adv.estimator in GROUP_ESTIMATORS:
        adv.estimator = "reinforce" if adv.estimator == "reinforce_baseline" else "coba_grouped"
    rollout.n_samples_per_prompt = 1
    reward.overlong_buffer_len = reward.stop_properly_penalty_coef = None
    try:
        yield
    finally:
        adv.estimator, rollout.n_samples_per_prompt, reward.overlong_buffer_len = saved
        reward.stop_properly_penalty_coef = saved_stop


class CobaExperienceMaker(RemoteExperienceMaker):
    """`RemoteExperienceMaker` whose group statistics follow the round's groups (OpenRLHF 0.11.2).

    The trainer sets `round` before each step and `group_weight` once. Extends `make_experience`
    (records each sample's raw score, for the tracker) and `compute_advantages_and_returns`
    (per-group baselines, then the group weight). A round of uniform budgets goes through
    upstream's method unchanged (its ``equal`` factors are all exactly 1).
    """

    round: Round | None = None
    #: ``coba.group_weight``: ``equal`` multiplies each sample's advantage by (N / M) / B_g.
    group_weight: str = "proportional"
    #: (N,) raw score of each sample (``scores`` when the reward gives them, else ``rewards``) in round
    #: order, filled by `make_experience`.
    raw_scores: np.ndarray | None = None

    def make_experience(self, samples_list):
        experiences = super().make_experience(samples_list)
        index = list(itertools.chain.from_iterable(e.index for e in experiences))
        raw = torch.cat(
            [(e.scores if e.scores is not None else e.rewards).float().reshape(-1) for e in experiences]
        )
        scores = np.empty(len(index), np.float64)
        scores[index] = raw.numpy()
        self.raw_scores = scores
        return experiences

    def compute_advantages_and_returns(self, experiences):
        return self._weight_groups(self._grouped_advantages(experiences))

    def _weight_groups(self, experiences):
        """Each sample's advantage times `rollout_weights` of the round's groups (after whitening).

        N samples and M prompts in the round, B_g the budget of sample's prompt g: under ``equal``
        every group's factors sum to N / M. ``returns`` stay as computed (a critic, under ``gae``,
        learns unweighted returns). Nothing is touched when every factor is 1.
        """
        current = self.round
        if current is None or check_group_weight(self.group_weight) == "proportional":
            return experiences
        weights = rollout_weights(current.group, self.group_weight)  # (N,) in round order
        if bool(np.all(weights == 1.0)):
            return experiences
        for experience in experiences:
            advantages = experience.advantages  # (b, T)
            factor = torch.as_tensor(weights[np.asarray(experience.index)], dtype=advantages.dtype)
            experience.advantages = advantages * factor.to(advantages.device)[:, None]
        return experiences

    def _grouped_advantages(self, experiences):
        current, args = self.round, self.strategy.args
        n = args.rollout.n_samples_per_prompt
        if current is None or bool(np.all(current.budgets == n)):
            return super().compute_advantages_and_returns(experiences)  # [n, n, ...] is upstream's reshape
        for experience in experiences:  # as upstream: at least FP32, then the length penalties
            experience.rewards = experience.rewards.to(
                torch.promote_types(experience.rewards.dtype, torch.float32)
            )
        apply_length_penalties(experiences, args)
        index = torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))  # (N,)
        rewards = torch.cat([e.rewards for e in experiences])  # (N,) in experience order
        group = torch.as_tensor(current.group, dtype=torch.long)[index]  # (N,)
        shaped, std = grouped_rewards(rewards, group, args.algo.advantage.estimator)
        sizes = [len(e.index) for e in experiences]
        for experience, part, part_std in zip(
            experiences, shaped.split(sizes), std.split(sizes), strict=True
        ):
            experience.rewards = part
            experience.info["group_reward_std"] = part_std
        with _without_group_step(args):
            return super().compute_advantages_and_returns(experiences)
