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

5. If steps 1-3 leave a shortfall, an exact search replaces them (`_best`): over whole groups W and
   at most two cut groups (each keeping k with ``min_size`` <= k < its size) it finds the largest
   total <= target, so the step trains ``target`` whenever any such choice exists. Of the choices
   with that total it prefers the fewest cuts, then the oldest cut groups, then the largest sum(W)
   and the oldest whole groups. Only when no choice makes ``target`` (every group of the step has 2
   sessions and the target is odd, say) does the step train less: the most any choice trains.

So the rule `select_to_budget` holds to: **whole groups and at most two cut groups, each cut group
keeping at least ``min_size`` and fewer than it has; exactly ``target`` whenever such a choice
exists, else the most such a choice trains.** Which choice, when several exist, is steps 1-3's
(oldest groups whole first), then step 5's preferences. The async buffer orders by age first
(`select_by_age`).

Example, target 16, sizes in order [6, 9, 4, 2, 8]: 6 and 9 are taken (15); 4, 2 and 8 do not
fit; d = 1 is below 2, so 9 is given back (d = 10, no group that did not fit has 10 sessions),
then 6 instead (d = 7): 8 is cut to 7, and the step trains 9 + 7 = 16. With sizes
[2, 2, 2, 2, 2, 2, 3, 2]: 2 x 6 + 3 = 15, d = 1, no group can replace one taken, so the last 2 is
taken whole and the 3 is cut to 2: 2 x 7 + 2 = 16.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


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
        whole_first: first look for whole groups that make ``target`` exactly (`_best` without a
            cut), and cut only when none do. `select_by_age` sets it within the newest submission
            an update trains from: there the groups not taken stay for the next update, while a cut
            group's other sessions are generated for nothing and drain the rollouts generation keeps
            ahead of the update.

    Returns:
        The `Selection`; ``shortfall`` > 0 only when no choice of whole groups and at most two cut
        ones makes ``target`` (module docstring, the rule), and then it is the least any such
        choice leaves.

    Raises:
        ValueError: ``target`` < 1, ``min_size`` < 1 or a size < 1.
    """
    if target < 1 or min_size < 1:
        raise ValueError(f"target={target} and min_size={min_size} must be >= 1.")
    if any(s < 1 for s in sizes):
        raise ValueError(f"every group offered must have a session, got sizes {list(sizes)}.")
    if whole_first:
        exact = _best(sizes, target, min_size, max_cuts=0)
        if exact.shortfall == 0:
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
        return _best(sizes, target, min_size)
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
    return _best(sizes, target, min_size)


def select_by_age(sizes: Sequence[int], steps: Sequence[int], target: int, min_size: int = 2) -> Selection:
    """``target`` sessions from ready groups offered oldest first, never training a group while an
    older one waits: veRL's oldest-first order (``ReplayBuffer._select_prompt_uids``, by submission
    step) counted in sessions.

    The groups of each submission step are taken whole, oldest step first, while they fit. The first
    step whose groups do not all fit (the newest the update trains from) gives the rest, d sessions,
    by `select_to_budget` on its own groups with ``whole_first``: whole groups of that step that make
    d exactly are preferred to a cut, in submission order otherwise. So every ready group submitted
    before that step is trained, and no group waits longer than under oldest-first by groups.
    Only when that step's groups cannot make d (d below ``min_size`` and no whole choice) does the
    update take `select_to_budget` over all groups in order, which may give an older group back.

    Example, target 8, steps [1, 1, 2, 2], sizes [7, 5, 4, 4]: whole groups alone would take the two
    4s of step 2 while both groups of step 1 wait; by age, step 1's groups train, the 7 cut to 6 and
    the 5 to 2 (`select_to_budget`'s step 3 within step 1).

    Args:
        sizes: sessions of each ready group, oldest first.
        steps: each group's submission step, non-decreasing.
        target: sessions the update trains.
        min_size: fewest sessions a cut group keeps.

    Raises:
        ValueError: as `select_to_budget`, or ``steps`` out of order or not one per group.
    """
    if len(steps) != len(sizes) or any(a > b for a, b in zip(steps, steps[1:], strict=False)):
        raise ValueError(f"steps {list(steps)} must be non-decreasing, one per group of sizes {list(sizes)}.")
    taken: list[int] = []
    total, start = 0, 0
    while start < len(sizes):
        end = start
        while end < len(sizes) and steps[end] == steps[start]:
            end += 1
        same = range(start, end)  # the groups of one submission step, in submission order
        size = sum(sizes[i] for i in same)
        if total + size <= target:
            taken.extend(same)
            total += size
            if total == target:
                return Selection(tuple(taken), (), 0)
            start = end
            continue
        inner = select_to_budget([sizes[i] for i in same], target - total, min_size, whole_first=True)
        if inner.shortfall:
            return select_to_budget(sizes, target, min_size)
        whole = tuple(taken) + tuple(start + i for i in inner.whole)
        return Selection(whole, tuple((start + i, keep) for i, keep in inner.cuts), 0)
    return Selection(tuple(taken), (), target - total)


def _best(sizes: Sequence[int], target: int, min_size: int, max_cuts: int = 2) -> Selection:
    """The most sessions, at most ``target``, that whole groups and at most ``max_cuts`` cut groups
    can train (module docstring, step 5).

    Cut candidates are tried with no cut first, then one, then two; a cut group keeps k with
    ``min_size`` <= k < its size, so only groups of ``min_size`` + 1 sessions or more are cut, and of
    groups of one size only the oldest (two oldest, for a pair of that size) are tried: others of the
    same size reach the same totals. For each candidate set C, the totals the other groups reach
    whole are a bitset per prefix (bit t of ``reach[j]`` set when some subset of groups ``0..j-1``
    outside C sums to t); the largest reachable w <= target - |C| x min_size trains
    min(target, w + sum_{c in C} (size_c - 1)). The first candidate set that makes ``target`` wins;
    otherwise the one that trains the most. The whole groups are then traced back preferring the
    oldest, and the cut groups' sessions split so each keeps at least ``min_size``.
    Cost: O(D^2 x G) shifts of (target + 1)-bit integers for G groups of D sizes, only when the
    greedy steps 1-3 fall short.
    """
    mask = (1 << (target + 1)) - 1
    first_of_size: dict[int, list[int]] = {}
    for c, size in enumerate(sizes):
        if size > min_size and len(first_of_size.setdefault(size, [])) < 2:
            first_of_size[size].append(c)
    singles = sorted(group[0] for group in first_of_size.values())
    pairs = sorted(
        {tuple(sorted((a, b))) for a in singles for b in singles if a != b}
        | {tuple(group) for group in first_of_size.values() if len(group) == 2}
    )
    candidates: list[tuple[int, ...]] = [()]
    if max_cuts >= 1:
        candidates += [(c,) for c in singles]
    if max_cuts >= 2:
        candidates += pairs
    best: tuple[int, tuple[int, ...], int] | None = None  # (total, cut set, whole total w)
    for cut in candidates:
        low = min_size * len(cut)
        if low > target:
            continue
        reach = 1
        for j, size in enumerate(sizes):
            if j not in cut:
                reach = (reach | (reach << size)) & mask
        w = (reach & ((1 << (target - low + 1)) - 1)).bit_length() - 1  # largest reachable <= target - low
        total = min(target, w + sum(sizes[c] - 1 for c in cut))
        if best is None or total > best[0]:
            best = (total, cut, w)
        if total == target:
            break
    assert best is not None  # the empty cut set always reaches 0
    total, cut, w = best
    reach_by_prefix = [1]
    for j, size in enumerate(sizes):
        prev = reach_by_prefix[-1]
        reach_by_prefix.append(prev if j in cut else (prev | (prev << size)) & mask)
    whole, left = [], w
    for j in range(len(sizes) - 1, -1, -1):  # group j is needed iff the prefix without it misses left
        if j not in cut and not reach_by_prefix[j] >> left & 1:
            whole.append(j)
            left -= sizes[j]
    need, cuts = total - w, []
    for position, c in enumerate(cut):
        rest = len(cut) - position - 1  # cut groups after this one, each to keep at least min_size
        keep = min(sizes[c] - 1, need - rest * min_size)
        cuts.append((c, keep))
        need -= keep
    return Selection(tuple(sorted(whole)), tuple(cuts), target - total)


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


def random_sessions_to_keep(sessions: Iterable[int], keep: int, seed: Sequence[int]) -> set[int]:
    """``keep`` of a cut group's ``sessions``, uniformly at random (``coba.cut_sessions=random``):
    every subset of ``keep`` equally likely, drawn by ``numpy.random.default_rng(seed)`` over the
    sorted session ids, so the same seed keeps the same sessions whatever order they come in.

    Unlike `sessions_to_keep`, the kept sessions may all score alike (the group then adds no
    gradient): the lab measured no loss from that under DAPO (docs/lab.md, "Where the accuracy goes
    under DAPO").

    Raises:
        ValueError: ``keep`` outside [1, B].
    """
    ids = sorted(set(sessions))
    if not 1 <= keep <= len(ids):
        raise ValueError(f"keep={keep} must be between 1 and the group's {len(ids)} sessions.")
    chosen = np.random.default_rng(list(seed)).choice(len(ids), size=keep, replace=False)
    return {ids[i] for i in chosen}
