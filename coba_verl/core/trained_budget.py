"""Which finished groups a step trains so that it trains exactly M x n rollouts (docs/verl.md,
"What a step costs").

veRL's sync buffer trains the first M groups that survive DAPO's filter; under per-prompt budgets
those are groups of any size, so a step would train sum_i B_i rollouts over whichever groups
survived, which under CoBA is far more than M x n (the large groups are the ones that keep a
reward spread). The rule here counts rollouts instead of groups:

1. Groups in the buffer's order (oldest submission first); each is taken whole while it fits in
   what is left of the ``target`` rollouts.
2. If d = target - taken > 0 rollouts are left, the first group that did not fit is cut to d
   sessions (d >= ``min_size``, so that the cut group keeps a GRPO baseline).
3. If d is below ``min_size``: the last whole group taken (size s) is given back and a group that
   did not fit is cut to d + s (or taken whole if it has exactly d + s); failing that, a group
   that did not fit is cut to ``min_size`` (or taken whole if that is its size) and a whole group
   taken is cut by ``min_size - d``, keeping at least ``min_size`` itself.
4. What is neither taken nor cut stays untrained: the buffer shows it to the tracker and clears it,
   as veRL does with its own surplus. The sessions cut away are shown to the tracker too.

A cut group always keeps at least ``min_size`` sessions and fewer than it has; a group smaller than
``min_size`` (failed sessions shortened it) is only ever taken whole.

Every group that did not fit has more sessions than what was left when it was skipped, which is at
least d, so step 2 always succeeds when the ready groups hold ``target`` sessions.

5. If steps 1-3 leave a shortfall, an exact search replaces them: a subset sum over the ready groups
   (a bitset of reachable totals per prefix) finds whole groups W and at most one group c cut to k
   (``min_size`` <= k < its size) with sum(W) + k = target whenever such a choice exists, preferring
   the oldest c and the largest sum(W). Only when none exists (every group of the step has 2
   sessions and the target is odd, say) does the step train ``target - shortfall``.

Example, target 16, sizes in order [6, 9, 4, 2, 8]: 6 and 9 are taken (15); 4, 2 and 8 do not
fit; d = 1 is below 2, so 9 is given back (d = 10, no group that did not fit has 10 sessions),
then 6 instead (d = 7): 8 is cut to 7, and the step trains 9 + 7 = 16. With sizes
[2, 2, 2, 2, 2, 2, 3, 2]: 2 x 6 + 3 = 15, d = 1, no group can replace one taken, so the last 2 is
taken whole and the 3 is cut to 2: 2 x 7 + 2 = 16.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    """Groups a step trains, by position in the order they were offered.

    Attributes:
        whole: positions of the groups trained whole, in order.
        cuts: ``(position, sessions kept)`` of each group trained in part (at most two).
        shortfall: target minus the sessions trained (0 unless no group could be cut to fit).
    """

    whole: tuple[int, ...]
    cuts: tuple[tuple[int, int], ...]
    shortfall: int

    def trained(self, sizes: Sequence[int]) -> int:
        """Sessions trained under this selection."""
        return sum(sizes[i] for i in self.whole) + sum(keep for _, keep in self.cuts)


def select_to_budget(
    sizes: Sequence[int], target: int, min_size: int = 2, *, whole_first: bool = False
) -> Selection:
    """Whole groups in order while they fit, then at most two cut, so that exactly ``target`` train.

    Args:
        sizes: sessions of each ready group, in the order the buffer offers them (oldest first).
        target: sessions the step trains (M x rollout.n).
        min_size: fewest sessions a cut group keeps (B_low: a GRPO group needs two).
        whole_first: first look for whole groups that make ``target`` exactly (`_exact` without a
            cut), and cut only when none do. The async buffer sets it: there the groups not taken
            stay for the next update, while a cut group's other sessions are generated for nothing
            and drain the rollouts generation keeps ahead of the update.

    Returns:
        The `Selection`; ``shortfall`` > 0 only when the ready groups hold fewer than ``target``
        sessions or no group is large enough to make the remainder (module docstring, step 3).

    Raises:
        ValueError: ``target`` < 1, ``min_size`` < 1 or a size < 1.
    """
    if target < 1 or min_size < 1:
        raise ValueError(f"target={target} and min_size={min_size} must be >= 1.")
    if any(s < 1 for s in sizes):
        raise ValueError(f"every group offered must have a session, got sizes {list(sizes)}.")
    if whole_first:
        exact = _exact(sizes, target, min_size, cut=False)
        if exact is not None:
            return exact
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
        return Selection(tuple(whole), (), 0)
    if left >= min_size:
        for i in skipped:
            if sizes[i] > left:
                return Selection(tuple(whole), ((i, left),), 0)
        return Selection(tuple(whole), (), left)
    for given_back in reversed(whole):  # replace a whole group by a larger one, cut
        need = left + sizes[given_back]
        for i in skipped:
            if sizes[i] == need or (sizes[i] > need >= min_size):
                kept = tuple(j for j in whole if j != given_back)
                if sizes[i] == need:
                    return Selection(tuple(sorted((*kept, i))), (), 0)
                return Selection(kept, ((i, need),), 0)
    shrink = min_size - left  # add min_size sessions of a skipped group, take shrink from a whole one
    for i in (i for i in skipped if sizes[i] >= min_size):
        for cut in reversed(whole):
            if sizes[cut] - shrink >= min_size:
                kept = tuple(j for j in whole if j != cut)
                cuts = [(cut, sizes[cut] - shrink)]
                if sizes[i] == min_size:
                    kept = tuple(sorted((*kept, i)))
                else:
                    cuts.append((i, min_size))
                return Selection(kept, tuple(sorted(cuts)), 0)
    return _exact(sizes, target, min_size) or Selection(tuple(whole), (), left)


def _exact(sizes: Sequence[int], target: int, min_size: int, cut: bool = True) -> Selection | None:
    """Whole groups and at most one cut group (none unless ``cut``) making exactly ``target``
    (module docstring, step 5). Of several choices, the earlier (older) groups are preferred.

    For each candidate cut group c (the oldest of each size >= ``min_size``, plus none), the totals
    reachable by whole groups other than c are a bitset per prefix: bit t of ``reach[j]`` is set when
    some subset of groups ``0..j-1`` sums to t. The largest reachable total in
    [target - size_c + 1, target - min_size] (or exactly target without a cut) is then traced back.
    """
    if sum(sizes) < target:
        return None
    mask = (1 << (target + 1)) - 1
    seen: set[int] = set()
    candidates: list[int | None] = [None]
    for c, size in enumerate(sizes if cut else ()):
        if size >= min_size and size not in seen:
            seen.add(size)
            candidates.append(c)
    for c in candidates:
        reach = [1]
        for j, size in enumerate(sizes):
            reach.append(reach[-1] if j == c else (reach[-1] | (reach[-1] << size)) & mask)
        if c is None:
            totals = [target]
        else:
            totals = range(target - min_size, max(target - sizes[c], -1), -1)
        total = next((t for t in totals if reach[-1] >> t & 1), None)
        if total is None:
            continue
        whole, left = [], total
        for j in range(len(sizes) - 1, -1, -1):  # group j is needed iff the prefix without it misses left
            if j != c and not reach[j] >> left & 1:
                whole.append(j)
                left -= sizes[j]
        cuts = () if c is None else ((c, target - total),)
        return Selection(tuple(sorted(whole)), cuts, 0)
    return None


def sessions_to_keep(values: dict[int, float], keep: int) -> set[int]:
    """``keep`` sessions of a group cut by `select_to_budget`, chosen so that the kept sessions'
    distribution of scores is as close to the whole group's as ``keep`` allows.

    The sessions with score v (c_v of the group's B) get q_v = keep x c_v / B of the kept places,
    rounded by largest remainder (ties to the lower score), after one place each for the lowest and
    the highest score when the group has a spread and ``keep`` >= 2, so that a DAPO group keeps its
    reward spread. Within a score, the lowest session ids are kept.

    Example: 1 success in 8 cut to 4 keeps 1 success and 3 failures (a share of 1/4, the closest to
    1/8 that still has a success); cut to 2, 1 and 1.

    Raises:
        ValueError: ``keep`` outside [1, B].
    """
    if not 1 <= keep <= len(values):
        raise ValueError(f"keep={keep} must be between 1 and the group's {len(values)} sessions.")
    by_value: dict[float, list[int]] = {}
    for session in sorted(values):
        by_value.setdefault(values[session], []).append(session)
    scores = sorted(by_value)
    total = len(values)
    quota = {v: keep * len(by_value[v]) / total for v in scores}
    places = {v: int(quota[v]) for v in scores}
    if keep >= 2 and len(scores) >= 2:
        for v in (scores[0], scores[-1]):
            places[v] = max(places[v], 1)
    while sum(places.values()) > keep:  # the two forced places took from the largest share
        v = max((v for v in scores if places[v] > (1 if v in (scores[0], scores[-1]) else 0)),
                key=lambda v: places[v] - quota[v])  # fmt: skip
        places[v] -= 1
    left = keep - sum(places.values())
    for v in sorted(scores, key=lambda v: (-(quota[v] - places[v]), v)):
        if left == 0:
            break
        if places[v] < len(by_value[v]):
            places[v] += 1
            left -= 1
    while left:  # every score with room is full only if keep exceeds them; fill in score order
        v = next(v for v in scores if places[v] < len(by_value[v]))
        places[v] += 1
        left -= 1
    return {session for v in scores for session in by_value[v][: places[v]]}
