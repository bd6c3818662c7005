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

Three changes of the study docs/dapo_n16_design.md (amendment 1), each off by default: GRESO's
skip (the allocator's ``skip_spread_below``: a prompt unlikely to give a spread gets no rollouts
this round; `PromptStream` passes its budget of 0 on and the step does not generate it),
sized waves (``size_waves``: a wave generates no more than the rollouts still missing) and carry
(``carry``: cut-away sessions and surplus groups train in the next step, at most one step old).

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
from coba_verl.core.wave_sizing import size_submission

__all__ = ["PromptStream", "Wave", "DapoStep", "collect_dapo_step", "has_spread"]


class PromptStream:
    """The seed's prompts in order (epochs of a seeded shuffle), M at a time in allocated rounds.

    Args:
        order: a function ``chunk(k) -> (k,) ids`` giving the next prompt ids of the seed's order.
        allocator: allocates each round when its first prompt is drawn.
        m: prompts per round (M).
        total: rollouts per round (M x n).

    With the allocator's ``skip_spread_below`` > 0 (GRESO's skip, `coba_verl.core.spread_skip`), a
    round's prompts unlikely to give a reward spread have budget 0: ``take`` returns them with 0
    and the step does not generate them.
    """

    def __init__(
        self,
        order: Callable[[int], np.ndarray],
        allocator: BudgetAllocator,
        m: int,
        total: int,
    ) -> None:
        self._order = order
        self.allocator = allocator
        self.m = m
        self.total = total
        self._rest_ids = np.zeros(0, np.int64)
        self._rest_budgets = np.zeros(0, np.int64)
        self._rest_rounds = np.zeros(0, np.int64)
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
                self._rest_rounds = np.full(round_ids.size, len(self.round_steps) - 1, np.int64)
            j = min(k, self._rest_ids.size)
            ids.append(self._rest_ids[:j])
            budgets.append(self._rest_budgets[:j])
            rounds.append(self._rest_rounds[:j])
            self._rest_ids, self._rest_budgets = self._rest_ids[j:], self._rest_budgets[j:]
            self._rest_rounds = self._rest_rounds[j:]
            k -= j
            self.drawn += j
        if not ids:
            self.last_rounds = np.zeros(0, np.int64)
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.last_rounds = np.concatenate(rounds)
        return np.concatenate(ids), np.concatenate(budgets)

    def put_back(self, ids: np.ndarray, budgets: np.ndarray, rounds: np.ndarray) -> None:
        """Return prompts that ``take`` gave but the step did not submit: they come first next time,
        with their budgets and rounds (C-size's trimmed waves)."""
        self._rest_ids = np.concatenate([np.asarray(ids, np.int64), self._rest_ids])
        self._rest_budgets = np.concatenate([np.asarray(budgets, np.int64), self._rest_budgets])
        self._rest_rounds = np.concatenate([np.asarray(rounds, np.int64), self._rest_rounds])
        self.drawn -= int(np.asarray(ids).size)

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
    carried: bool = False  # kept from the step before (C-carry): scored already, never carried again

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
    ``waves[:first_new_wave]`` are the waves of groups carried in from the step before (their rows
    were generated and counted there); ``carry_out`` holds (wave, group) pairs kept for the next step.
    Rollouts generated in the step = trained (not carried in) + cut + evicted + surplus + carried out;
    rollouts carried in = trained of them + ``carried_dropped``.
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
    skipped: int = 0  # prompts drawn with budget 0 (GRESO's skip), not generated
    trimmed_rollouts: int = 0  # allocated rollouts not generated because a wave was sized (C-size)
    first_new_wave: int = 0
    carried_in: int = 0  # rollouts of groups carried in
    carried_dropped: int = 0  # of them, not trained (no spread, or not picked): dropped
    carried_out: int = 0  # rollouts kept for the next step
    carry_out: list[tuple[Wave, Group]] = field(default_factory=list)
    trained_groups: list[Group] = field(default_factory=list)
    observed_rollouts: int = 0
    observe_s: float = 0.0  # wall time in ``allocator.observe``
    allocations: list[Allocation] = field(default_factory=list)

    @property
    def new_waves(self) -> list[Wave]:
        """The waves generated in this step."""
        return self.waves[self.first_new_wave :]

    @property
    def trained_rollouts(self) -> int:
        return int(sum(rows.size for _, rows, _ in self.trained))

    @property
    def shortfall(self) -> int:
        return self.target - self.trained_rollouts

    @property
    def generated_rollouts(self) -> int:
        return int(sum(w.scores.size for w in self.new_waves))

    @property
    def generated_tokens(self) -> int:
        return int(sum(float(w.lengths.sum()) for w in self.new_waves))

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
    size_waves: bool = False,
    carried: list[tuple[Wave, Group]] | None = None,
    carry: bool = False,
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
        size_waves: C-size (docs/dapo_n16_design.md, amendment 1): each wave's budgets are trimmed,
            in submission order, to the rollouts still missing, the last prompt keeping
            max(min_size, what is left); the prompts beyond go back to the stream.
        carried: the previous step's ``carry_out``: ready first (oldest first) when they have a
            spread, dropped otherwise; the first wave then submits max(1, ceil((T - carried) / n))
            prompts.
        carry: C-carry: keep this step's cut-away sessions and surplus groups in ``carry_out``
            (a group carried in is never carried again).

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
        """Score the given rows of each group into the tracker (with their lengths), once:
        a carried group was scored in the step that generated it."""
        pairs = [(g, r) for g, r in groups if r.size and not g.carried]
        if not pairs:
            return
        ids = np.concatenate([np.full(r.size, g.prompt, np.int64) for g, r in pairs])
        scores = np.concatenate([g.scores[r] for g, r in pairs])
        lengths = np.concatenate([g.lengths[r] for g, r in pairs])
        start = time.perf_counter()
        allocator.observe(ids, scores, lengths)
        step.observe_s += time.perf_counter() - start
        step.observed_rollouts += int(ids.size)

    ready = _carry_in(step, carried or [])
    have = sum(g.size for g in ready)
    credit = 0
    # With groups carried in, the first wave submits what they leave missing, at least one prompt
    # (so every step measures the policy it trains: F_t needs an outcome of this step).
    pending = m if not carried else min(m, max(1, math.ceil((target - have) / n)))
    drawn_before = stream.drawn  # step.prompts = what the stream gave this step (put-backs returned)
    while pending > 0:
        ids, budgets = stream.take(pending)
        rounds = stream.last_rounds
        drawn = budgets > 0
        step.skipped += int(np.sum(~drawn))
        ids, budgets, rounds = ids[drawn], budgets[drawn], rounds[drawn]
        if size_waves and ids.size:
            ids, budgets, rounds = _size_wave(stream, step, ids, budgets, rounds, target - have, min_size)
        step.prompts = stream.drawn - drawn_before
        evicted_now: list[Group] = []
        if ids.size:
            step.submissions += 1
            wave = generate(ids, budgets)
            w = len(step.waves)
            step.waves.append(wave)
            starts = np.concatenate([[0], np.cumsum(budgets)])
            ages = stream.steps - np.asarray(stream.round_steps, np.int64)[rounds]
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
    trained: list[tuple[Group, np.ndarray]] = []
    leftovers: list[Group] = []  # cut-away sessions and surplus groups, each a group of its own
    for position in sorted(picked):
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
            leftovers.append(_part(group, away))
        trained.append((group, kept))
    surplus = [g for position, g in enumerate(ready) if position not in picked]
    observe([(g, np.arange(g.size)) for g in surplus])
    step.surplus = len(surplus)
    leftovers.extend(surplus)
    observe(trained)
    step.trained = [(g.wave, g.rows[kept], k) for k, (g, kept) in enumerate(trained)]
    step.trained_groups = [g for g, _ in trained]
    for group in leftovers:
        if group.carried:
            step.carried_dropped += group.size  # at most one update old: never carried twice
        elif carry:
            step.carry_out.append((step.waves[group.wave], group))
            step.carried_out += group.size
    return step


def _part(group: Group, positions: np.ndarray) -> Group:
    """The sessions ``positions`` of ``group`` as a group of their own."""
    return Group(
        group.prompt, group.wave, group.rows[positions], group.scores[positions],
        group.lengths[positions], group.age, group.carried,
    )  # fmt: skip


def _carry_in(step: DapoStep, carried: list[tuple[Wave, Group]]) -> list[Group]:
    """The carried groups with a reward spread, ready first, their waves first in ``step.waves``;
    the others are dropped (counted in ``carried_dropped``)."""
    ready: list[Group] = []
    index: dict[int, int] = {}  # id(wave) -> its position in step.waves
    for wave, group in carried:
        step.carried_in += group.size
        if not has_spread(group.scores):
            step.carried_dropped += group.size
            continue
        w = index.setdefault(id(wave), len(step.waves))
        if w == len(step.waves):
            step.waves.append(wave)
        ready.append(Group(group.prompt, w, group.rows, group.scores, group.lengths, group.age + 1, True))
    step.first_new_wave = len(step.waves)
    return ready


def _size_wave(
    stream: PromptStream, step: DapoStep, ids: np.ndarray, budgets: np.ndarray, rounds: np.ndarray,
    missing: int, min_size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """C-size: the wave's budgets trimmed, in order, to ``missing`` rollouts
    (`coba_verl.core.wave_sizing.size_submission`: the last prompt keeps max(min_size, what is left));
    the prompts beyond go back to ``stream``."""
    if missing <= 0:
        return ids, budgets, rounds
    sized = size_submission(budgets, missing, min_size)
    k = sized.prompts
    if k == budgets.size and not sized.trimmed:
        return ids, budgets, rounds
    step.trimmed_rollouts += sized.trimmed
    stream.put_back(ids[k:], budgets[k:], rounds[k:])
    return ids[:k], np.asarray(sized.budgets, dtype=budgets.dtype), rounds[:k]
