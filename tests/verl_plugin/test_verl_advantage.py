"""veRL's V1 GRPO advantage on the variable group sizes CoBA-RL produces.

Runs ``verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories`` (what
``PPOTrainer._compute_advantage`` calls) on a batch whose prompts got 2, 3, 7 and 1 rollouts,
rows interleaved as a balanced batch would leave them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

EPS = 1e-6  # epsilon of core_algos.compute_grpo_outcome_advantage


def grpo_batch(scores_by_uid: dict[str, list[float]], seed: int = 0):
    """Rows for every (uid, session), shuffled; reward on the last valid response token."""
    rows = [(uid, s, score) for uid, scores in scores_by_uid.items() for s, score in enumerate(scores)]
    order = np.random.default_rng(seed).permutation(len(rows))
    rows = [rows[i] for i in order]
    length = 5
    lengths = torch.tensor([2 + (i % 4) for i in range(len(rows))])  # response lengths 2..5
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()  # [R, L]
    rewards = torch.zeros(len(rows), length)
    rewards[torch.arange(len(rows)), lengths - 1] = torch.tensor([score for _, _, score in rows])
    data = DataProto.from_dict(
        tensors={"response_mask": mask, "token_level_rewards": rewards},
        non_tensors={"uid": np.array([uid for uid, _, _ in rows], dtype=object)},
    )
    keys = [f"{uid}_{session}_0" for uid, session, _ in rows]
    return data, keys, rows


def expected_advantage(scores: list[float], score: float, norm_by_std: bool) -> float:
    """GRPO by hand: (s - mean_g) / (std_g + eps) with the unbiased std; a group of one keeps s."""
    if len(scores) == 1:
        return score
    group = torch.tensor(scores)
    centred = score - group.mean().item()
    return centred / (group.std().item() + EPS) if norm_by_std else centred


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_advantage_is_computed_per_variable_size_group(norm_by_std):
    scores_by_uid = {
        "a1": [1.0, 0.0],
        "b2": [1.0, 1.0, 0.0],
        "c3": [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        "d4": [1.0],
    }
    data, keys, rows = grpo_batch(scores_by_uid)
    out = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator="grpo", num_repeat=4, norm_adv_by_std_in_grpo=norm_by_std
    )
    advantages = out.batch["advantages"]
    mask = out.batch["response_mask"].bool()
    for r, (uid, _, score) in enumerate(rows):
        want = expected_advantage(scores_by_uid[uid], score, norm_by_std)
        assert torch.allclose(advantages[r][mask[r]], torch.full((int(mask[r].sum()),), want), atol=1e-5), uid
        assert torch.all(advantages[r][~mask[r]] == 0)


def test_group_of_one_gets_its_raw_score_which_is_why_min_rollouts_is_two():
    data, keys, rows = grpo_batch({"solo": [1.0], "pair": [1.0, 1.0]})
    out = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator="grpo", num_repeat=4)
    by_uid = {uid: out.batch["advantages"][r].sum().item() for r, (uid, _, _) in enumerate(rows)}
    assert by_uid["solo"] > 0.9  # a lone success is pushed up as if it were better than a baseline
    assert by_uid["pair"] == 0.0  # a zero-variance group carries no signal


def per_session_advantage(scores_by_uid: dict[str, list[float]], seed: int) -> dict[tuple[str, int], float]:
    data, keys, rows = grpo_batch(scores_by_uid, seed=seed)
    out = compute_advantage_for_multi_trajectories(data, keys, "grpo", num_repeat=16)
    adv, mask = out.batch["advantages"], out.batch["response_mask"]
    return {(uid, s): (adv[r].sum() / mask[r].sum()).item() for r, (uid, s, _) in enumerate(rows)}


def test_group_advantages_do_not_depend_on_other_groups_sizes():
    alone = per_session_advantage({"x": [1.0, 0.0, 0.0]}, seed=0)
    mixed = per_session_advantage(
        {"x": [1.0, 0.0, 0.0], "y": [0.0] * 9 + [1.0] * 20, "z": [0.0, 1.0]}, seed=3
    )
    for session in range(3):
        assert mixed[("x", session)] == pytest.approx(alone[("x", session)], abs=1e-6)
    assert alone[("x", 0)] == pytest.approx(expected_advantage([1.0, 0.0, 0.0], 1.0, True), abs=1e-5)


def test_scale_rows_on_the_flat_values_equals_the_padded_round_trip() -> None:
    """`scale_rows` on TransferQueue's jagged advantages gives what padding them, multiplying by the
    factor and unpadding with veRL's ``response_to_nested`` gives (the route it replaced)."""
    from verl.workers.utils.padding import response_to_nested

    from coba_verl.verl_plugin.hooks.advantage import scale_rows

    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(n, generator=gen) for n in (3, 1, 5, 2)]
    advantages = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    mask = torch.nested.as_nested_tensor(
        [torch.ones(len(r), dtype=torch.int64) for r in rows], layout=torch.jagged
    )
    factors = np.array([0.75, 1.0, 2.0, 1.0 / 3.0])
    scaled = scale_rows(advantages, factors)
    padded = advantages.to_padded_tensor(0.0) * torch.as_tensor(factors, dtype=torch.float32)[:, None]
    reference = response_to_nested(padded, mask)
    assert scaled.is_nested and torch.equal(scaled.offsets(), advantages.offsets())
    for mine, theirs, row, f in zip(scaled.unbind(), reference.unbind(), rows, factors, strict=True):
        assert torch.equal(mine, theirs)
        torch.testing.assert_close(mine, row * float(f))
    dense = torch.randn(4, 3, generator=gen)
    torch.testing.assert_close(
        scale_rows(dense, factors), dense * torch.as_tensor(factors, dtype=torch.float32)[:, None]
    )
