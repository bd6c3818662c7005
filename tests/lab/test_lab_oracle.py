"""Oracle allocations from exact pass rates, and the shipped estimates measured (`coba_verl.lab.oracle`)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.core.allocator import allocate_from_rates
from coba_verl.core.capability import capability_shape
from coba_verl.core.knapsack import allocate_knapsack
from coba_verl.lab.config import LabConfig, RunSpec, parse_run_label
from coba_verl.lab.experiment import read_metrics, run_lab
from coba_verl.lab.oracle import ESTIMATION_KEYS, MeasuredAllocator, estimation_measures, oracle_allocation
from coba_verl.refusal import CobaRefusal

CFG = CobaConfig(strategy="coba", min_rollouts=2, max_rollouts=12)


def _signal(p: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(b * (1.0 - p**b - (1.0 - p) ** b)))


def test_signal_oracle_is_the_exact_optimum_of_rollouts_in_groups_with_a_spread() -> None:
    p = np.array([0.02, 0.3, 0.5, 0.97])
    total = 20
    got = oracle_allocation("signal", p, total, CFG).budgets
    feasible = [b for b in itertools.product(range(2, 13), repeat=4) if sum(b) == total]
    best = max(_signal(p, np.array(b)) for b in feasible)
    assert got.sum() == total and got.min() >= 2 and got.max() <= 12
    assert _signal(p, got) == pytest.approx(best, abs=1e-12)


def test_coba_oracle_takes_its_beta_from_the_exact_failure_rate_of_the_round() -> None:
    p = np.array([0.1, 0.2, 0.6, 0.9])
    out = oracle_allocation("coba", p, 24, CFG)
    alpha, beta = capability_shape(1.0 - p.mean(), CFG.kappa)  # F = 0.55 -> F_tilde = 0.55
    assert (out.alpha, out.beta) == pytest.approx((alpha, beta))
    assert out.alpha == pytest.approx(1 + 9 * 0.55)
    expected = allocate_from_rates(p, 24, CFG, shape=(alpha, beta)).budgets
    assert out.budgets.tolist() == expected.tolist() and out.strategy == "coba"


def test_knapsack_oracle_is_knapsack_rl_with_the_exact_rates_as_last_rates() -> None:
    p = np.array([0.001, 0.3, 0.5, 0.999, 0.7])
    cfg = CobaConfig(strategy="knapsack", min_rollouts=2, max_rollouts=12)
    got = oracle_allocation("knapsack", p, 30, CFG).budgets
    assert got.tolist() == allocate_knapsack(p, 30, 2, 12).tolist()
    assert got.tolist() == allocate_from_rates(p, 30, cfg, shape=(1, 1), last_pass_rates=p).budgets.tolist()


def test_estimation_measures_on_a_hand_example() -> None:
    p_hat = np.array([np.nan, 0.0, 1.0, 0.5, 0.25])
    p = np.array([0.4, 0.10, 0.99, 0.4, 0.45])
    out = estimation_measures(p_hat, p, np.array([1e-4, 0, 0, 2e-4, 0]), np.array([4, 4, 4, 4, 4]),
                              np.array([2, 6, 4, 4, 4]))  # fmt: skip
    assert out["est_mae"] == pytest.approx((0.10 + 0.01 + 0.10 + 0.20) / 4)
    assert out["est_seen"] == 4 and out["est_extreme"] == 2 and out["est_extreme_wrong"] == 1  # 0.10 in range
    assert out["est_rank_corr"] == pytest.approx(0.8)  # ranks (1, 4, 3, 2) against (1, 4, 2, 3)
    assert out["est_budget_moved"] == pytest.approx(4 / (2 * 20))
    assert out["exact_pass_mean"] == pytest.approx(p.mean()) and out["exact_bound_max"] == 2e-4


def _measured(oracle: str | None, rates: np.ndarray) -> tuple[MeasuredAllocator, BudgetAllocator]:
    inner = BudgetAllocator(CFG, num_prompts=8)
    inner.observe(np.repeat(np.arange(4), 4), np.array([1, 0, 0, 0] * 2 + [1, 1, 0, 0] * 2, float))
    inner.end_step()
    return MeasuredAllocator(inner, lambda ids: (rates[ids], np.zeros(ids.size)), oracle), inner


def test_a_measured_run_allocates_as_shipped_and_an_oracle_run_from_the_exact_rates() -> None:
    rates = np.array([0.05, 0.3, 0.5, 0.9, 0.2, 0.2, 0.2, 0.2])
    ids = np.array([0, 1, 2, 3])
    shipped, inner = _measured(None, rates)
    reference = BudgetAllocator(CFG, num_prompts=8)
    reference.tracker.load_state_dict(inner.tracker.state_dict())
    assert shipped.allocate(ids, 24).budgets.tolist() == reference.allocate(ids, 24).budgets.tolist()
    oracle, _ = _measured("signal", rates)
    got = oracle.allocate(ids, 24)
    assert got.budgets.tolist() == oracle_allocation("signal", rates[ids], 24, CFG).budgets.tolist()
    assert got.extra["oracle"] == 1.0
    m = oracle.step_measures()
    assert m["est_seen"] == 4 and m["est_mae"] == pytest.approx((0.2 + 0.05 + 0 + 0.4) / 4)
    assert all(math.isnan(v) for v in oracle.step_measures().values())  # no allocation since


def test_oracle_labels_round_trip_and_wrong_ones_are_refused_by_name() -> None:
    assert parse_run_label("coba+oracle") == RunSpec("coba", oracle=True)
    assert parse_run_label("signal+oracle").label == "signal+oracle"
    assert parse_run_label("signal+oracle").allocator_strategy == "uniform"
    assert parse_run_label("knapsack+oracle@0.5").label == "knapsack+oracle@0.5"
    with pytest.raises(CobaRefusal, match=r"strategy 'uniform' in 'uniform\+oracle' has no oracle"):
        parse_run_label("uniform+oracle")
    with pytest.raises(CobaRefusal, match=r"strategy 'signal' is unknown"):
        parse_run_label("signal")
    with pytest.raises(CobaRefusal, match=r"takes neither \+token_budget nor \+skip"):
        parse_run_label("coba+token_budget+oracle")
    with pytest.raises(CobaRefusal, match=r"worked levels have many correct strings"):
        LabConfig.from_scenario("worked", runs=["uniform", "coba+oracle"])


TINY = {
    "hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "warm_steps": 3, "warm_batch_size": 16,
    "n_train": 48, "n_eval": 16, "prompts_per_step": 8, "rollouts_per_prompt": 4, "eval_every": 4,
    "eval_samples": 1, "snapshot_steps": 2,
}  # fmt: skip


@pytest.mark.parametrize("dapo", [False, True])
def test_every_run_logs_the_estimates_against_exact_rates_and_oracles_allocate_from_them(
    tmp_path, dapo
) -> None:
    cfg = LabConfig(
        **TINY, runs=["uniform", "coba", "coba+oracle", "signal+oracle"], seeds=[0], steps=8, dapo=dapo
    )
    rows = [r for r in read_metrics(run_lab(cfg, tmp_path / "run", cache_dir=None, progress=False).folder)
            if r["step"] > 0]  # fmt: skip
    assert {r["run"] for r in rows} == set(cfg.runs)
    for r in rows:
        assert set(ESTIMATION_KEYS) <= set(r)
        if r["exact_pass_mean"] is not None:
            assert 0.0 <= r["exact_pass_mean"] <= 1.0 and r["exact_bound_max"] < 1.0
    later = [r for r in rows if r["step"] > 6 and r["est_seen"]]  # epoch 2 (48 prompts, 8 a step)
    assert later and all(r["est_mae"] is not None and 0.0 <= r["est_mae"] <= 1.0 for r in later)
    assert {r["alloc_strategy"] for r in rows if r["run"] == "signal+oracle"} == {"signal"}
    assert {r["alloc_strategy"] for r in rows if r["run"] == "coba+oracle"} == {"coba"}  # no cold start
