"""C-size's rule: a generation wave's budgets trimmed, in submission order, to the rollouts missing.

docs/dapo_n16_design.md, amendment 1, item 6: under DAPO a step needs T = M x n trained rollouts;
a wave (the step's first submission or a refill) is sized to the ``slots`` still open,

    slots = T - ready rollouts - rollouts in flight,

prompts taken in order while the rollouts before them are fewer than ``slots``, the last one keeping
min(B_i, max(B_low, what is left)); the prompts beyond wait for the next wave with their budgets.
One rule for the three places that size waves: veRL's trainer (`coba_verl.verl_plugin.hooks.
refill_sizing`, ``coba.size_refills``), the lab's DAPO (`coba_verl.lab.dapo`, ``+size``) and the
cost model of `coba-verl plan` (`coba_verl.core.step_cost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SizedSubmission", "size_submission"]


@dataclass(frozen=True)
class SizedSubmission:
    """What `size_submission` lets through: the budgets of the first ``prompts`` prompts, the last
    possibly trimmed, and the rollouts trimmed from it."""

    budgets: tuple[int, ...]
    trimmed: int

    @property
    def prompts(self) -> int:
        """Prompts submitted (the first ones, in order); the others go back."""
        return len(self.budgets)


def size_submission(budgets: Sequence[int], slots: int, min_rollouts: int) -> SizedSubmission:
    """C-size's rule: the prompts' ``budgets`` in submission order, trimmed to ``slots`` sessions.

    Prompts are taken in order while the sessions before them are fewer than ``slots``; the last one
    taken keeps min(its budget, max(``min_rollouts``, what is left)), so the submission exceeds
    ``slots`` by at most ``min_rollouts`` - 1. ``slots`` <= 0 takes none; budgets that fit whole are
    taken whole.

        ([4, 4, 4], 9, 2) -> budgets (4, 4, 2), trimmed 2
        ([4, 4, 4], 8, 2) -> budgets (4, 4), trimmed 0
        ([4, 4, 4], 1, 2) -> budgets (2,), trimmed 2
        ([4, 4, 4], 0, 2) -> budgets (), trimmed 0
    """
    taken: list[int] = []
    before = 0  # sessions of the prompts taken so far
    for budget in map(int, budgets):
        if before >= slots:
            break
        left = slots - before
        if budget <= left:
            taken.append(budget)
            before += budget
            continue
        kept = min(budget, max(int(min_rollouts), left))
        return SizedSubmission(tuple([*taken, kept]), budget - kept)
    return SizedSubmission(tuple(taken), 0)
