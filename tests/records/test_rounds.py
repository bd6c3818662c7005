"""`Round`: the one record of a round every glue holds (TRL's planned and unfinished rounds,
OpenRLHF's generated round)."""

from __future__ import annotations

import numpy as np

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.records.rounds import Round, group_index


def test_rollouts_come_in_group_order_with_their_prompts_tracker_ids():
    allocation = BudgetAllocator(CobaConfig(max_rollouts=8), 10).allocate([7, 2], 5)
    allocation.budgets = np.array([3, 2])
    plan = Round(ids=np.array([7, 2]), allocation=allocation)
    assert plan.budgets.tolist() == [3, 2]
    assert plan.group.tolist() == [0, 0, 0, 1, 1] == group_index([3, 2]).tolist()
    assert plan.rollout_ids.tolist() == [7, 7, 7, 2, 2]


def test_for_ids_reorders_every_per_prompt_field_and_refuses_other_prompts():
    allocation = BudgetAllocator(CobaConfig(max_rollouts=8), 5).allocate([3, 0, 4], 12)
    allocation.budgets = np.array([5, 2, 5])
    allocation.pass_rates = np.array([0.1, 0.2, 0.3])
    allocation.lengths = np.array([10.0, 20.0, 30.0])
    plan = Round(ids=np.array([3, 0, 4]), allocation=allocation)
    again = plan.for_ids(np.array([0, 4, 3]))
    assert again is not None
    assert again.budgets.tolist() == [2, 5, 5]
    assert again.pass_rates.tolist() == [0.2, 0.3, 0.1] and again.lengths.tolist() == [20.0, 30.0, 10.0]
    assert plan.for_ids(np.array([0, 4, 1])) is None and plan.for_ids(np.array([0, 4])) is None
