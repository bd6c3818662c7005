"""DAPO dynamic sampling in the lab: M x n rollouts trained, every generated rollout observed once,
refills from the prompt stream's rounds, and the run rows that count what generation cost."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.lab import runner
from coba_verl.lab.composition import batch_composition
from coba_verl.lab.config import LabConfig, RunSpec
from coba_verl.lab.dapo import PromptStream, Wave, collect_dapo_step, has_spread
from coba_verl.lab.runner import train_run
from coba_verl.lab.seeds import prompt_order, prompt_stream
from tests.lab.test_lab_grpo import TINY, _constant_task_context

N_PROMPTS = 60


def _scores_of(prompt: int, b: int) -> np.ndarray:
    """Prompts 0 mod 3 always fail, 1 mod 3 always pass, 2 mod 3 pass their first rollout only."""
    kind = prompt % 3
    if kind == 0:
        return np.zeros(b)
    if kind == 1:
        return np.ones(b)
    return (np.arange(b) == 0).astype(np.float64)


class _Generator:
    """A fake generation: scores by `_scores_of`, length 3 + prompt % 5 tokens per rollout."""

    def __init__(self) -> None:
        self.waves: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, ids: np.ndarray, budgets: np.ndarray) -> Wave:
        self.waves.append((ids.copy(), budgets.copy()))
        scores = np.concatenate(
            [_scores_of(p, b) for p, b in zip(ids.tolist(), budgets.tolist(), strict=True)]
        )
        lengths = np.concatenate(
            [np.full(b, 3.0 + p % 5) for p, b in zip(ids.tolist(), budgets.tolist(), strict=True)]
        )
        return Wave(scores, lengths)


def _allocator(strategy: str, history: bool) -> BudgetAllocator:
    alloc = BudgetAllocator(CobaConfig(strategy=strategy, max_rollouts=16), num_prompts=N_PROMPTS)
    if history:  # every prompt seen once with a pass rate in (0, 1), so budgets differ
        ids = np.arange(N_PROMPTS)
        alloc.record(ids, 1 + ids % 3, np.full(N_PROMPTS, 4))
        alloc.end_step()
    return alloc


def _counting_order(start: int = 0):
    nxt = [start]

    def order(k: int) -> np.ndarray:
        out = (np.arange(nxt[0], nxt[0] + k) % N_PROMPTS).astype(np.int64)
        nxt[0] += k
        return out

    return order


@pytest.mark.parametrize(("strategy", "history"), [("uniform", False), ("coba", True), ("knapsack", True)])
def test_dapo_step_trains_exactly_m_times_n_and_every_generated_rollout_reaches_the_tracker_once(
    strategy: str, history: bool
) -> None:
    m, n = 6, 4
    alloc = _allocator(strategy, history)
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    observe = alloc.observe

    def spy(ids, scores, lengths=None):
        seen.append((np.asarray(ids).copy(), np.asarray(scores).copy()))
        observe(ids, scores, lengths)

    alloc.observe = spy  # type: ignore[method-assign]
    stream = PromptStream(_counting_order(), alloc, m, m * n)
    gen = _Generator()
    step = collect_dapo_step(stream, gen, n=n, min_size=2, max_gen_batches=10)
    assert step.trained_rollouts == m * n and step.shortfall == 0
    assert step.submissions == len(gen.waves) > 1  # two thirds of the groups are evicted: refills
    # every generated rollout observed exactly once: per prompt, the observed count is its budget
    generated = np.zeros(N_PROMPTS, np.int64)
    for ids, budgets in gen.waves:
        np.add.at(generated, ids, budgets)
    observed = np.zeros(N_PROMPTS, np.int64)
    for ids, _ in seen:
        np.add.at(observed, ids, 1)
    assert observed.tolist() == generated.tolist()
    assert step.observed_rollouts == step.generated_rollouts == int(generated.sum())
    _, _, rollouts = alloc.tracker.pending_totals()
    assert int(rollouts.sum()) == step.generated_rollouts
    # what is trained has a reward spread in every group; evicted groups are the all-equal ones
    for w, rows, _ in step.trained:
        assert has_spread(step.waves[w].scores[rows])
    assert step.evicted == sum(not has_spread(g.scores) for g in step.groups)


def test_uniform_dapo_trains_the_first_m_ready_groups_whole() -> None:
    """With every group n rollouts, the rollout-counted rule is veRL's group-counted one."""
    m, n = 6, 4
    stream = PromptStream(_counting_order(), _allocator("uniform", False), m, m * n)
    step = collect_dapo_step(stream, _Generator(), n=n, min_size=2, max_gen_batches=10)
    ready = [g for g in step.groups if has_spread(g.scores)]
    assert [k for _, _, k in step.trained] == list(range(m))
    assert [(w, rows.tolist()) for w, rows, _ in step.trained] == [
        (g.wave, g.rows.tolist()) for g in ready[:m]
    ]
    assert step.cut_rollouts == 0 and step.surplus == len(ready) - m


class _OneFails(_Generator):
    """Prompt 0 fails every rollout; every other prompt passes its first rollout only."""

    def __call__(self, ids: np.ndarray, budgets: np.ndarray) -> Wave:
        wave = super().__call__(ids, budgets)
        wave.scores = np.concatenate(
            [
                np.zeros(b) if p == 0 else (np.arange(b) == 0) * 1.0
                for p, b in zip(ids.tolist(), budgets.tolist(), strict=True)
            ]
        )
        return wave


def test_refill_credit_is_two_prompts_per_evicted_group_and_refills_continue_the_round() -> None:
    m, n = 6, 4
    stream = PromptStream(_counting_order(), _allocator("uniform", False), m, m * n)
    gen = _OneFails()
    step = collect_dapo_step(stream, gen, n=n, min_size=2, max_gen_batches=10)
    assert [ids.tolist() for ids, _ in gen.waves] == [[0, 1, 2, 3, 4, 5], [6, 7]]  # 1 evicted: 2 refilled
    assert step.evicted == 1 and step.surplus == 1 and step.trained_rollouts == 24
    assert step.allocations and len(step.allocations) == 2  # the refill opened a second round of M
    # the round's rest (prompts 8-11) goes out first in the next step, then a new round
    nxt = collect_dapo_step(stream, gen, n=n, min_size=2, max_gen_batches=10)
    assert gen.waves[2][0].tolist() == [8, 9, 10, 11, 12, 13] and nxt.submissions == 1


def test_a_cut_group_keeps_its_reward_spread_and_the_cut_rollouts_are_observed() -> None:
    m, n = 4, 4
    alloc = _allocator("coba", True)
    stream = PromptStream(_counting_order(2), alloc, m, m * n)  # starts at a mixed prompt
    step = collect_dapo_step(stream, _Generator(), n=n, min_size=2, max_gen_batches=10)
    sizes = [rows.size for _, rows, _ in step.trained]
    assert sum(sizes) == m * n
    full = {(g.wave, int(g.rows[0])): g.size for g in step.groups}
    cut = [(w, rows) for w, rows, _ in step.trained if rows.size < full[(w, int(rows[0]))]]
    assert len(cut) == (1 if step.cut_rollouts else 0)
    for w, rows in cut:
        assert has_spread(step.waves[w].scores[rows])


def test_the_generation_cap_trains_what_is_ready_and_records_the_shortfall() -> None:
    m, n = 6, 4
    stream = PromptStream(lambda k: np.zeros(k, np.int64), _allocator("uniform", False), m, m * n)  # all fail
    step = collect_dapo_step(stream, _Generator(), n=n, min_size=2, max_gen_batches=3)
    assert step.prompts == 3 * m and step.trained == [] and step.shortfall == m * n
    assert step.observed_rollouts == step.generated_rollouts == 3 * m * n


def test_prompt_stream_continues_prompt_order() -> None:
    nxt = prompt_stream(10, 3)
    assert np.concatenate([nxt(7), nxt(13)]).tolist() == prompt_order(10, 4, 5, 3).reshape(-1).tolist()


def count_observed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: the rollouts every lab allocator's ``observe`` receives from now on (it still records)."""
    observed = [0]
    real = runner.BudgetAllocator.observe

    def spy(self, ids, scores, lengths=None):
        observed[0] += int(np.size(ids))
        return real(self, ids, scores, lengths)

    monkeypatch.setattr(runner.BudgetAllocator, "observe", spy)
    return observed


def tiny_dapo_config(label: str) -> LabConfig:
    """A 6-step DAPO lab run of 5 prompts x 4 rollouts (M x n = 20) on the constant task."""
    return LabConfig(
        **TINY, runs=[label], n_train=10, n_eval=10, steps=6, prompts_per_step=5, rollouts_per_prompt=4,
        eval_every=6, eval_samples=1, lr=3e-3, dapo=True,
    )  # fmt: skip


def test_dapo_run_rows_count_generated_and_trained_rollouts(monkeypatch: pytest.MonkeyPatch) -> None:
    observed = count_observed(monkeypatch)
    cfg = tiny_dapo_config("coba")
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec("coba"), rows.append)
    for r in rows:
        assert r["step_rollouts_trained"] + r["shortfall"] == 20
        assert r["step_rollouts_generated"] >= r["step_rollouts_trained"]
        assert r["step_tokens_generated"] >= r["step_tokens_trained"] > 0 or r["shortfall"] == 20
    assert rows[-1]["rollouts_generated"] == sum(r["step_rollouts_generated"] for r in rows) == observed[0]
    assert rows[-1]["tokens_generated"] == sum(r["step_tokens_generated"] for r in rows)


@pytest.mark.parametrize(("options", "expected"), [({}, "random"), ({"dapo_cut": "spread"}, "spread")])
def test_a_dapo_run_cuts_at_random_unless_told_to_keep_the_score_mix(
    monkeypatch: pytest.MonkeyPatch, options: dict, expected: str
) -> None:
    """The DAPO default chosen by docs/lab/dapo_why_design.md's rule: ``dapo_cut=random``."""
    cuts: list[str] = []
    real = runner.collect_dapo_step

    def spy(*args, **kwargs):
        cuts.append(kwargs["cut"])
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "collect_dapo_step", spy)
    cfg = LabConfig(
        **TINY, runs=["coba"], n_train=10, n_eval=10, steps=2, prompts_per_step=5, rollouts_per_prompt=4,
        eval_every=2, eval_samples=1, lr=3e-3, dapo=True, **options,
    )  # fmt: skip
    train_run(cfg, _constant_task_context(cfg), RunSpec("coba"), lambda row: None)
    assert cuts and set(cuts) == {expected}


def test_without_dapo_generated_equals_trained() -> None:
    cfg = LabConfig(
        **TINY, runs=["uniform"], n_train=10, n_eval=10, steps=3, prompts_per_step=5, rollouts_per_prompt=4,
        eval_every=3, eval_samples=1,
    )  # fmt: skip
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec("uniform"), rows.append)
    assert all(r["rollouts_generated"] == r["rollouts"] == 20 * r["step"] for r in rows)
    assert all(r["tokens_generated"] == r["tokens_trained"] and r["submissions"] == 1 for r in rows)


def test_dapo_with_a_token_budget_is_refused_naming_the_run() -> None:
    with pytest.raises(ValueError, match=r"run 'coba\+token_budget': a token budget .* with dapo=true"):
        LabConfig(**TINY, runs=["uniform", "coba+token_budget"], dapo=True)


class _FixedBudgets:
    """An allocator stand-in: round 0 of 3 prompts gets the budgets [2, 5, 5], every later one [3, 3, 6]."""

    def __init__(self) -> None:
        self.rounds = 0

    def allocate(self, ids, total):
        budgets = [2, 5, 5] if self.rounds == 0 else [3, 3, 6]
        self.rounds += 1
        return SimpleNamespace(budgets=np.array(budgets)[: len(ids)])

    def observe(self, ids, scores, lengths=None):
        pass


def _cut_step(**knobs):
    """Prompt 0 fails every rollout (evicted); the refill takes prompts 3, 4 (B 3, 3): ready
    [5, 5, 3, 3] for a target of 12, which no whole groups make, so prompt 3's group is cut to 2."""
    stream = PromptStream(_counting_order(), _FixedBudgets(), 3, 12)
    return collect_dapo_step(stream, _OneFails(), n=4, min_size=2, max_gen_batches=10, **knobs)


def test_whole_only_trains_whole_ready_groups_oldest_first_while_they_fit_and_cuts_none() -> None:
    cut = _cut_step()
    assert cut.groups_cut == 1 and cut.cut_rollouts == 1 and cut.trained_rollouts == 12
    step = _cut_step(whole_only=True)
    # oldest first while they fit: 5, 5 (10); neither 3 fits
    pairs = zip(step.trained_groups, step.trained, strict=True)
    assert [(g.prompt, rows.size) for g, (_, rows, _) in pairs] == [(1, 5), (2, 5)]
    assert step.groups_cut == step.cut_rollouts == 0 and step.shortfall == 2


def test_a_random_cut_keeps_as_many_sessions_as_the_spread_cut_drawn_from_the_rng() -> None:
    spread = _cut_step()
    kept = {g.prompt: rows for g, (_, rows, _) in zip(spread.trained_groups, spread.trained, strict=True)}
    assert kept[3].tolist() == [0, 1]  # the score mix: the success (session 0) and a failure
    draws = set()
    for seed in range(8):
        step = _cut_step(cut="random", rng=np.random.default_rng(seed))
        got = {g.prompt: rows for g, (_, rows, _) in zip(step.trained_groups, step.trained, strict=True)}
        assert step.trained_rollouts == 12 and step.groups_cut == 1 and got[3].size == 2
        assert {p: r.tolist() for p, r in got.items() if p != 3} == {
            p: r.tolist() for p, r in kept.items() if p != 3
        }
        draws.add(tuple(got[3].tolist()))
    assert len(draws) > 1  # which two are kept depends on the draw
    with pytest.raises(ValueError, match="rng"):
        _cut_step(cut="random")


def test_groups_carry_the_age_of_their_round_in_steps() -> None:
    """Prompt 0 fails every rollout, the others have a spread: step 1 takes round 0 (prompts 0-5)
    and, refilling 2 prompts for the evicted one, begins round 1 (6, 7); step 2 finishes round 1
    (8-11, allocated a step earlier: age 1) and begins round 2 (12, 13: age 0)."""
    m, n = 6, 4
    stream = PromptStream(_counting_order(), _allocator("uniform", False), m, m * n)
    first = collect_dapo_step(stream, _OneFails(), n=n, min_size=2, max_gen_batches=10)
    second = collect_dapo_step(stream, _OneFails(), n=n, min_size=2, max_gen_batches=10)
    assert [(g.prompt, g.age) for g in first.groups] == [(p, 0) for p in range(8)]
    assert [(g.prompt, g.age) for g in second.groups] == [(8, 1), (9, 1), (10, 1), (11, 1), (12, 0), (13, 0)]
    assert stream.round_steps == [1, 1, 2]


def test_batch_composition_counts_groups_sizes_and_advantage_mass() -> None:
    # group 0: [1, 0] -> A = +-0.7071 (unbiased std 0.7071); group 1: [1, 0, 0, 0] -> std 0.5,
    # A = 1.5, -0.5 x 3; group 2: [0, 0] -> no spread, mass 0
    index = np.array([0, 0, 1, 1, 1, 1, 2, 2])
    scores = np.array([1, 0, 1, 0, 0, 0, 0, 0], np.float64)
    out = batch_composition(index, scores, np.array([0.5, 0.25, 0.0]), np.array([0, 1, 2]), "proportional")
    m0, m1 = 2 / np.sqrt(2), 1.5 + 3 * 0.5
    assert out["trained_groups"] == 3 and out["trained_size_max"] == 4
    assert out["trained_size_mean"] == pytest.approx(8 / 3)
    assert out["trained_eff_groups"] == pytest.approx((m0 + m1) ** 2 / (m0**2 + m1**2), rel=1e-5)
    assert out["trained_top_mass"] == pytest.approx(m1 / (m0 + m1), rel=1e-5)
    assert out["trained_pass_hist"] == [1, 0, 1, 1, 0, 0] and out["trained_age_mean"] == 1.0
    # equal group weight: rollout factors (R / G) / B_g = (8/3)/2 and (8/3)/4
    eq = batch_composition(index, scores, np.array([0.5, 0.25, 0.0]), np.array([0, 1, 2]), "equal")
    w0, w1 = m0 * (8 / 3) / 2, m1 * (8 / 3) / 4
    assert eq["trained_top_mass"] == pytest.approx(max(w0, w1) / (w0 + w1), rel=1e-5)
