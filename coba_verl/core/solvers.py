"""Exact optimisers for separable concave budget allocation (spec §5).

Problem (Spec §5, Algorithm 1)::

    maximise  sum_i V_i(B_i)
    s.t.      sum_i B_i = total,  low <= B_i <= up,  B_i integer.

Every V_i is concave (its gains dV_i(B) = V_i(B+1) - V_i(B) do not increase), so the optimum
takes the S = total - M * low largest gains of the table {dV_i(low + j) : j < up - low}, each
prompt's gains taken as a prefix. Three solvers reach it:

* `solve_heap`: the paper's Algorithm 1 with ``heapq``; O(M + S log M).
* `solve_threshold`: finds the gain threshold by bisection, counting per prompt in closed form
  where the gains are geometric; O(M log(1/eps)) numpy work, independent of S. Production default.
* `solve_dp`: exact dynamic programme, O(M * S * (up - low)); the correctness reference.

All three reach the same optimal objective. Heap and threshold share a tie-breaking rule (among
equal gains the prompt with the lower position wins), so on exact ties they return the same
budgets. They do not always compute bit-identical gains, though: the heap evaluates one gain at a
time with ``math.exp``, the threshold solver whole arrays with ``np.exp``, and the two may differ
in the last bit. When two prompts' gains tie to within that rounding, the solvers may then give
the contested rollout to different prompts. On one machine c = [0.5752111118144044,
4.953639602457882], k = [0.06400112050964692, 0.08738942975498114], total 36, [1, 64] gave heap
[4, 32], threshold and DP [5, 31], objectives equal to 9e-16; which way a tie falls depends on
the libm and numpy build. The DP may pick any optimum of the same objective.

Notation: budgets is (M,) int64 with sum == total and low <= budgets <= up.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from coba_verl.core.config import SOLVERS as SOLVER_NAMES
from coba_verl.core.config import check_int
from coba_verl.core.gains import GainModel
from coba_verl.refusal import CobaRefusal

#: Largest M * (up - low) for which `solve_threshold` sorts the whole gain table of a model
#: without closed-form counts (a few ms at most) instead of bisecting with per-prompt searches.
TABLE_MAX = 1 << 16
#: The same bound for closed-form counts, whose search costs a fixed ~0.1 ms: below about 4096
#: gains (M = 32 at [2, 128]) the table is quicker.
TABLE_MAX_CLOSED_FORM = 1 << 12


def check_budget(
    m: int,
    total: int,
    low: int,
    up: int,
    *,
    total_name: str = "total",
    low_name: str = "low",
    up_name: str = "up",
    fix: str = "",
) -> None:
    """Raise ValueError naming the numbers when the budget cannot be met: M·low <= total <= M·up (spec §5).

    The one feasibility check of every front end: ``total_name``, ``low_name`` and ``up_name``
    name the values as the caller's user set them (``coba.min_rollouts``, ...), and ``fix`` says
    what to change. A non-integer ``total``, ``low`` or ``up`` raises `check_int`'s TypeError /
    ValueError, which shows its repr and type.
    """
    if m <= 0:
        raise CobaRefusal(f"cannot allocate a budget over M={m} prompts: the batch is empty.")
    total = check_int(total_name, total)
    low, up = check_int(low_name, low), check_int(up_name, up)
    if low < 1:
        raise CobaRefusal(
            f"{low_name}={low} is invalid: every prompt needs at least 1 rollout (2 under GRPO)."
        )
    if up < low:
        raise CobaRefusal(f"{up_name}={up} is below {low_name}={low}.")
    if not m * low <= total <= m * up:
        raise CobaRefusal(
            f"{total_name}={total} is infeasible for M={m} prompts with {low_name}={low}, {up_name}={up}: "
            f"need {m * low} <= total <= {m * up}." + (f" {fix}" if fix else "")
        )


def objective(gains: GainModel, budgets: np.ndarray) -> float:
    """sum_i V_i(B_i)."""
    return float(np.sum(gains.value(np.asarray(budgets))))


def solve_heap(gains: GainModel, total: int, low: int, up: int) -> np.ndarray:
    """Maximise sum_i V_i(B_i) s.t. sum B_i = total, low <= B_i <= up (Spec §5, Algorithm 1).

    Start every prompt at ``low``, keep each prompt's next gain in a max-heap, give one rollout
    to the best and push its following gain, until the surplus S is spent.

    Notes:
        Exact because the gains of each prompt do not increase (concave V_i). O(M + S log M).
    """
    check_budget(gains.size, total, low, up)
    m = gains.size
    budget = [int(low)] * m
    surplus = int(total) - m * int(low)
    if surplus and up > low:
        heap = [(-gains.gain_one(i, low), i) for i in range(m)]
        heapq.heapify(heap)
        for _ in range(surplus):
            _, i = heapq.heappop(heap)
            budget[i] += 1
            if budget[i] < up:
                heapq.heappush(heap, (-gains.gain_one(i, budget[i]), i))
    return np.asarray(budget, dtype=np.int64)


def solve_threshold(gains: GainModel, total: int, low: int, up: int, *, max_iter: int = 200) -> np.ndarray:
    """Maximise sum_i V_i(B_i) s.t. sum B_i = total, low <= B_i <= up, via a gain threshold (Spec §5).

    Let N(lam) = sum_i n_i(lam), n_i(lam) = #{j : dV_i(low + j) >= lam}. Bisect lam (in log space
    while the bracket is positive) until the gains between the bracket ends are few, take every
    gain above the upper end, then the best of those in between, ordered by (gain desc, prompt
    position asc): the same set the heap pops.

    Notes:
        For geometric gains (CoBA) n_i has a closed form, so each step is O(M) numpy work and
        the cost does not grow with the surplus S. Same objective as `solve_heap`; same budgets
        unless two gains tie to within rounding (module docstring).
    """
    check_budget(gains.size, total, low, up)
    m = gains.size
    width = up - low
    surplus = int(total) - m * int(low)
    base = np.full(m, int(low), dtype=np.int64)
    if surplus == 0 or width == 0:
        return base
    if surplus == m * width:
        return np.full(m, int(up), dtype=np.int64)

    idx = np.arange(m)
    if m * width <= (TABLE_MAX_CLOSED_FORM if gains.closed_form_counts else TABLE_MAX):
        # Small problem: sort the whole gain table instead of searching for the threshold.
        # Prompt-major, level-minor: [g0(low), g0(low+1), ..., g1(low), ...]; a stable sort on the
        # gain alone keeps the heap's tie order, and each prompt's picks form a prefix.
        table = gains.gain_at(np.repeat(idx, width), np.tile(np.arange(low, up), m))  # (M*W,)
        picked = np.argsort(-table, kind="stable")[:surplus]
        return base + np.bincount(picked // width, minlength=m)
    g_first = gains.gain(np.full(m, low))  # (M,) largest gain of each prompt
    g_last = gains.gain(np.full(m, up - 1))  # (M,) smallest gain of each prompt
    lo_start = float(g_last.min())  # N(lo) = M * W >= S
    hi_start = float(np.nextafter(g_first.max(), np.inf))  # N(hi) = 0 <= S
    lo, hi = lo_start, hi_start
    c_lo, c_hi = float(m * width), 0.0
    total_of = gains.total_counter(low, up)  # quick, maybe one off per prompt
    few = max(m // 2, 64)  # stop once about this few gains lie in [lo, hi)
    target = float(surplus)
    side = 0  # Illinois: which end moved last, to halve the stale end's weight
    w_lo = w_hi = 1.0
    for _ in range(max_iter):
        if c_lo - c_hi <= few:
            break
        if lo > 0.0:
            # Regula falsi on log(lam): N is close to linear in log(lam) for geometric gains.
            t_lo, t_hi = math.log(lo), math.log(hi)
            frac = (w_lo * (c_lo - target)) / (w_lo * (c_lo - target) + w_hi * (target - c_hi))
            mid = math.exp(t_lo + frac * (t_hi - t_lo))
            if not lo < mid < hi:
                mid = math.sqrt(lo * hi)
        else:
            mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break  # lo and hi are adjacent floats: the rest are exact ties
        c_mid = total_of(mid)
        if c_mid == target:
            n_mid = gains.count_at_least(mid, low, up)
            if int(n_mid.sum()) == surplus:
                return base + n_mid  # the gains >= mid are exactly the top S
        if c_mid >= target:
            lo, c_lo = mid, c_mid
            w_hi = w_hi * 0.5 if side == -1 else 1.0
            w_lo, side = 1.0, -1
        else:
            hi, c_hi = mid, c_mid
            w_lo = w_lo * 0.5 if side == 1 else 1.0
            w_hi, side = 1.0, 1

    # The quick counts may be one off per prompt; count the bracket ends exactly.
    n_lo = gains.count_at_least(lo, low, up) if lo != lo_start else np.full(m, width, dtype=np.int64)
    n_hi = gains.count_at_least(hi, low, up) if hi != hi_start else np.zeros(m, dtype=np.int64)
    if int(n_lo.sum()) < surplus or int(n_hi.sum()) > surplus:  # rounding crossed the target
        lo, hi = lo_start, hi_start
        n_lo = np.full(m, width, dtype=np.int64)
        n_hi = np.zeros(m, dtype=np.int64)

    # Candidates: levels n_hi[i] .. n_lo[i] - 1 of each prompt.
    # e.g. n_hi = [1, 0], n_lo = [3, 1] -> prompt [0, 0, 1], level [1, 2, 0]
    reps = n_lo - n_hi
    cand_prompt = np.repeat(idx, reps)
    starts = np.cumsum(reps) - reps
    cand_level = n_hi[cand_prompt] + (np.arange(cand_prompt.size) - starts[cand_prompt])
    cand_gain = gains.gain_at(cand_prompt, low + cand_level)
    need = surplus - int(n_hi.sum())
    # Candidates are listed prompt-major, level-minor, so a stable sort on the gain alone orders
    # ties by (prompt, level), the heap's order.
    order = np.argsort(-cand_gain, kind="stable")[:need]
    extra = np.bincount(cand_prompt[order], minlength=m)
    return base + n_hi + extra


def solve_dp(gains: GainModel, total: int, low: int, up: int) -> np.ndarray:
    """Maximise sum_i V_i(B_i) s.t. sum B_i = total, low <= B_i <= up by dynamic programming (Spec §5).

    f_i(s) = max_{0 <= j <= min(W, s)} f_{i-1}(s - j) + V_i(low + j) over the surplus s, with a
    back-pointer table to recover the argmax. Needs no concavity; O(M * S * W) time and
    O(M * S) memory, so it is the reference, not a production solver.
    """
    check_budget(gains.size, total, low, up)
    m = gains.size
    width = up - low
    surplus = int(total) - m * int(low)
    levels = np.arange(width + 1)
    neg_inf = -np.inf
    f = np.full(surplus + 1, neg_inf)
    f[0] = 0.0
    choice = np.zeros((m, surplus + 1), dtype=np.int32)  # (M, S+1) best j for prompt i at surplus s
    for i in range(m):
        v = gains.value_at(np.full(width + 1, i), low + levels)  # (W+1,) V_i(low + j)
        best = np.full(surplus + 1, neg_inf)
        arg = np.zeros(surplus + 1, dtype=np.int32)
        for j in range(min(width, surplus) + 1):
            cand = f[: surplus + 1 - j] + v[j]  # s - j -> s
            better = cand > best[j:]
            best[j:] = np.where(better, cand, best[j:])
            arg[j:] = np.where(better, j, arg[j:])
        f = best
        choice[i] = arg
    budgets = np.empty(m, dtype=np.int64)
    s = surplus
    for i in range(m - 1, -1, -1):
        j = int(choice[i, s])
        budgets[i] = low + j
        s -= j
    assert s == 0, "DP back-tracking must spend the whole surplus"
    return budgets


#: The solver behind each name of `config.SOLVERS` (the one list of names, which `CobaConfig` checks).
SOLVERS = dict(zip(SOLVER_NAMES, (solve_threshold, solve_heap, solve_dp), strict=True))


def solve(gains: GainModel, total: int, low: int, up: int, solver: str = "fast") -> np.ndarray:
    """Dispatch to a solver by name: ``fast`` (threshold), ``heap`` or ``dp``; each checks the budget
    (`check_budget`, a few comparisons: no solver has an unchecked twin)."""
    check_solver(solver)
    return SOLVERS[solver](gains, total, low, up)


def check_solver(solver: str) -> None:
    """Refuse a solver name that is not one of `SOLVERS`."""
    if solver not in SOLVERS:
        raise CobaRefusal(f"solver={solver!r} is unknown; choose one of {sorted(SOLVERS)}.")
