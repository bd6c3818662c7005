"""`select_to_budget`: whole groups in order, one group cut, exactly the target trained."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_verl.verl_plugin.trained_budget import select_to_budget


def test_groups_that_fit_are_taken_whole_in_order():
    choice = select_to_budget([4, 4, 4, 4, 4], 16)
    assert choice.whole == (0, 1, 2, 3) and choice.cut is None and choice.shortfall == 0


def test_the_first_group_that_does_not_fit_is_cut_to_the_remainder():
    choice = select_to_budget([10, 10], 16)
    assert choice.whole == (0,) and choice.cut == (1, 6)


def test_a_remainder_below_b_low_gives_a_whole_group_back_and_cuts_a_larger_one():
    sizes = [6, 9, 4, 2, 8]  # 6 + 9 = 15 leaves 1: give back 6, cut 8 to 7 (docstring example)
    choice = select_to_budget(sizes, 16)
    assert choice.whole == (1,) and choice.cut == (4, 7) and choice.trained(sizes) == 16


def test_too_few_ready_sessions_are_a_shortfall_not_an_error():
    choice = select_to_budget([3, 3], 16)
    assert choice.shortfall == 10 and choice.trained([3, 3]) == 6


def test_bad_sizes_are_refused_by_value():
    with pytest.raises(ValueError, match=r"sizes \[2, 0\]"):
        select_to_budget([2, 0], 4)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(2, 16), min_size=1, max_size=24), target=st.integers(2, 64))
def test_enough_ready_sessions_train_exactly_the_target_with_every_cut_group_of_two_or_more(sizes, target):
    choice = select_to_budget(sizes, target)
    used = set(choice.whole) | ({choice.cut[0]} if choice.cut else set())
    assert len(used) == len(choice.whole) + (1 if choice.cut else 0)  # no group twice
    if choice.cut:
        assert 2 <= choice.cut[1] < sizes[choice.cut[0]]
    if sum(sizes) >= target and choice.shortfall == 0:
        assert choice.trained(sizes) == target
    assert choice.trained(sizes) == target - choice.shortfall
    if sum(sizes) >= target and max(sizes) > target:
        assert choice.shortfall == 0  # a group larger than the target can always be cut to it
