"""Every strategy, on any batch, spends exactly the budget within the bounds (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_verl import allocate
from coba_verl.core.config import STRATEGIES
from coba_verl.core.spread import spread_even, spread_weighted

RATES = st.one_of(st.sampled_from([0.0, 1.0, 0.5, 0.02, 0.995, float("nan")]), st.floats(0.0, 1.0))


@st.composite
def batches(draw):
    m = draw(st.integers(1, 24))
    low = draw(st.integers(2, 5))  # B_low >= 2: CobaConfig refuses less
    up = low + draw(st.integers(0, 40))
    total = draw(st.sampled_from([m * low, m * up, draw(st.integers(m * low, m * up))]))
    p = np.array(draw(st.lists(RATES, min_size=m, max_size=m)))
    return p, total, low, up


@pytest.mark.filterwarnings("ignore:solver='heap' does not change the budgets of strategy='uniform'")
@settings(max_examples=400, deadline=None)
@given(batches(), st.sampled_from(STRATEGIES), st.sampled_from(["fast", "heap"]))
def test_every_strategy_spends_exactly_the_budget_within_bounds(batch, strategy, solver):
    p, total, low, up = batch
    budgets = allocate(p, total, low, up, strategy=strategy, solver=solver)
    assert budgets.dtype == np.int64 and budgets.shape == p.shape
    assert int(budgets.sum()) == total
    assert budgets.min() >= low and budgets.max() <= up


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 10), min_size=1, max_size=12),
    st.integers(0, 60),
    st.integers(0, 10),
    st.booleans(),
)
def test_spread_never_exceeds_the_cap_and_returns_exactly_what_it_could_not_place(
    start, amount, up, weighted
):
    budgets = np.minimum(np.array(start, dtype=np.int64), up)
    before = budgets.copy()
    members = np.arange(budgets.size)
    if weighted:
        left = spread_weighted(budgets, members, np.linspace(1.0, 0.0, budgets.size), amount, up)
    else:
        left = spread_even(budgets, members, amount, up)
    assert budgets.max(initial=0) <= up and np.all(budgets >= before)
    assert int(budgets.sum() - before.sum()) + left == amount
    assert left == max(0, amount - int((up - before).sum()))
