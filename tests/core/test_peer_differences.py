"""Where our allocations differ from the peers' code on purpose (README, "Implementation details").

Peers: the authors' release (Within-yao/CoBA-RL @aa6b834, ``recipe/coba_rl/budget_allocators.py``)
and Knapsack-RL (liziniu/KnapsackRL @ca5d5f5, ``verl/trainer/ppo/exploration_utils.py``). Each
test gives the peer's output in a comment, as measured on that code; ours is what is asserted.

Examples with B_low = 1 go through the strategy's own function (`allocate_release`,
`allocate_knapsack`) rather than `coba_verl.allocate`, whose GRPO entry point may refuse B_low < 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl import allocate
from coba_verl.core.knapsack import allocate_knapsack
from coba_verl.core.release import allocate_release
from coba_verl.core.values import CobaValue

NAN = float("nan")


def release(p, total, low, up):
    """Our ``coba_release`` at alpha = 2, beta = 5, adaptive tau, as `allocate` runs it."""
    budgets, _ = allocate_release(np.array(p, dtype=np.float64), total, low, up, CobaValue(2.0, 5.0))
    return budgets.tolist()


def knapsack(p, total, low, up):
    return allocate_knapsack(np.array(p, dtype=np.float64), total, low, up).tolist()


# 1. coba_release: rollouts a cap refuses inside a bucket.
def test_release_resplits_what_a_cap_refuses_by_one_minus_p_inside_the_bucket():
    # All three are in the band; its optimiser gives [2, 15, 2] and the fallback has 4 left.
    # Floors by 1 - p: [1, 2, 0]; the cap lets the p = 0.25 prompt take only 1, so 2 are still
    # unplaced, and we split them again by 1 - p over the prompts with room: both to p = 0.5.
    # Release: [4, 16, 3] (its one even pass gives p = 0.5 and p = 0.99 one each, and would pass
    # anything still refused on to the very easy bucket).
    p = [0.5, 0.25, 0.99]
    assert release(p, 23, 2, 16) == [5, 16, 2]
    assert allocate(p, 23, 2, 16, strategy="coba_release", alpha=2, beta=5).tolist() == [5, 16, 2]


# 2. coba_release: fallback weights are exactly 1 - p.
def test_release_fallback_gives_an_always_solved_prompt_no_proportional_share():
    # Both very easy; weights 1 - p = [0, 0.005] split the surplus of 2 exactly.
    # Release: [2, 2] (weight 1 - clip(p, 1e-6, 1 - 1e-6) = 1e-6 for p = 1, so the floors lose
    # one rollout and its even pass hands it to the first prompt, the p = 1 one).
    assert release([1.0, 0.995], 4, 1, 3) == [1, 3]
    # The same at B_low = 2 through the public call. Release: [3, 3].
    assert allocate([1.0, 0.995], 6, 2, 4, strategy="coba_release", alpha=2, beta=5).tolist() == [2, 4]


def test_release_rounding_leftovers_still_go_one_by_one_in_batch_order():
    # Weight 0 removes only the proportional share: floors of 3 * [0, 5/9, 4/9] = [0, 1, 1]
    # leave one rollout, which goes to the first prompt with room, here the p = 1 one.
    assert release([1.0, 0.995, 0.996], 6, 1, 3) == [2, 2, 2]


# 3. knapsack: prompts without history.
def test_knapsack_surplus_for_never_solved_prompts_skips_prompts_without_history():
    # Unseen gets n = 4, the p = 0 prompt B_low = 2 plus the whole surplus of 2.
    # Knapsack-RL: [3, 5] (it stores an unseen prompt's rate as 0.0, so both share the surplus).
    assert knapsack([0.0, NAN], 8, 2, 16) == [4, 4]
    assert allocate([0.0, NAN], 8, 2, 16, strategy="knapsack").tolist() == [4, 4]


# 4. knapsack: a total that is not a multiple of M, with unseen prompts.
def test_knapsack_unseen_prompt_gets_total_floordiv_m_wherever_it_sits():
    # n = 3 // 2 = 1 for the unseen prompt; the leftover rollout goes to the knapsack.
    # Knapsack-RL: [1, 2] (with n = total // M; it never sees such totals: it spends M * n).
    # Before this was pinned we gave [2, 1]: the unseen prompt took the remainder for being first.
    assert knapsack([NAN, 0.02], 3, 1, 2) == [1, 2]
    assert knapsack([0.02, NAN], 3, 1, 2) == [2, 1]
    assert allocate([NAN, 0.02], 5, 2, 3, strategy="knapsack").tolist() == [2, 3]


# What the peers do that we refuse or fix.
@pytest.mark.parametrize(
    ("total", "peer"),
    [
        (5, "[2, 2, 1]: a group of one, below B_low"),
        (400, "[128, 128, 128]: sums to 384, 16 rollouts dropped"),
    ],
)
def test_release_infeasible_total_raises(total, peer):
    with pytest.raises(ValueError, match=rf"total={total} is infeasible for M=3 prompts"):
        release([0.5, 0.5, 0.5], total, 2, 128)


def test_release_never_drops_rollouts_when_the_caps_bind():
    # Release: [8, 5], sum 13 (its last even pass asks 2 of the first prompt, which has room
    # for 1, and does not try again).
    assert release([0.0, 0.0], 14, 2, 8) == [7, 7]


def test_knapsack_never_exceeds_the_cap():
    # Knapsack-RL: [1, 3] (its DP can place 1 of the 2 left; the rest goes evenly to the
    # effective prompts with no cap check).
    assert knapsack([0.0, 0.02], 4, 1, 2) == [2, 2]


def test_knapsack_gives_the_whole_budget_to_the_knapsack_when_every_prompt_is_effective():
    # est = 3 < 4 left, and no p = 0 or p = 1 prompt to take the difference.
    # Knapsack-RL: divides by zero, then fails its own assertion (it would return [5]).
    assert knapsack([0.5], 6, 2, 8) == [6]
