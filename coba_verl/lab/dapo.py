"""DAPO dynamic sampling in the lab, as this package's veRL sync trainer does it (docs/lab.md, "DAPO").

One update trains exactly T = M x n rollouts, drawn from as many generation waves as it takes:

1. The step submits M prompts: the next prompts of a **round** (`PromptStream`). A round is M
   prompts drawn in the seed's order and allocated ``allocator.allocate(ids, M x n)`` when its
   first prompt is drawn; a submission takes the round's next prompts, and the round's rest waits
   for the next submission, even in the next step (veRL: ``CobaBudgets._next_train_batch``).
2. A wave generates every submitted group. A group with more than one rollout whose rewards are
   all equal has no GRPO signal and is **evicted** (DAPO's filter on the reward); the others are
   **ready**, in submission order.
3. While the ready groups hold fewer than T rollouts: each evicted group adds 2 prompts of refill
   credit (veRL's sync rule, "evict k, refill 2k"); with no credit left, ceil(missing / n)
   prompts are refilled (`coba_verl.verl_plugin.hooks.replay_buffer.CobaReplayBuffer`'s addition for
   small ready groups); at most M prompts go out per wave (``max_inflight_gen_batches = 1``), and
   the next wave generates them. Every wave finishes before the buffer looks again: the lab's
   generation is one batched call, where veRL's groups finish one by one.
4. `select_to_budget` (the veRL path's own function) picks whole ready groups, oldest first, and
   cuts one (rarely two) to the remainder, keeping `sessions_to_keep`'s rollouts (the group's
   score mix, its reward spread kept); the rest of the ready groups are the **surplus**.

Every generated rollout is scored into the tracker exactly once: evicted groups at their wave,
then the cut-away rollouts, the surplus and the trained ones. For uniform budgets (every group
n), the rule is veRL's own group-counted one: the first M ready groups train whole.

``max_gen_batches`` caps the prompts a step may submit at that many x M (the DAPO recipe's
``max_num_gen_batches``): past it the step trains what is ready (``shortfall`` > 0), and a step
with nothing ready skips its update.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from coba_verl.core import Allocation, BudgetAllocator
from coba_verl.core.trained_budget import select_to_budget, sessions_to_keep

__all__ = ["PromptStream", "Wave", "DapoStep", "collect_dapo_step", "has_spread"]


class PromptStream:
    """The seed's prompts in order (epochs of a seeded shuffle), M at a time in allocated rounds.

    Args:
        order: a function ``chunk(k) -> (k,) ids`` giving the next prompt ids of the seed's order.
        allocator: allocates each round when its first prompt is drawn.
        m: prompts per round (M).
        total: rollouts per round (M x n).
    """

    def __init__(
        self, order: Callable[[int], np.ndarray], allocator: BudgetAllocator, m: int, total: int
    ) -> None:
        self._order = order
        self.allocator = allocator
        self.m = m
        self.total = total
        self._rest_ids = np.zeros(0, np.int64)
        self._rest_budgets = np.zeros(0, np.int64)
        self.drawn = 0  # prompts taken so far
        self.steps = 0  # `collect_dapo_step` calls so far (the step being collected, from 1)
        self.round_steps: list[int] = []  # round r was allocated in step round_steps[r]
        self.last_rounds = np.zeros(0, np.int64)  # round of each prompt the last `take` returned
        self.allocations: list[Allocation] = []  # rounds allocated since the last `pop_allocations`
        self.last_allocation: Allocation | None = None

    def take(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` prompts and their budgets: (k,) ids, (k,) int64 budgets."""
        ids, budgets, rounds = [], [], []
        while k > 0:
            if self._rest_ids.size == 0:
                round_ids = np.asarray(self._order(self.m), dtype=np.int64)
                res = self.allocator.allocate(round_ids, self.total)
                self.allocations.append(res)
                self.last_allocation = res
                self.round_steps.append(self.steps)
                self._rest_ids, self._rest_budgets = round_ids, np.asarray(res.budgets, np.int64)
            j = min(k, self._rest_ids.size)
            ids.append(self._rest_ids[:j])
            budgets.append(self._rest_budgets[:j])
            rounds.append(np.full(j, len(self.round_steps) - 1, np.int64))
            self._rest_ids, self._rest_budgets = self._rest_ids[j:], self._rest_budgets[j:]
            k -= j
            self.drawn += j
        if not ids:
            self.last_rounds = np.zeros(0, np.int64)
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.last_rounds = np.concatenate(rounds)
        return np.concatenate(ids), np.concatenate(budgets)

    def pop_allocations(self) -> list[Allocation]:
        """The rounds allocated since the last call."""
        out, self.allocations = self.allocations, []
        return out


@dataclass
class Wave:
    """What one generation wave returns for R rollouts (prompt ``ids[rows]`` repeated by budget).

    ``payload`` is whatever the caller needs to train rows of this wave later (the lab: the
    sampled token tensors); `collect_dapo_step` only carries it.
    """

    scores: np.ndarray  # (R,) float
    lengths: np.ndarray  # (R,) response tokens
    payload: object = None


@dataclass
class Group:
    """One submitted prompt's rollouts: ``wave`` and the rows of that wave it owns."""

    prompt: int
    wave: int
    rows: np.ndarray  # (B,) row positions in its wave
    scores: np.ndarray  # (B,)
    lengths: np.ndarray  # (B,)
    age: int = 0  # steps since its round was allocated (0: allocated in this step)

    @property
    def size(self) -> int:
        return int(self.rows.size)


def has_spread(scores: np.ndarray) -> bool:
    """DAPO's filter, as veRL's `ReplayBuffer._dapo_filtered_keys`: a group is filtered iff it has
    more than one rollout and their rewards' std is 0."""
    return not (scores.size > 1 and float(np.std(scores)) == 0.0)


@dataclass
class DapoStep:
    """One DAPO update's rollouts: what it trains, and what generating them cost.

    ``trained`` is (wave, rows of that wave, group number 0..G-1) per trained group, oldest first,
    and ``trained_groups`` the `Group` of each, in the same order; every count is of this step only.
    """

    trained: list[tuple[int, np.ndarray, int]]
    waves: list[Wave]
    groups: list[Group]
    target: int
    submissions: int = 0
    prompts: int = 0
    evicted: int = 0
    surplus: int = 0
    cut_rollouts: int = 0
    groups_cut: int = 0
    trained_groups: list[Group] = field(default_factory=list)
    observed_rollouts: int = 0
    observe_s: float = 0.0  # wall time in ``allocator.observe``
    allocations: list[Allocation] = field(default_factory=list)

    @property
    def trained_rollouts(self) -> int:
        return int(sum(rows.size for _, rows, _ in self.trained))

    @property
    def shortfall(self) -> int:
        return self.target - self.trained_rollouts

    @property
    def generated_rollouts(self) -> int:
        return int(sum(w.scores.size for w in self.waves))

    @property
    def generated_tokens(self) -> int:
        return int(sum(float(w.lengths.sum()) for w in self.waves))

    @property
    def trained_tokens(self) -> int:
        return int(sum(float(self.waves[w].lengths[rows].sum()) for w, rows, _ in self.trained))


def collect_dapo_step(
    stream: PromptStream,
    generate: Callable[[np.ndarray, np.ndarray], Wave],
    *,
    n: int,
    min_size: int,
    max_gen_batches: int,
    cut: str = "spread",
    whole_only: bool = False,
    rng: np.random.Generator | None = None,
) -> DapoStep:
    """Generate and filter until T = M x n rollouts are ready, then pick them (module docstring).

    Args:
        stream: the run's prompt stream (its allocator receives every rollout's score).
        generate: ``generate(ids, budgets) -> Wave`` samples ``budgets[i]`` rollouts of prompt
            ``ids[i]``, rows in prompt order (``np.repeat(arange(k), budgets)``).
        n: rollouts per prompt of uniform GRPO (T = M x n).
        min_size: fewest rollouts a cut group keeps (``coba.min_rollouts``).
        max_gen_batches: at most this many x M prompts submitted in the step.
        cut: the sessions a cut group keeps: ``spread`` (`sessions_to_keep`, veRL's path) or
            ``random`` (drawn from ``rng``); a counterfactual of docs/lab/dapo_why_design.md.
        whole_only: train whole ready groups only, oldest first while they fit (a counterfactual:
            ``shortfall`` may be > 0).
        rng: the random numbers of ``cut="random"``.

    Returns:
        The step's `DapoStep`; ``observed_rollouts`` equals ``generated_rollouts``.
    """
    if cut not in ("spread", "random"):
        raise ValueError(f"cut={cut!r} must be 'spread' or 'random'.")
    if cut == "random" and rng is None:
        raise ValueError("cut='random' needs an rng.")
    m, allocator = stream.m, stream.allocator
    target = m * n
    stream.steps += 1
    step = DapoStep(trained=[], waves=[], groups=[], target=target)

    def observe(groups: list[tuple[Group, np.ndarray]]) -> None:
        """Score the given rows of each group into the tracker (with their lengths)."""
        pairs = [(g, r) for g, r in groups if r.size]
        if not pairs:
            return
        ids = np.concatenate([np.full(r.size, g.prompt, np.int64) for g, r in pairs])
        scores = np.concatenate([g.scores[r] for g, r in pairs])
        lengths = np.concatenate([g.lengths[r] for g, r in pairs])
        start = time.perf_counter()
        allocator.observe(ids, scores, lengths)
        step.observe_s += time.perf_counter() - start
        step.observed_rollouts += int(ids.size)

    ready: list[Group] = []
    credit = 0
    pending = m
    while True:
        ids, budgets = stream.take(pending)
        step.submissions += 1
        step.prompts += int(ids.size)
        wave = generate(ids, budgets)
        w = len(step.waves)
        step.waves.append(wave)
        starts = np.concatenate([[0], np.cumsum(budgets)])
        ages = stream.steps - np.asarray(stream.round_steps, np.int64)[stream.last_rounds]
        evicted_now: list[Group] = []
        for i, prompt in enumerate(ids.tolist()):
            rows = np.arange(starts[i], starts[i + 1])
            group = Group(prompt, w, rows, wave.scores[rows], wave.lengths[rows], int(ages[i]))
            step.groups.append(group)
            (ready if has_spread(group.scores) else evicted_now).append(group)
        observe([(g, np.arange(g.size)) for g in evicted_now])
        step.evicted += len(evicted_now)
        have = sum(g.size for g in ready)
        if have >= target or step.prompts >= max_gen_batches * m:
            break
        credit += 2 * len(evicted_now)
        if credit == 0:
            credit = math.ceil((target - have) / n)
        pending = min(credit, m, max_gen_batches * m - step.prompts)
        credit -= pending
    step.allocations = stream.pop_allocations()
    if not ready:
        return step
    if whole_only:
        whole, have = [], 0
        for position, group in enumerate(ready):
            if have + group.size <= target:
                whole.append(position)
                have += group.size
        cuts: dict[int, int] = {}
        picked = set(whole)
    else:
        choice = select_to_budget([g.size for g in ready], target, min_size)
        cuts = dict(choice.cuts)
        picked = set(choice.whole) | set(cuts)
    chosen = sorted(picked)
    trained: list[tuple[Group, np.ndarray]] = []
    for position in chosen:
        group = ready[position]
        kept = np.arange(group.size)
        if position in cuts:
            if cut == "random":
                kept = np.sort(rng.choice(group.size, size=cuts[position], replace=False)).astype(np.int64)
            else:
                values = dict(enumerate(group.scores.tolist()))
                kept = np.asarray(sorted(sessions_to_keep(values, cuts[position])), np.int64)
            away = np.setdiff1d(np.arange(group.size), kept)
            observe([(group, away)])
            step.cut_rollouts += int(away.size)
            step.groups_cut += 1
        trained.append((group, kept))
    surplus = [g for position, g in enumerate(ready) if position not in picked]
    observe([(g, np.arange(g.size)) for g in surplus])
    step.surplus = len(surplus)
    observe(trained)
    step.trained = [(g.wave, g.rows[kept], k) for k, (g, kept) in enumerate(trained)]
    step.trained_groups = [g for g, _ in trained]
    return step
