"""What the tracker records, as checked integer counts: rewards as successes (spec §2), pass rates
known without their counts as (successes, attempts) records, records summed per prompt id, and the
integer-array check every id and count input of `CapabilityTracker` and `BudgetAllocator` goes through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coba_verl.core.config import invalid_pass_rates
from coba_verl.refusal import CobaRefusal


def _as_int_array(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}.")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if (
            not np.issubdtype(arr.dtype, np.floating)
            or not np.all(np.isfinite(arr))
            or np.any(arr != np.round(arr))
        ):
            raise ValueError(f"{name} must hold integers, got {arr[:8]!r}.")
    return arr.astype(np.int64, copy=False)


def scores_to_successes(scores: Any, success_value: float = 1.0) -> np.ndarray:
    """Success indicator per rollout: score == success_value (spec §2).

    NaN or infinite scores are an error, not a failure: a broken reward function must not
    silently look like a hard prompt.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {s.shape}.")
    bad = ~np.isfinite(s)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise CobaRefusal(f"score at position {first} is {s[first]}: rewards must be finite.")
    return (s == success_value).astype(np.int64)


def pass_rate_records(pass_rates: Any, weight: int) -> tuple[np.ndarray, np.ndarray]:
    """(successes, attempts) for pass rates known without their counts: each is ``weight`` attempts.

    successes_i = round(p_i * weight), so a rate is kept to 1/(2 * weight):
    ``pass_rate_records([0.37, 1.0], 8)`` -> ``([3, 8], [8, 8])``.

    Raises:
        ValueError: ``weight`` < 1, or a pass rate outside [0, 1] or not finite (named).
    """
    weight = int(weight)
    if weight < 1:
        raise ValueError(f"weight={weight} must be >= 1 attempt per pass rate.")
    p = np.asarray(pass_rates, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"pass_rates must be one-dimensional, got shape {p.shape}.")
    bad = invalid_pass_rates(p)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"pass rate at position {j} is {p[j]}: a pass rate lies in [0, 1].")
    return np.rint(p * weight).astype(np.int64), np.full(p.size, weight, dtype=np.int64)


def totals_by_id(
    ids: np.ndarray, succ: np.ndarray, roll: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique ids, successes, rollouts) summed per id, sorted by id: [7, 3, 7] -> ids [3, 7]."""
    uniq, inv = np.unique(ids, return_inverse=True)  # [7, 3, 7] -> uniq [3, 7], inv [1, 0, 1]
    return (
        uniq,
        np.bincount(inv, weights=succ, minlength=uniq.size).astype(np.int64),
        np.bincount(inv, weights=roll, minlength=uniq.size).astype(np.int64),
    )
