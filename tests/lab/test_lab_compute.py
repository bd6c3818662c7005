"""Compute to target: generated rollouts and tokens until uniform's final accuracy, on handmade curves."""

from __future__ import annotations

import math

import pytest

from coba_verl.lab.report import compute_to_target, format_compute, format_summary, regime, summarise


def test_compute_to_target_is_the_first_evaluation_at_or_above_the_target() -> None:
    curve = [(0.0, 0.2), (100.0, 0.4), (200.0, 0.5), (300.0, 0.45)]
    assert compute_to_target(curve, 0.45) == 200.0
    assert compute_to_target(curve, 0.4) == 100.0
    assert compute_to_target(curve, 0.2) == 0.0
    assert math.isnan(compute_to_target(curve, 0.51))  # not reached


def _rows(label: str, seed: int, accs: list[float], gen: int, tokens: int) -> list[dict]:
    """Four steps of 10 trained rollouts; ``gen`` rollouts and ``tokens`` tokens generated a step."""
    return [
        {
            "run": label,
            "seed": seed,
            "step": i + 1,
            "epoch": 1,
            "rollouts": 10 * (i + 1),
            "total_budget": 10,
            "step_rollouts_trained": 10,
            "step_rollouts_generated": gen,
            "step_tokens_generated": tokens,
            "rollouts_generated": gen * (i + 1),
            "tokens_generated": tokens * (i + 1),
            "submissions": gen // 10,
            "rounds": 1,
            "eval_acc": acc,
            "zero_grad_share": 0.0,
            "zero_grad_rollout_share": 0.0,
            "plugin_s": 0.0,
            "step_s": 1.0,
            "fail_rate": 0.5,
            "fail_rate_avg3": 0.5,
            "alpha": math.nan,
            "beta": math.nan,
            "pass_hist": [0, 1, 0, 0, 0, 0],
        }  # fmt: skip
        for i, acc in enumerate(accs)
    ]


def _folder() -> list[dict]:
    """Uniform generates 20 rollouts (100 tokens) a step and ends at 0.6; fast reaches 0.6 at step 2
    generating 10 a step (50 tokens); slow never reaches it (seeds 0, 1); shifted reaches it at step 3
    on seed 0 only."""
    rows: list[dict] = []
    for s in (0, 1):
        rows.append({"run": "warm_start", "seed": s, "step": 0, "rollouts": 0, "eval_acc": 0.2})
        rows += _rows("uniform", s, [0.3, 0.4, 0.5, 0.6], 20, 100)
        rows += _rows("fast", s, [0.5, 0.6, 0.6, 0.6], 10, 50)
        rows += _rows("slow", s, [0.3, 0.3, 0.4, 0.5], 20, 300)
        rows += _rows("shifted", s, [0.3, 0.4, 0.6 - 0.2 * s, 0.5], 10 * (s + 1), 100)
    return rows


def test_summary_gives_generated_compute_to_uniforms_final_with_not_reached() -> None:
    by = {s["run"]: s for s in summarise(_folder())}
    u, fast, slow, shifted = by["uniform"], by["fast"], by["slow"], by["shifted"]
    assert u["rollouts_to_target"][0] == 80 and u["tokens_to_target"][0] == 400  # its own last step
    assert fast["rollouts_to_target"] == (20.0, 0.0) and fast["tokens_to_target"] == (100.0, 0.0)
    assert fast["rollouts_to_target_reached"] == 2
    assert fast["rollouts_to_target_ratio"] == pytest.approx((0.25, 0.0))
    assert fast["tokens_to_target_ratio"] == pytest.approx((0.25, 0.0))
    assert slow["rollouts_to_target_reached"] == 0 and math.isnan(slow["rollouts_to_target"][0])
    assert shifted["rollouts_to_target_reached"] == 1 and shifted["rollouts_to_target"][0] == 30  # seed 0
    assert math.isnan(shifted["rollouts_to_target"][1])  # one seed reached it: no interval
    assert fast["gen_per_trained"] == 1.0 and u["gen_per_trained"] == 2.0
    assert fast["gen_rollouts_ratio"] == (0.5, 0.0) and slow["gen_tokens_ratio"] == (3.0, 0.0)
    text = format_compute(list(by.values()))
    assert "not reached (0/2)" in text and "(1/2)" in text
    assert "Compute:" in format_summary(list(by.values()), regime(_folder()))


def test_auc_difference_is_taken_on_the_common_range_of_generated_compute() -> None:
    """fast generates half of uniform's rollouts: both are compared over fast's 40 rollouts."""
    by = {s["run"]: s for s in summarise(_folder())}
    # fast over [0, 40]: points (0, .2) (10, .5) (20, .6) (30, .6) (40, .6) -> area 3.5 + 5.5 + 6 + 6 = 21
    # uniform over [0, 40]: (0, .2) (20, .3) (40, .4) -> area 5 + 7 = 12
    assert by["fast"]["d_auc_rollouts"][0] == pytest.approx((21.0 - 12.0) / 40)
    # tokens: fast 200 in all, uniform 400; over [0, 200] both areas scale by 5
    assert by["fast"]["d_auc_tokens"][0] == pytest.approx((21.0 - 12.0) / 40)
