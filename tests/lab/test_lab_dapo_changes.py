"""The three DAPO changes of docs/dapo_n16_design.md in the lab: sized waves (C-size), carried
leftovers (C-carry) and GRESO's skip (C-skip). Each pins what is generated and what is trained, and
that every generated rollout reaches the tracker exactly once."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.core.spread_skip import SkipRule, skip_unlikely_spread, spread_chance
from coba_verl.lab.config import LabConfig, parse_run_label
from coba_verl.lab.dapo import DapoStep, PromptStream, collect_dapo_step, has_spread
from coba_verl.lab.runner import train_run
from tests.lab.test_lab_dapo import N_PROMPTS, _counting_order, _Generator, count_observed, tiny_dapo_config
from tests.lab.test_lab_grpo import TINY, _constant_task_context

M, N = 6, 4


def _allocator(strategy: str, history: bool) -> BudgetAllocator:
    """Budgets in [2, 16]; with history the prompts with a spread (2 mod 3) look like p = 1/2, so
    CoBA gives them the large budgets and a wave's last group passes M x n."""
    alloc = BudgetAllocator(CobaConfig(strategy=strategy, max_rollouts=16), num_prompts=N_PROMPTS)
    if history:
        ids = np.arange(N_PROMPTS)
        alloc.record(ids, np.array([1, 3, 2])[ids % 3], np.full(N_PROMPTS, 4))
        alloc.end_step()
    return alloc


def _spy(alloc: BudgetAllocator) -> list[int]:
    """Count the rollouts `observe` receives (ids of each call, concatenated)."""
    seen: list[int] = []
    real = alloc.observe

    def spy(ids, scores, lengths=None):
        seen.extend(np.asarray(ids).tolist())
        return real(ids, scores, lengths)

    alloc.observe = spy  # type: ignore[method-assign]
    return seen


def _steps(alloc: BudgetAllocator, k: int, **options) -> tuple[list[DapoStep], _Generator]:
    gen = _Generator()
    stream = PromptStream(_counting_order(), alloc, M, M * N)
    carry = options.pop("carry", False)
    out: list[DapoStep] = []
    carried: list = []
    for _ in range(k):
        step = collect_dapo_step(
            stream, gen, n=N, min_size=2, max_gen_batches=10, carried=carried, carry=carry, **options
        )
        carried = step.carry_out
        out.append(step)
    return out, gen


def test_sized_waves_generate_no_more_than_the_missing_rollouts_and_lose_no_prompt() -> None:
    alloc = _allocator("coba", history=True)
    seen = _spy(alloc)
    steps, gen = _steps(alloc, 5, size_waves=True)
    for step in steps:
        assert step.trained_rollouts == M * N
        ready = step.trained_rollouts + step.cut_rollouts  # no surplus: the ready never pass T by B_low
        assert step.surplus == 0 and step.cut_rollouts <= 1 and ready <= M * N + 1
    generated = sum(s.generated_rollouts for s in steps)
    assert len(seen) == generated == sum(int(b.sum()) for _, b in gen.waves)
    submitted = np.concatenate([ids for ids, _ in gen.waves])
    drawn = sum(s.prompts for s in steps)
    assert submitted.size == drawn  # no skip here: every drawn prompt was generated once
    assert submitted.tolist() == (np.arange(drawn) % N_PROMPTS).tolist()  # put back, then drawn next
    assert sum(s.trimmed_rollouts for s in steps) > 0


def test_without_sized_waves_the_same_stream_generates_surplus_or_cuts() -> None:
    steps, _ = _steps(_allocator("coba", history=True), 5)
    assert sum(s.surplus for s in steps) + sum(s.cut_rollouts for s in steps) > 0


def test_carried_leftovers_train_in_the_next_step_are_scored_once_and_never_carried_twice() -> None:
    alloc = _allocator("coba", history=True)
    seen = _spy(alloc)
    steps, _ = _steps(alloc, 6, carry=True)
    assert sum(s.carried_out for s in steps[:-1]) > 0
    for before, step in zip(steps, steps[1:], strict=False):
        assert step.carried_in == before.carried_out
        from_carry = sum(
            rows.size for (w, rows, _), g in zip(step.trained, step.trained_groups, strict=True) if g.carried
        )
        assert step.carried_in == from_carry + step.carried_dropped
        assert all(not g.carried for _, g in step.carry_out)  # at most one step old
    for step in steps:
        assert step.trained_rollouts == M * N
        pairs = zip(step.trained, step.trained_groups, strict=True)
        new_trained = sum(rows.size for (_, rows, _), g in pairs if not g.carried)
        evicted = sum(g.size for g in step.groups if not has_spread(g.scores))
        # every rollout generated in the step: trained now, evicted, or carried to the next step
        assert step.generated_rollouts == new_trained + evicted + step.carried_out
    assert len(seen) == sum(s.generated_rollouts for s in steps)  # carried rows scored once


def test_a_step_with_leftovers_submits_only_what_they_leave_missing() -> None:
    steps, gen = _steps(_allocator("coba", history=True), 6, carry=True)
    first_wave = 0
    checked = 0
    for before in steps[:-1]:
        first_wave += before.submissions
        have = sum(g.size for _, g in before.carry_out if has_spread(g.scores))
        assert gen.waves[first_wave][0].size == min(M, max(1, -(-(M * N - have) // N)))
        checked += have > 0
    assert checked > 0


def test_skipped_prompts_are_not_generated_give_no_outcome_and_their_budget_goes_to_the_others() -> None:
    config = CobaConfig(strategy="coba", max_rollouts=16, skip_spread_below=0.1, skip_explore=0.0)
    alloc = BudgetAllocator(config, num_prompts=N_PROMPTS)
    ids = np.arange(N_PROMPTS)
    attempts = np.full(N_PROMPTS, 48)
    successes = np.where(ids % 3 == 0, 0, np.where(ids % 3 == 1, 24, 12))  # 0 mod 3: never solved
    alloc.record(ids, successes, attempts)
    alloc.end_step()
    before = alloc.tracker.window_counts(ids)
    stream = PromptStream(_counting_order(), alloc, M, M * N)
    gen = _Generator()
    step = collect_dapo_step(stream, gen, n=N, min_size=2, max_gen_batches=10)
    submitted = np.concatenate([i for i, _ in gen.waves])
    allocated_skips = sum(res.metrics["coba/skipped_prompts"] for res in step.allocations)
    assert 0 < step.skipped <= allocated_skips  # the rounds' skips include prompts not yet drawn
    assert not np.any(submitted % 3 == 0)  # B_low = 2 of 0/48: chance of a spread 0.04 < 0.1
    drawn_zero = [i for i in range(step.prompts) if i % 3 == 0]
    after = alloc.tracker.window_counts(np.asarray(drawn_zero))
    np.testing.assert_array_equal(after[1], before[1][drawn_zero])  # no invented outcome
    for res in step.allocations:  # the round's total goes to the kept prompts
        assert res.metrics["coba/skipped_prompts"] > 0
    first = gen.waves[0][1]
    assert int(first.sum()) == M * N  # the first round's kept prompts hold the whole M x n
    assert step.trained_rollouts == M * N


def test_spread_chance_is_the_posterior_mean_of_one_minus_q() -> None:
    rng = np.random.default_rng(0)
    s, a, b = np.array([0, 3, 40]), np.array([16, 8, 48]), np.array([2, 8, 16])
    got = spread_chance(s, a, b)
    for i in range(3):
        p = rng.beta(1 + s[i], 1 + a[i] - s[i], size=200_000)
        want = 1 - np.mean(p ** b[i] + (1 - p) ** b[i])
        assert got[i] == pytest.approx(want, abs=3e-3)
    assert np.isnan(spread_chance(np.array([0]), np.array([0]), np.array([4])))[0]


def test_the_skip_puts_back_the_likeliest_prompts_when_the_kept_cannot_hold_the_total() -> None:
    ids = np.arange(4)
    budgets = np.array([8, 8, 8, 8])  # total 32, B_up 10: at least 4 prompts must stay
    out, skipped = skip_unlikely_spread(
        ids, budgets, np.zeros(4, np.int64), np.array([400, 400, 400, 400]), SkipRule(0.5, 0.0),
        lambda kept: np.full(kept.size, 32 // kept.size), up=10, round_key=0,
    )  # fmt: skip
    assert not skipped.any() and out.tolist() == budgets.tolist()
    out, skipped = skip_unlikely_spread(
        ids, budgets, np.zeros(4, np.int64), np.array([400, 400, 4, 4]), SkipRule(0.5, 0.0),
        lambda kept: np.full(kept.size, 32 // kept.size), up=16, round_key=0,
    )  # fmt: skip
    assert skipped.tolist() == [True, True, False, False] and out.tolist() == [0, 0, 16, 16]


def test_the_exploration_draw_repeats_for_the_same_round_and_prompt() -> None:
    args = (np.arange(40), np.full(40, 2), np.zeros(40, np.int64), np.full(40, 48), SkipRule(0.1, 0.5))
    resolve = lambda kept: np.full(kept.size, 80 // kept.size) + (np.arange(kept.size) < 80 % kept.size)  # noqa: E731
    a = skip_unlikely_spread(*args, resolve, up=128, round_key=3)[1]
    b = skip_unlikely_spread(*args, resolve, up=128, round_key=3)[1]
    c = skip_unlikely_spread(*args, resolve, up=128, round_key=4)[1]
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist() and 5 < int(a.sum()) < 35


def test_dapo_options_need_dapo_and_appear_in_the_label() -> None:
    assert parse_run_label("coba+skip+size").label == "coba+size+skip"
    with pytest.raises(ValueError, match=r"\+carry change DAPO dynamic sampling and need dapo=true"):
        LabConfig(**TINY, runs=["uniform+carry"])


@pytest.mark.parametrize("label", ["coba+carry", "coba+size", "coba+skip", "uniform+carry"])
def test_a_dapo_run_with_a_change_trains_m_times_n_and_scores_what_it_generates_once(
    label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    observed = count_observed(monkeypatch)
    cfg = tiny_dapo_config(label)
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), parse_run_label(label), rows.append)
    for r in rows:
        assert r["step_rollouts_trained"] + r["shortfall"] == 20
        assert r["dapo_options"] == label.split("+", 1)[1]
    assert rows[-1]["rollouts_generated"] == observed[0]
    carried_out = [r["rollouts_carried_out"] for r in rows]
    carried_in = [r["rollouts_carried_in"] for r in rows]
    assert carried_in[1:] == carried_out[:-1] and carried_in[0] == 0
