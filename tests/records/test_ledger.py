"""`RolloutLedger`: every session gets exactly one fate, and every step balances."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_verl.records.ledger import Fate, LedgerError, RolloutLedger


def test_the_docstring_example_balances_with_a_failed_and_an_in_flight_session():
    ledger = RolloutLedger()
    ledger.open_group("a", prompt_id=7, budget=3, version=0)
    ledger.open_group("b", prompt_id=2, budget=2, version=0)
    ledger.settle("a", {0: 12, 2: 9}, Fate.TRAINED, close=True)
    ledger.settle("b", {0: 4}, Fate.CUT)
    counts = ledger.close_step().counts()
    assert counts["rollouts_generated"] == 5
    assert (counts["trained_rollouts"], counts["cut_rollouts"], counts["failed_rollouts"]) == (2, 1, 1)
    assert counts["in_flight_rollouts"] == 1 and counts["tokens_generated"] == 25
    assert list(ledger.groups) == ["b"]


def test_a_failed_session_of_an_evicted_group_is_failed_and_not_also_evicted():
    ledger = RolloutLedger()
    ledger.open_group("g", prompt_id=0, budget=4, version=3)
    ledger.settle("g", {0: 5, 1: 5, 3: 5}, Fate.EVICTED, close=True)  # session 2 raised
    counts = ledger.close_step().counts()
    assert counts["evicted_rollouts"] == 3 and counts["failed_rollouts"] == 1
    assert counts["evicted_groups"] == 1


def test_evicted_budgets_hold_the_groups_with_an_evicted_session_not_the_wholly_failed_ones():
    """A group cleared with no finished session is failed (every session), not evicted: it adds to
    failed_rollouts and not to evicted_budgets, which holds B_i of the groups evicted_groups counts."""
    ledger = RolloutLedger()
    ledger.open_group("big", prompt_id=0, budget=12, version=0)  # every session raised
    ledger.open_group("small", prompt_id=1, budget=2, version=0)  # both finished, filtered
    ledger.open_group("mid", prompt_id=2, budget=6, version=0)  # 2 finished, 4 raised
    ledger.settle("big", {}, Fate.EVICTED, close=True)
    ledger.settle("small", {0: 3, 1: 3}, Fate.EVICTED, close=True)
    ledger.settle("mid", {0: 3, 4: 3}, Fate.EVICTED, close=True)
    tally = ledger.close_step()
    counts = tally.counts()
    assert counts["evicted_groups"] == 2 and counts["evicted_rollouts"] == 4
    assert counts["failed_rollouts"] == 12 + 4
    assert sorted(tally.evicted_budgets) == [2, 6]  # mean 4, not (12 + 2 + 6) / 3


def test_a_session_settled_twice_is_refused_naming_the_group_and_its_first_fate():
    ledger = RolloutLedger()
    ledger.open_group("g", prompt_id=0, budget=4, version=0)
    ledger.settle("g", {1: 3}, Fate.CUT)
    with pytest.raises(LedgerError, match=r"uid=g: sessions \[1\] are already cut"):
        ledger.settle("g", {1: 3, 2: 4}, Fate.TRAINED, close=True)


def test_a_session_beyond_the_budget_is_the_engine_ignoring_it_and_names_the_glues_hint():
    ledger = RolloutLedger(overrun_hint="Read __rollout_n__.")
    ledger.open_group("g", prompt_id=0, budget=2, version=0)
    with pytest.raises(LedgerError, match=r"sessions \[2\] but was allocated B_i=2.*Read __rollout_n__"):
        ledger.settle("g", {0: 1, 2: 1}, Fate.TRAINED, close=True)


def test_a_group_submitted_twice_or_settled_after_closing_is_refused():
    ledger = RolloutLedger()
    ledger.open_group("g", prompt_id=0, budget=2, version=0)
    with pytest.raises(LedgerError, match="submitted twice"):
        ledger.open_group("g", prompt_id=0, budget=2, version=0)
    ledger.settle("g", {0: 1, 1: 1}, Fate.TRAINED, close=True)
    with pytest.raises(LedgerError, match="not open"):
        ledger.settle("g", {}, Fate.EVICTED, close=True)


def test_groups_in_flight_carry_over_and_report_how_many_versions_behind_they_are_trained():
    ledger = RolloutLedger()
    ledger.open_group("old", prompt_id=0, budget=4, version=1)
    first = ledger.close_step()
    assert first.in_flight_after == 4 and first.counts()["in_flight_rollouts"] == 4
    ledger.open_group("new", prompt_id=1, budget=2, version=3)
    ledger.settle("old", {0: 1, 1: 1, 2: 1, 3: 1}, Fate.TRAINED, close=True, version=3)
    ledger.settle("new", {0: 1, 1: 1}, Fate.TRAINED, close=True, version=3)
    second = ledger.close_step()
    assert second.in_flight_before == 4 and second.balanced()
    assert sorted(second.versions_behind) == [0, 0, 2, 2, 2, 2]


def test_sessions_a_later_version_finished_are_dated_to_it_and_trained_fewer_versions_behind():
    """Partial rollout: sessions 1 and 2 of a group submitted under version 2 were aborted at the
    update and finished by version 3; their versions behind count from 3."""
    ledger = RolloutLedger()
    ledger.open_group("g", prompt_id=0, budget=4, version=2)
    ledger.settle("g", {3: 5}, Fate.CUT)
    group = ledger.settle(
        "g", {0: 4, 1: 9, 2: 8}, Fate.TRAINED, close=True, version=4, generated_by={1: 3, 2: 3}
    )
    assert group.generated_by == {0: 2, 1: 3, 2: 3, 3: 2}
    assert sorted(ledger.close_step().versions_behind) == [1, 1, 2]


def test_a_version_for_a_session_not_being_settled_is_refused():
    ledger = RolloutLedger()
    ledger.open_group("g", prompt_id=0, budget=2, version=1)
    with pytest.raises(LedgerError, match=r"uid=g: versions given for sessions \[1\]"):
        ledger.settle("g", {0: 3}, Fate.TRAINED, generated_by={1: 2})


def test_versions_from_the_oldest_open_groups_on_are_incomplete():
    ledger = RolloutLedger()
    assert ledger.oldest_open_version is None
    ledger.open_group("a", prompt_id=0, budget=2, version=3)
    ledger.open_group("b", prompt_id=1, budget=2, version=4)
    assert ledger.oldest_open_version == 3
    ledger.settle("a", {0: 1, 1: 1}, Fate.EVICTED, close=True)
    assert ledger.oldest_open_version == 4
    ledger.settle("b", {0: 1}, Fate.CUT)  # a session scored, the group still open
    assert ledger.oldest_open_version == 4
    ledger.settle("b", {1: 1}, Fate.TRAINED, close=True)
    assert ledger.oldest_open_version is None


def test_fail_open_fails_every_session_still_in_flight():
    ledger = RolloutLedger()
    ledger.open_group("a", prompt_id=0, budget=3, version=0)
    ledger.settle("a", {0: 2}, Fate.CUT)
    assert ledger.fail_open() == 2
    counts = ledger.close_step().counts()
    assert counts["failed_rollouts"] == 2 and counts["in_flight_rollouts"] == 0


def test_a_reopened_group_is_in_flight_from_before_the_step_and_not_generated_again():
    ledger = RolloutLedger()
    ledger.reopen("a", prompt_id=4, budget=3, version=2)
    ledger.restart("a", version=5)
    ledger.open_group("b", prompt_id=1, budget=2, version=5)
    ledger.settle("a", {0: 1, 1: 1, 2: 1}, Fate.TRAINED, close=True, version=6)
    tally = ledger.close_step()
    assert tally.in_flight_before == 3 and tally.generated == 2 and tally.balanced()
    assert tally.versions_behind == [1, 1, 1] and tally.in_flight_after == 2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.sampled_from(list(Fate)[:3]), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 3),
)
def test_any_sequence_of_submissions_and_settlements_balances_every_step(groups, steps_between):
    """Groups opened, partly settled (some sessions left to fail), closed across steps: each step's
    tally balances and, summed over the run, generated = the four fates + in flight."""
    ledger = RolloutLedger()
    tallies = []
    for n, (budget, fate, finished_gap, close) in enumerate(groups):
        uid = f"g{n}"
        ledger.open_group(uid, prompt_id=n, budget=budget, version=n)
        finished = {s: 1 for s in range(0, budget, finished_gap + 1)}
        ledger.settle(uid, finished, fate, close=close, version=n + steps_between)
        if n % 3 == 2:
            tallies.append(ledger.close_step())
    tallies.append(ledger.close_step())
    assert all(t.balanced() for t in tallies)
    settled = sum(sum(t.sessions[f] for f in Fate) for t in tallies)
    assert sum(t.generated for t in tallies) == settled + ledger.in_flight
    assert sum(t.generated for t in tallies) == sum(budget for budget, *_ in groups)
