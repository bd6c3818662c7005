"""Which finished groups a step trains so that it trains exactly M x n rollouts (docs/verl.md, "DAPO").

veRL's sync buffer trains the first M groups that survive DAPO's filter; under per-prompt budgets
those are groups of any size, so a step would train sum_i B_i rollouts over whichever groups
survived, which under CoBA is far more than M x n (the large groups are the ones that keep a
reward spread). The rule here counts rollouts instead of groups:

1. Groups in the buffer's order (oldest submission first); each is taken whole while it fits in
   what is left of the ``target`` rollouts.
2. If rollouts are left over (d = target - taken > 0), the first group that did not fit is cut
   to d sessions (d >= ``min_size``, so that the cut group keeps a GRPO baseline). If d is below
   ``min_size``, the last whole group taken (size s) is given back and a group that did not fit
   is cut to d + s instead.
3. What is neither taken nor cut stays untrained: the buffer shows it to the tracker and clears it,
   as veRL does with its own surplus. The sessions cut away are shown to the tracker too.

Every group that did not fit has more sessions than what was left when it was skipped, which is at
least d, so step 2 finds one whenever the ready groups hold ``target`` sessions and d >= min_size.
Only the second branch can fail (no group large enough); the step then trains ``target - d``.

Example, target 16, sizes in order [6, 9, 4, 2, 8]: 6 and 9 are taken (15); 4, 2 and 8 do not
fit; d = 1 is below 2, so 9 is given back (d = 10, no group that did not fit has 10 sessions),
then 6 instead (d = 7): 8 is cut to 7, and the step trains 9 + 7 = 16.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    """Groups a step trains, by position in the order they were offered.

    Attributes:
        whole: positions of the groups trained whole, in order.
        cut: ``(position, sessions kept)`` of the one group trained in part, or None.
        shortfall: target minus the sessions trained (0 unless no group could be cut to fit).
    """

    whole: tuple[int, ...]
    cut: tuple[int, int] | None
    shortfall: int

    def trained(self, sizes: Sequence[int]) -> int:
        """Sessions trained under this selection."""
        return sum(sizes[i] for i in self.whole) + (self.cut[1] if self.cut else 0)


def select_to_budget(sizes: Sequence[int], target: int, min_size: int = 2) -> Selection:
    """Whole groups in order while they fit, then one group cut, so that exactly ``target`` sessions train.

    Args:
        sizes: sessions of each ready group, in the order the buffer offers them (oldest first).
        target: sessions the step trains (M x rollout.n).
        min_size: fewest sessions a cut group keeps (B_low: a GRPO group needs two).

    Returns:
        The `Selection`; ``shortfall`` > 0 only when the ready groups hold fewer than ``target``
        sessions or no group is large enough to be cut to the remainder.

    Raises:
        ValueError: ``target`` < 1, ``min_size`` < 1 or a size < 1.
    """
    if target < 1 or min_size < 1:
        raise ValueError(f"target={target} and min_size={min_size} must be >= 1.")
    if any(s < 1 for s in sizes):
        raise ValueError(f"every group offered must have a session, got sizes {list(sizes)}.")
    whole: list[int] = []
    skipped: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if total == target:
            break
        if total + size <= target:
            whole.append(i)
            total += size
        else:
            skipped.append(i)
    left = target - total
    if left == 0:
        return Selection(tuple(whole), None, 0)
    if left >= min_size:
        for i in skipped:
            if sizes[i] > left:
                return Selection(tuple(whole), (i, left), 0)
        return Selection(tuple(whole), None, left)
    for given_back in reversed(whole):
        need = left + sizes[given_back]
        for i in skipped:
            if sizes[i] >= need:
                kept = tuple(j for j in whole if j != given_back)
                if sizes[i] == need:  # the whole group fits exactly once the other one is given back
                    return Selection(tuple(sorted((*kept, i))), None, 0)
                return Selection(kept, (i, need), 0)
    return Selection(tuple(whole), None, left)
