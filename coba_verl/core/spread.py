"""Hand a number of rollouts to a set of prompts, evenly or by weight, never past a cap.

Both fill ``budgets`` in place and return what the caps refused. Order matters only for
remainders, which go one by one to the members in the order given (batch order).
"""

from __future__ import annotations

import numpy as np


def spread_even(budgets: np.ndarray, members: np.ndarray, amount: int, up: int) -> int:
    """Give ``amount`` to ``members`` as evenly as the cap ``up`` allows; return the refused rest.

    amount = 10 over three members with room [5, 1, 9] -> +[5, 1, 4] in two rounds.
    """
    members = np.asarray(members, dtype=np.int64)
    amount = int(amount)
    while amount > 0:
        open_ = members[budgets[members] < up]  # members with room, in the given order
        if open_.size == 0:
            break
        share, rem = divmod(amount, open_.size)
        want = np.full(open_.size, share, dtype=np.int64)
        want[:rem] += 1
        give = np.minimum(want, up - budgets[open_])
        budgets[open_] += give
        amount -= int(give.sum())
    return amount


def spread_weighted(
    budgets: np.ndarray, members: np.ndarray, weights: np.ndarray, amount: int, up: int
) -> int:
    """Give ``amount`` to ``members`` in proportion to ``weights``, floors first, then remainders
    one by one in member order, never past ``up``; repeat over members with room while the caps
    refuse some. Zero total weight falls back to an even split. Returns the refused rest.
    """
    members = np.asarray(members, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    amount = int(amount)
    while amount > 0:
        room = budgets[members] < up
        open_, w = members[room], weights[room]
        if open_.size == 0:
            break
        if not w.sum() > 0:
            return spread_even(budgets, open_, amount, up)
        share = np.floor(amount * w / w.sum()).astype(np.int64)  # proportional floors
        give = np.minimum(share, up - budgets[open_])
        budgets[open_] += give
        amount -= int(give.sum())
        if amount > 0 and np.array_equal(give, share):
            # No cap bound, so only rounding is left (fewer than len(open_)): one each, in order.
            amount = spread_even(budgets, open_, amount, up)
    return amount


def uniform_split(m: int, total: int) -> np.ndarray:
    """total // M rollouts each, the remainder one by one to the first prompts: [3, 3, 2, 2] for (4, 10)."""
    base, rem = divmod(int(total), int(m))
    budgets = np.full(m, base, dtype=np.int64)
    budgets[:rem] += 1
    return budgets
