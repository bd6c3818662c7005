"""A round as every glue holds it: the M prompts allocated together and their allocation.

A round is veRL's ``data.train_batch_size`` prompts, TRL's generation round, OpenRLHF's generation
batch (docs/architecture.md). Its rollouts come in group order, prompt by prompt::

    ids          [7, 2]              (M,) tracker ids, in the round's order
    budgets      [3, 2]              (M,) the allocation's B_i
    group        [0, 0, 0, 1, 1]     (N,) position in ``ids`` of each rollout, N = sum of budgets
    rollout_ids  [7, 7, 7, 2, 2]     (N,) tracker id of each rollout, ``ids[group]``
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from coba_verl.core.allocator import Allocation

__all__ = ["Round", "group_index"]


def group_index(budgets: Any) -> np.ndarray:
    """(N,) int64 position of each rollout's prompt, rollouts in group order: [2, 3, 1] -> [0 0 1 1 1 2]."""
    b = np.asarray(budgets, dtype=np.int64)
    return np.repeat(np.arange(b.size, dtype=np.int64), b)


@dataclass(frozen=True)
class Round:
    """The M prompts allocated together (tracker ids, in the round's order) and their allocation."""

    ids: np.ndarray
    allocation: Allocation

    @property
    def budgets(self) -> np.ndarray:
        """(M,) int64 B_i."""
        return self.allocation.budgets

    @cached_property
    def group(self) -> np.ndarray:
        """(N,) int64 position in ``ids`` of each rollout (`group_index`)."""
        return group_index(self.budgets)

    @cached_property
    def rollout_ids(self) -> np.ndarray:
        """(N,) int64 tracker id of each rollout."""
        return np.asarray(self.ids, dtype=np.int64)[self.group]

    def for_ids(self, ids: Any) -> Allocation | None:
        """This allocation for the same prompts in the order ``ids`` (M,); None for other prompts.

        The order can differ after a resume (TRL's RepeatSampler restarts its shuffle at an epoch):
        ids [3, 0, 4], B [5, 2, 5]; for_ids([0, 4, 3]) -> B [2, 5, 5].
        """
        position = {int(i): k for k, i in enumerate(np.asarray(self.ids).tolist())}  # tracker id -> index
        wanted = np.asarray(ids).tolist()
        if len(position) != len(wanted) or set(position) != set(wanted):
            return None
        order = np.asarray([position[int(i)] for i in wanted], dtype=np.int64)  # (M,)
        a = self.allocation
        lengths = None if a.lengths is None else a.lengths[order]
        return dataclasses.replace(
            a, budgets=a.budgets[order], pass_rates=a.pass_rates[order], lengths=lengths
        )
