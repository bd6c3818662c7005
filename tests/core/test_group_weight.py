"""`coba_verl.core.group_weight`: the factor every framework multiplies advantages by."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from coba_verl.core import CobaConfig, group_weight, rollout_weights


def test_equal_factors_on_a_hand_worked_batch() -> None:
    # groups 7 (3 rollouts) and 3 (2 rollouts), interleaved: R = 5, G = 2
    w = rollout_weights(np.array([7, 7, 3, 7, 3]), "equal")
    np.testing.assert_allclose(w, [5 / 6, 5 / 6, 5 / 4, 5 / 6, 5 / 4])


@pytest.mark.parametrize("seed", range(5))
def test_equal_gives_every_group_the_same_sum_and_keeps_the_total(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 129, size=rng.integers(1, 40))
    index = rng.permutation(np.repeat(np.arange(sizes.size) * 11, sizes))  # keys need not be 0..G-1
    w = rollout_weights(index, "equal")
    _, inverse = np.unique(index, return_inverse=True)
    np.testing.assert_allclose(np.bincount(inverse, weights=w), index.size / sizes.size)
    assert w.sum() == pytest.approx(index.size)


def test_factor_is_exactly_one_for_equal_groups_and_for_proportional() -> None:
    index = np.repeat(np.arange(32), 16)
    assert np.array_equal(rollout_weights(index, "equal"), np.ones(512))
    assert np.array_equal(rollout_weights(np.array([0, 0, 1]), "proportional"), np.ones(3))
    assert np.array_equal(rollout_weights(np.array(["u1", "u1", "u2", "u2"]), "equal"), np.ones(4))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: rollout_weights(np.array([0, 1]), "even"),
            "coba.group_weight='even' is unknown; choose one of",
        ),
        (lambda: rollout_weights(np.array([]), "equal"), "index must be a non-empty 1-D array"),
        (lambda: CobaConfig(group_weight="sqrt"), "coba.group_weight='sqrt' is unknown"),
    ],
)
def test_raise_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_group_weight_is_read_by_every_strategy_without_a_warning(recwarn) -> None:
    for strategy in ("coba", "knapsack", "uniform", "static", "reverse", "coba_release"):
        assert CobaConfig(strategy=strategy, group_weight="equal").group_weight == "equal"
    assert not [w for w in recwarn if "group_weight" in str(w.message)]


def test_equal_is_the_default_group_weight() -> None:
    """Chosen by the pre-stated rule of the lab's study (docs/lab.md, "Group weight")."""
    assert CobaConfig().group_weight == "equal"
    assert CobaConfig.from_mapping({}).group_weight == "equal"


def test_old_spelling_tokens_reads_as_proportional_with_one_deprecation_warning(monkeypatch, caplog) -> None:
    """``tokens`` was ``proportional``'s name; it still works for a release, warned once per process."""
    monkeypatch.setattr(group_weight, "_warned_renames", set())
    with pytest.warns(DeprecationWarning, match="coba.group_weight='tokens' is deprecated.*'proportional'"):
        assert CobaConfig(group_weight="tokens").group_weight == "proportional"
    assert [r.levelname for r in caplog.records if "deprecated" in r.getMessage()] == ["WARNING"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second reading neither warns nor logs again
        assert CobaConfig(group_weight="tokens").group_weight == "proportional"
        assert np.array_equal(rollout_weights(np.array([0, 0, 1]), "tokens"), np.ones(3))
    assert len([r for r in caplog.records if "deprecated" in r.getMessage()]) == 1


def test_budget_unit_tokens_is_not_the_deprecated_group_weight(recwarn) -> None:
    coba = CobaConfig(budget_unit="tokens")
    assert (coba.budget_unit, coba.group_weight) == ("tokens", "equal")
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
