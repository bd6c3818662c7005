"""The one readable line a training step logs (`coba_verl.core.step_line`)."""

from __future__ import annotations

from coba_verl.core.step_line import held_out_score, step_line

METRICS = {
    "coba/budget_min": 2.0, "coba/budget_max": 9.0, "coba/budget_mean": 4.0, "coba/budget_std": 2.12,
    "coba/alpha": 3.214, "coba/beta": 7.786, "coba/prompt_mean_score": 0.3125,
    "critic/score/mean": 0.4, "val-core/coba_arithmetic/acc/mean@4": 0.418,
    "val-aux/coba_arithmetic/acc/std@4": 0.1,
}  # fmt: skip


def test_line_holds_step_budget_range_beta_shape_scores_and_held_out():
    assert step_line(12, METRICS, "val-core/") == (
        "coba-verl step 12: B 2-9 (mean 4.0, std 2.1), alpha 3.21 beta 7.79, prompt mean score 0.312, "
        "held-out 0.418 (val-core/coba_arithmetic/acc/mean@4)"
    )


def test_a_step_without_validation_leaves_held_out_out():
    metrics = {k: v for k, v in METRICS.items() if not k.startswith("val-")}
    assert held_out_score(metrics, "val-core/") is None
    assert "held-out" not in step_line(3, metrics, "val-core/")
    assert "held-out" not in step_line(12, METRICS)  # no prefix: the core knows no framework's names


def test_a_step_without_coba_metrics_says_so():
    assert step_line(1, {"critic/score/mean": 0.5}) == "coba-verl step 1: no coba metrics"


def test_line_says_what_the_step_generated_and_trained_against_uniforms_tokens():
    cost = {
        "coba/tokens_generated": 5400.0, "coba/trained_rollouts": 64.0, "coba/tokens_trained": 2100.0,
        "coba/expected_tokens": 1080.0, "coba/expected_tokens_uniform": 1000.0,
    }  # fmt: skip
    line = step_line(12, {**METRICS, **cost}, "val-core/")
    assert "tokens 5.4k generated (1.08x uniform's), 64 rollouts / 2.1k tokens trained, held-out" in line
    no_lengths = {k: v for k, v in cost.items() if "expected" not in k}
    assert "tokens 5.4k generated, 64 rollouts" in step_line(12, no_lengths)
