"""The headroom study's report (`bench/headroom.py`): best oracle, shares and estimation, on known rows."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "headroom.py"
_spec = importlib.util.spec_from_file_location("headroom_report", _PATH)
headroom = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(headroom)

#: Final accuracy above uniform's 0.4 per seed 0, 1, 2 (both evaluations): Δ AUC = 0.75 x this
#: (curve (0, 0), (10, a), (20, a): AUC = 3a / 4).
LIFT = {
    "coba": (0.02, 0.02, 0.02),
    "coba+oracle": (0.0, 0.01, -0.01),
    "signal+oracle": (0.04, 0.08, 0.06),
}
EST = {"est_mae": 0.1, "est_rank_corr": 0.9, "est_seen": 4.0, "est_extreme": 2.0, "est_extreme_wrong": 1.0,
       "est_budget_moved": 0.2, "exact_pass_mean": 0.4, "exact_bound_max": 1e-3}  # fmt: skip


def _rows() -> list[dict]:
    rows = [{"run": "warm_start", "seed": s, "step": 0, "eval_acc": 0.0} for s in range(3)]
    for label, lifts in {"uniform": (0.0, 0.0, 0.0), **LIFT}.items():
        for seed, lift in enumerate(lifts):
            for step in (1, 2):
                rows.append(
                    {
                        "run": label,
                        "seed": seed,
                        "step": step,
                        "rollouts": 10 * step,
                        "eval_acc": 0.4 + lift,
                        **EST,
                    }
                )
    return rows


def test_the_best_oracle_its_interval_and_coba_share_are_computed_from_paired_seeds() -> None:
    a = headroom.analyse(_rows())
    assert a["best"] == "signal+oracle" and a["found"]
    mean, half = a["headroom"]
    assert mean == pytest.approx(0.75 * 0.06)
    assert half == pytest.approx(4.302653 * 0.75 * 0.02 / math.sqrt(3), rel=1e-5)  # t(0.975, 2 df)
    assert a["coba_share"] == pytest.approx(1 / 3)
    assert a["coba_minus_best"][0] == pytest.approx(0.75 * (0.02 - 0.06))
    assert a["stats"]["coba+oracle"]["d_auc"][0] == pytest.approx(0.0, abs=1e-12)
    assert a["coba_exact_gain"][0] == pytest.approx(0.75 * (0.0 - 0.02))  # coba+oracle - coba, paired


def test_no_headroom_leaves_the_share_undefined_and_says_so() -> None:
    rows = [r for r in _rows() if r["run"] != "signal+oracle"]
    a = headroom.analyse(rows)
    assert a["best"] == "coba+oracle" and not a["found"] and math.isnan(a["coba_share"])
    assert "undefined (no headroom)" in headroom.format_scenario("paper", a)


def test_estimation_is_averaged_over_allocations_with_history_and_shares_are_of_counts() -> None:
    e = headroom.analyse(_rows())["estimation"]["coba"]
    assert e["allocations"] == 6 and e["mae"] == pytest.approx(0.1)
    assert e["extreme_share"] == pytest.approx(0.5) and e["extreme_wrong"] == pytest.approx(0.5)
    assert (
        e["bound_median"] == pytest.approx(1e-3)
        and "signal+oracle" not in headroom.analyse(_rows())["estimation"]
    )
