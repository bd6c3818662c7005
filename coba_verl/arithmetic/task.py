"""A generated, verifiable arithmetic task with a wide difficulty spread.

Each problem is a prompt such as ``"47*8="`` whose answer is the decimal integer (``"376"``).
Difficulty comes from the operation and the operand lengths (a *level*, see `LEVELS`): after
the supervised warm start a tiny model solves sums like ``"47+8="`` most of the time, products
like ``"47*8="`` now and then, and products like ``"473*58="`` never. That mixture mirrors the
pass-rate histogram of real maths sets (many prompts solved every time, many never, a band in
between), which is the regime rollout-budget allocation is about (spec §1-2).

Notation: a split of N problems is three aligned arrays plus the level table,

    ids:     (N,) int64    stable prompt ids, 0..N-1 (the allocator's keys; spec §2)
    prompts: list[str]     e.g. "47*8="
    answers: list[str]     e.g. "376"
    levels:  (N,) int64    index into LEVELS

The training set and the held-out evaluation set come from the same distribution and the same
seed; no evaluation prompt appears in the training set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from coba_verl.refusal import CobaRefusal

__all__ = [
    "LEVELS", "Level", "Split", "make_splits", "parse_levels", "sample_problems", "verify", "score_batch",
]  # fmt: skip


@dataclass(frozen=True)
class Level:
    """One difficulty level: ``op`` applied to an ``a_digits``-digit and a ``b_digits``-digit number.

    Operands are drawn uniformly among numbers with exactly that many digits (1-digit operands
    include 0). ``weight`` is the level's share of the mixture before normalisation.
    """

    op: str
    a_digits: int
    b_digits: int
    weight: float

    @property
    def name(self) -> str:
        return f"{self.a_digits}{self.op}{self.b_digits}"


# The mixture, five levels with at least 900 distinct problems each (so every level has held-out
# problems). After the default warm start, sums and differences of a two- and a one-digit number
# are solved most of the time, two-digit sums and two-by-one-digit products about half of the
# time or less, and three-by-two-digit products never: the "too hard" mass. Each level is a
# separate skill for the model, so every extra level dilutes the warm start.
LEVELS: tuple[Level, ...] = (
    Level("+", 2, 1, 1.0),
    Level("-", 2, 1, 1.0),
    Level("+", 2, 2, 1.0),
    Level("*", 2, 1, 1.0),
    Level("*", 3, 2, 1.0),
)

_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply}
_LEVEL_NAME = re.compile(r"^([1-9])([+*-])([1-9])$")


def parse_levels(weights: Mapping[str, float]) -> tuple[Level, ...]:
    """``{"2+1": 1.0, "3*2": 0.5}`` -> (Level("+", 2, 1, 1.0), Level("*", 3, 2, 0.5)), in that order.

    Raises:
        ValueError: naming the entry when a name is not ``<digits><op><digits>`` or a weight is not
            positive.
    """
    if not weights:
        raise CobaRefusal("levels is empty; name at least one, e.g. {'2+1': 1.0}.")
    out = []
    for name, w in weights.items():
        m = _LEVEL_NAME.match(str(name))
        if m is None:
            raise CobaRefusal(f"level {name!r} is not <digits><op><digits> with op in +-*, e.g. '2*1'.")
        if not isinstance(w, (int, float)) or not w > 0:
            raise CobaRefusal(f"level {name!r} has weight {w!r}; weights must be positive numbers.")
        out.append(Level(m[2], int(m[1]), int(m[3]), float(w)))
    return tuple(out)


@dataclass(frozen=True)
class Split:
    """A list of problems with stable integer ids (``ids[i] == i``)."""

    prompts: list[str]
    answers: list[str]
    levels: np.ndarray  # (N,) int64, index into LEVELS

    @property
    def ids(self) -> np.ndarray:
        return np.arange(len(self.prompts), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.prompts)


def _operand(rng: np.random.Generator, digits: int, size: int) -> np.ndarray:
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.integers(low, 10**digits, size=size, dtype=np.int64)


def sample_problems(
    rng: np.random.Generator, n: int, levels: Sequence[Level] = LEVELS
) -> tuple[list[str], list[str], np.ndarray]:
    """Draw ``n`` problems i.i.d. from the level mixture: (prompts, answers, (n,) level indices)."""
    weights = np.array([lv.weight for lv in levels], dtype=np.float64)
    lv_idx = rng.choice(len(levels), size=n, p=weights / weights.sum())  # (n,)
    prompts: list[str] = [""] * n
    answers: list[str] = [""] * n
    for k, lv in enumerate(levels):
        rows = np.flatnonzero(lv_idx == k)
        a = _operand(rng, lv.a_digits, rows.size)
        b = _operand(rng, lv.b_digits, rows.size)
        if lv.op == "-":  # keep differences non-negative
            a, b = np.maximum(a, b), np.minimum(a, b)
        c = _OPS[lv.op](a, b)
        for r, x, y, z in zip(rows.tolist(), a.tolist(), b.tolist(), c.tolist(), strict=True):
            prompts[r] = f"{x}{lv.op}{y}="
            answers[r] = str(z)
    return prompts, answers, lv_idx.astype(np.int64)


def make_splits(
    seed: int, n_train: int, n_eval: int, *, levels: Sequence[Level] = LEVELS
) -> tuple[Split, Split]:
    """Generate the training set and a disjoint held-out evaluation set from ``seed``.

    Both are drawn from the level mixture; duplicates within the training set are kept (real
    datasets have them, and ids stay stable), while evaluation prompts that also occur in the
    training set are redrawn so the evaluation is held out.

    Raises:
        ValueError: if a size is not positive.
    """
    if n_train < 1 or n_eval < 1:
        raise CobaRefusal(f"n_train={n_train} and n_eval={n_eval} must both be >= 1.")
    rng = np.random.default_rng([seed, 0x7A5C])
    tr_p, tr_a, tr_l = sample_problems(rng, n_train, levels)
    seen = set(tr_p)
    ev_p: list[str] = []
    ev_a: list[str] = []
    ev_l: list[int] = []
    for _ in range(100):
        p, a, lv = sample_problems(rng, n_eval, levels)
        for pi, ai, li in zip(p, a, lv.tolist(), strict=True):
            if pi not in seen and len(ev_p) < n_eval:
                seen.add(pi)
                ev_p.append(pi)
                ev_a.append(ai)
                ev_l.append(li)
        if len(ev_p) == n_eval:
            break
    else:  # pragma: no cover - only with absurd sizes
        raise CobaRefusal(f"Could not draw n_eval={n_eval} held-out problems; lower n_eval or n_train.")
    return Split(tr_p, tr_a, tr_l), Split(ev_p, ev_a, np.asarray(ev_l, dtype=np.int64))


def verify(response: str, answer: str) -> float:
    """Score one response: 1.0 iff it is exactly the answer's digits (surrounding spaces ignored).

    The response is the decoded text generated after the prompt, up to end-of-sequence.
    """
    return 1.0 if response.strip() == answer else 0.0


def score_batch(responses: Sequence[str], answers: Sequence[str]) -> np.ndarray:
    """``verify`` over aligned lists; returns (R,) float32 scores in {0, 1}."""
    if len(responses) != len(answers):
        raise ValueError(f"{len(responses)} responses but {len(answers)} answers; they must align.")
    return np.fromiter(
        (verify(r, a) for r, a in zip(responses, answers, strict=True)), np.float32, len(answers)
    )
