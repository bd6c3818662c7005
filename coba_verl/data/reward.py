"""Reward routing for the DAPO-format evaluation sets that veRL has no ``data_source`` name for.

veRL's ``default_compute_score`` picks a scorer by ``data_source``. Its DAPO scorer
(``math_dapo``: the ``Answer:`` line, then a strict ``\\boxed{}`` fallback; +1 / -1) is reached by
``"math_dapo"``, ``"math"``, ``"math_dapo_reasoning"`` and any name starting with ``"aime"``.
AMC23, MATH-500 in DAPO format, Minerva and OlympiadBench have no such name, and validation
metrics are grouped by ``data_source``, so each needs a name of its own to be reported
separately (``val-core/<data_source>/acc/mean@16``).

:func:`compute_score` sends those names to veRL's ``math_dapo`` scorer, the names of coba-verl's
own tasks (:data:`OWN_TASKS`, e.g. the tiny CPU recipe's ``coba_arithmetic``) to their module's
``compute_score``, and everything else to ``default_compute_score`` unchanged, so training
rewards are exactly veRL's. Recipes enable it
with::

    reward.custom_reward_function.path=pkg://coba_verl.data.reward
    reward.custom_reward_function.name=compute_score
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DAPO_EVAL_SOURCES", "OWN_TASKS", "compute_score", "score_value"]

# data_source names written by `python -m coba_verl.data` that veRL does not route itself.
DAPO_EVAL_SOURCES: frozenset[str] = frozenset({"amc23", "math500_dapo", "minerva", "olympiadbench"})

#: data_source names of coba-verl's own tasks -> the module whose ``compute_score`` scores them.
#: Their responses are the bare answer (no ``Answer:`` line or ``\\boxed{}``).
OWN_TASKS: dict[str, str] = {"coba_arithmetic": "coba_verl.arithmetic.tiny"}


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """veRL's reward for one response, with :data:`DAPO_EVAL_SOURCES` routed to ``math_dapo``.

    Same signature and return type as ``verl.utils.reward_score.default_compute_score``: a float,
    or for the DAPO scorer a dict with ``score`` (+1 / -1), ``acc`` (bool) and ``pred``.
    """
    from verl.utils.reward_score import default_compute_score, math_dapo  # imports torch: load lazily

    if data_source in DAPO_EVAL_SOURCES:
        return math_dapo.compute_score(solution_str, ground_truth)
    if data_source in OWN_TASKS:
        own = importlib.import_module(OWN_TASKS[data_source])
        return own.compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)


def score_value(result: float | dict[str, Any]) -> float:
    """The scalar reward of a scorer result (the ``score`` entry of a dict result)."""
    return float(result["score"]) if isinstance(result, dict) else float(result)
