"""`select_to_budget`: whole groups in order, one group cut, exactly the target trained."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_verl.core.trained_budget import (
    random_sessions_to_keep,
    select_by_age,
    select_to_budget,
    sessions_to_keep,
)


def test_groups_that_fit_are_taken_whole_in_order():
    choice = select_to_budget([4, 4, 4, 4, 4], 16)
    assert choice.whole == (0, 1, 2, 3) and choice.cuts == () and choice.shortfall == 0


def test_the_first_group_that_does_not_fit_is_cut_to_the_remainder():
    choice = select_to_budget([10, 10], 16)
    assert choice.whole == (0,) and choice.cuts == ((1, 6),)


def test_a_remainder_below_b_low_gives_a_whole_group_back_and_cuts_a_larger_one():
    sizes = [6, 9, 4, 2, 8]  # 6 + 9 = 15 leaves 1: give back 6, cut 8 to 7 (docstring example)
    choice = select_to_budget(sizes, 16)
    assert choice.whole == (1,) and choice.cuts == ((4, 7),) and choice.trained(sizes) == 16


def test_a_remainder_below_b_low_no_swap_can_fill_cuts_a_whole_group_and_adds_a_skipped_one():
    sizes = [2, 2, 2, 2, 2, 2, 3, 2]  # 2 x 6 + 3 = 15 leaves 1; only 2s are left over
    choice = select_to_budget(sizes, 16)
    assert choice.shortfall == 0 and choice.trained(sizes) == 16
    assert choice.cuts == ((6, 2),) and 7 in choice.whole  # the 3 cut to 2, the last 2 whole


def test_too_few_ready_sessions_are_a_shortfall_not_an_error():
    choice = select_to_budget([3, 3], 16)
    assert choice.shortfall == 10 and choice.trained([3, 3]) == 6
    odd = select_to_budget([2, 2, 2, 2], 7)  # groups of two cannot make an odd count
    assert odd.shortfall == 1 and odd.trained([2, 2, 2, 2]) == 6


def test_a_skipped_group_smaller_than_b_low_is_never_cut_up_to_b_low():
    """[8, 3] to 10 with B_low 4: cutting the 8 to 6 and the 3 "to 4" would train 9 and say 10."""
    sizes = [8, 3]
    choice = select_to_budget(sizes, 10, min_size=4)
    assert choice.shortfall == 0 and choice.trained(sizes) == 10
    assert all(min(4, sizes[p]) <= keep <= sizes[p] for p, keep in choice.cuts)
    assert choice == select_to_budget(sizes, 10, min_size=4)  # the 3 whole, the 8 cut to 7
    assert choice.whole == (1,) and choice.cuts == ((0, 7),)


def test_a_remainder_the_greedy_cannot_place_is_found_by_the_exact_search():
    sizes = [1, 1, 1, 20]  # 1 + 1 + 1 leaves 2 < B_low 4, and no 1 can be swapped for the 20
    choice = select_to_budget(sizes, 5, min_size=4)
    assert choice.shortfall == 0 and choice.trained(sizes) == 5
    assert choice.cuts == ((3, 4),) and choice.whole == (0,)


def test_bad_sizes_are_refused_by_value():
    with pytest.raises(ValueError, match=r"sizes \[2, 0\]"):
        select_to_budget([2, 0], 4)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(2, 16), min_size=1, max_size=24), target=st.integers(2, 64))
def test_enough_ready_sessions_train_exactly_the_target_with_every_cut_group_of_two_or_more(sizes, target):
    choice = select_to_budget(sizes, target)
    used = list(choice.whole) + [position for position, _ in choice.cuts]
    assert len(used) == len(set(used))  # no group twice
    assert all(2 <= keep < sizes[position] for position, keep in choice.cuts)
    assert choice.trained(sizes) == target - choice.shortfall
    if sum(sizes) >= target and max(sizes) > target:
        assert choice.shortfall == 0  # a group larger than the target can always be cut to it
    if sum(sizes) >= target and any(s >= 3 for s in sizes):
        assert choice.shortfall == 0  # with one group of three or more, any target is reachable


def one_cut_solution_exists(sizes: list[int], target: int, min_size: int) -> bool:
    """Brute force: whole groups W and at most one group c cut to k in [min_size, size_c) sum to target."""
    for r in range(len(sizes) + 1):
        for whole in itertools.combinations(range(len(sizes)), r):
            left = target - sum(sizes[i] for i in whole)
            if left == 0:
                return True
            if any(c not in whole and min_size <= left < sizes[c] for c in range(len(sizes))):
                return True
    return False


@settings(max_examples=400, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    target=st.integers(1, 48),
    min_size=st.integers(2, 6),
)
def test_any_b_low_and_sizes_from_one_cut_only_to_b_low_or_more_and_meet_the_target_when_possible(
    sizes, target, min_size
):
    choice = select_to_budget(sizes, target, min_size)
    used = list(choice.whole) + [position for position, _ in choice.cuts]
    assert len(used) == len(set(used))  # no group twice
    assert all(min_size <= keep < sizes[position] for position, keep in choice.cuts)
    assert choice.trained(sizes) == target - choice.shortfall and choice.shortfall >= 0
    assert (choice.shortfall == 0) == one_cut_solution_exists(sizes, target, min_size) or (
        choice.shortfall == 0 and len(choice.cuts) == 2  # the greedy's two cuts reach what one cannot
    )


def test_a_cut_group_keeps_its_success_share_as_closely_as_the_cut_allows():
    one_in_eight = {s: float(s == 5) for s in range(8)}
    assert sessions_to_keep(one_in_eight, 4) == {0, 1, 2, 5}  # 1 in 4: the closest to 1/8 with a success
    assert sessions_to_keep(one_in_eight, 2) == {0, 5}  # the spread survives
    mostly_pass = {0: 0.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 1.0}  # 4 in 6
    assert sessions_to_keep(mostly_pass, 3) == {0, 1, 2}  # 2 in 3


@settings(max_examples=300, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=16), st.data())
def test_kept_successes_are_the_groups_share_rounded_keeping_one_of_each(outcomes, data):
    keep = data.draw(st.integers(1, len(outcomes)))
    values = {s: float(o) for s, o in enumerate(outcomes)}
    kept = sessions_to_keep(values, keep)
    assert len(kept) == keep and kept <= set(values)
    successes, share = sum(values[s] for s in kept), sum(outcomes) / len(outcomes)
    spread = 0 < sum(outcomes) < len(outcomes)
    if spread and keep >= 2:
        assert 1 <= successes <= keep - 1
        assert abs(successes - keep * share) < 1 or successes in (1, keep - 1)
    else:
        assert abs(successes - keep * share) <= 1


def test_whole_first_takes_whole_groups_that_make_the_target_before_cutting_one():
    sizes = [6, 9, 4, 2, 8]  # greedy: 6 + 9, then a cut; whole groups such as 6 + 2 + 8 make 16
    assert select_to_budget(sizes, 16).cuts != ()
    choice = select_to_budget(sizes, 16, whole_first=True)
    assert choice.cuts == () and sum(sizes[i] for i in choice.whole) == 16
    fallback = select_to_budget([5, 7], 6, whole_first=True)  # no whole choice: cut as before
    assert fallback.whole == () and fallback.cuts == ((1, 6),)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8), target=st.integers(1, 48))
def test_whole_first_cuts_only_when_no_whole_groups_make_the_target(sizes, target):
    choice = select_to_budget(sizes, target, whole_first=True)
    whole_exists = any(
        sum(sizes[i] for i in combo) == target
        for r in range(1, len(sizes) + 1)
        for combo in itertools.combinations(range(len(sizes)), r)
    )
    assert (choice.cuts == () and choice.shortfall == 0) == whole_exists
    assert choice.trained(sizes) == target - choice.shortfall


def most_trained_by_brute_force(sizes: list[int], target: int, min_size: int) -> int:
    """The most sessions <= target that whole groups and at most two cut groups (each keeping k with
    min_size <= k < its size) train, by trying every group as out, whole or cut."""
    best = 0
    for fates in itertools.product(("out", "whole", "cut"), repeat=len(sizes)):
        cut = [sizes[i] for i, fate in enumerate(fates) if fate == "cut"]
        if len(cut) > 2 or any(size <= min_size for size in cut):
            continue
        whole = sum(sizes[i] for i, fate in enumerate(fates) if fate == "whole")
        low, high = whole + min_size * len(cut), whole + sum(size - 1 for size in cut)
        if low <= target:
            best = max(best, min(target, high))
    return best


def test_two_groups_cut_when_no_whole_group_and_one_cut_make_the_target():
    sizes = [1, 4, 4]  # 1 + 4 leaves 1 < B_low 3; no whole 4 can be swapped; 3 + 3 makes 6
    choice = select_to_budget(sizes, 6, min_size=3)
    assert choice.shortfall == 0 and choice.trained(sizes) == 6
    assert choice.whole == () and choice.cuts == ((1, 3), (2, 3))


@settings(max_examples=400, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    target=st.integers(1, 30),
    min_size=st.integers(1, 5),
    whole_first=st.booleans(),
)
def test_the_step_trains_the_most_that_whole_groups_and_at_most_two_cut_groups_can(
    sizes, target, min_size, whole_first
):
    choice = select_to_budget(sizes, target, min_size, whole_first=whole_first)
    used = list(choice.whole) + [position for position, _ in choice.cuts]
    assert len(used) == len(set(used)) and len(choice.cuts) <= 2
    assert all(min_size <= keep < sizes[position] for position, keep in choice.cuts)
    assert choice.trained(sizes) == target - choice.shortfall
    assert choice.trained(sizes) == most_trained_by_brute_force(sizes, target, min_size)


def test_by_age_trains_an_older_submission_before_whole_groups_of_a_newer_one():
    sizes, steps = [7, 5, 4, 4], [1, 1, 2, 2]
    assert select_to_budget(sizes, 8, whole_first=True).whole == (2, 3)  # step 1's groups would wait
    choice = select_by_age(sizes, steps, 8)
    assert choice.whole == () and choice.cuts == ((0, 6), (1, 2))


def test_by_age_prefers_whole_groups_within_the_newest_submission_it_trains_from():
    sizes, steps = [6, 4, 5, 6], [1, 2, 2, 2]  # 6 from step 1; of step 2, 4 + 6 make the other 10
    choice = select_by_age(sizes, steps, 16)
    assert choice.cuts == () and choice.whole == (0, 1, 3)


def test_by_age_refuses_groups_out_of_age_order():
    with pytest.raises(ValueError, match=r"steps \[2, 1\] must be non-decreasing"):
        select_by_age([3, 3], [2, 1], 4)


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 10)), min_size=1, max_size=7),
    target=st.integers(1, 40),
    min_size=st.integers(2, 4),
)
def test_by_age_never_trains_a_group_while_an_older_ready_one_waits(groups, target, min_size):
    """Oldest-first by submission step, as veRL's async buffer: once the update trains a group of
    step s, every ready group of a step before s trains too (whole or cut), unless the newest step's
    groups cannot make the rest (the documented fallback to the ordered rule)."""
    groups = sorted(groups)  # (step, size), oldest first
    steps, sizes = [s for s, _ in groups], [b for _, b in groups]
    choice = select_by_age(sizes, steps, target, min_size)
    trained = set(choice.whole) | {position for position, _ in choice.cuts}
    assert choice.trained(sizes) == target - choice.shortfall
    assert choice.trained(sizes) == most_trained_by_brute_force(sizes, target, min_size)
    boundary = next((s for s in sorted(set(steps)) if sum(b for t, b in groups if t <= s) > target), None)
    if boundary is None:  # every ready group fits: all of them train
        assert trained == set(range(len(sizes)))
        return
    rest = target - sum(b for t, b in groups if t < boundary)
    same = [b for t, b in groups if t == boundary]
    if most_trained_by_brute_force(same, rest, min_size) == rest:  # the newest step can make the rest
        assert {i for i, t in enumerate(steps) if t < boundary} <= trained
        assert all(steps[i] <= boundary for i in trained)


def test_a_random_cut_keeps_each_session_with_probability_keep_over_b_and_every_pair_alike():
    """6 sessions cut to 2 over 6,000 seeds: each session kept in about 1/3 of the draws and each of
    the 15 pairs in about 1/15 (a cut by score or by id would keep some never)."""
    sessions, keep, draws = [10, 11, 12, 13, 14, 15], 2, 6000
    kept = [frozenset(random_sessions_to_keep(sessions, keep, (7, seed))) for seed in range(draws)]
    assert all(len(k) == keep and k <= set(sessions) for k in kept)
    for s in sessions:  # binomial(6000, 1/3): sd 36.5, so +-5 sd
        assert abs(sum(s in k for k in kept) - draws / 3) < 185
    pairs = {frozenset(p): 0 for p in itertools.combinations(sessions, 2)}
    for k in kept:
        pairs[k] += 1
    sd = (draws * (1 / 15) * (14 / 15)) ** 0.5
    assert all(abs(count - draws / 15) < 5 * sd for count in pairs.values())


def test_a_random_cut_depends_on_its_seed_not_on_the_order_sessions_come_in():
    first = random_sessions_to_keep([3, 1, 4, 0, 2, 5, 6, 7], 3, (0, 4, 1))
    assert random_sessions_to_keep([7, 6, 5, 4, 3, 2, 1, 0], 3, (0, 4, 1)) == first
    assert len({frozenset(random_sessions_to_keep(range(8), 3, (0, 4, k))) for k in range(20)}) > 1


@pytest.mark.parametrize("keep", [0, 5])
def test_a_random_cut_refuses_a_keep_outside_the_group(keep):
    with pytest.raises(ValueError, match=f"keep={keep} must be between 1 and the group's 4 sessions"):
        random_sessions_to_keep(range(4), keep, (0,))
