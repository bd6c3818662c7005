"""The lab's training loop (`train_run`): GRPO runs from a seed's warm start (`coba_verl.lab.seeds`)
that differ only in allocation, with each step's rollouts, generated in one wave or DAPO's waves.

Per GRPO step of a run (spec §7, as the veRL trainer does it)::

    ids     = order[step]                          # (M,) stable prompt ids, same for every run
    res     = allocator.allocate(ids, total)       # (M,) budgets B_i, sum == total (a +prior
                                                   # run's tracker starts from measure_priors)
    rows    = repeat(arange(M), B)                 # [3, 5] -> [0, 0, 0, 1, 1, 1, 1, 1]
    y       = sample(model, prompts[ids[rows]])    # (R,) completions at temperature 1, KV cache
    scores  = verify(y)                            # (R,) in {0, 1}
    allocator.observe(ids[rows], scores); allocator.end_step()
    grpo_update(advantages grouped by rows)        # veRL's estimator and clipped loss, advantages
                                                   # x rollout_weights(rows, coba.group_weight)

Every run of a seed starts from the same warm-start weights, sees the same prompts in the same
order and is evaluated with the same random numbers, so differences between runs come from the
allocation (and the sampling noise it induces), not from the data.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import Qwen2ForCausalLM

from coba_verl.arithmetic.outcomes import sample_responses, trim_padding
from coba_verl.arithmetic.task import score_batch
from coba_verl.arithmetic.tokenizer import PAD, decode_responses
from coba_verl.core import BudgetAllocator
from coba_verl.lab.composition import batch_composition, pass_histogram
from coba_verl.lab.config import LabConfig, RunSpec
from coba_verl.lab.dapo import Group, PromptStream, Wave, collect_dapo_step
from coba_verl.lab.evaluation import evaluate, sampling_generator, seed_priors
from coba_verl.lab.exact_rates import exact_pass_rates
from coba_verl.lab.grpo import RolloutBatch, grpo_update, make_actor_config
from coba_verl.lab.oracle import MeasuredAllocator
from coba_verl.lab.seeds import SeedContext, new_model, prompt_stream

__all__ = ["StepSink", "train_run"]

StepSink = Callable[[dict[str, Any]], None]
"""Receives one metrics row per step (and the step-0 evaluation row)."""


def eval_steps(cfg: LabConfig) -> set[int]:
    """Steps (1-based, after the update) at which the held-out set is evaluated; always the last."""
    return {s for s in range(1, cfg.steps + 1) if s % cfg.eval_every == 0} | {cfg.steps}


def snapshot_steps(cfg: LabConfig) -> set[int]:
    """Steps (1-based) whose allocations are kept for the budget-vs-pass-rate plot: evenly spaced
    from the first step of the second epoch (when pass rates exist) to the last."""
    first = min(cfg.steps, math.ceil(cfg.n_train / cfg.prompts_per_step) + 1)
    return {int(round(x)) for x in np.linspace(first, cfg.steps, cfg.snapshot_steps)}


#: The DAPO counts of a row that are 0 without DAPO.
NO_REFILL = (
    "groups_evicted", "groups_surplus", "rollouts_cut", "groups_cut", "shortfall",
    "prompts_skipped", "rollouts_trimmed", "rollouts_carried_in", "rollouts_carried_out",
    "rollouts_carried_dropped",
)  # fmt: skip


@dataclass
class _StepRollouts:
    """What one step generated and what it trains (either mode).

    ``budgets``, ``prompt_rates`` are per generated group; ``batch`` is the update's rollouts.
    """

    batch: RolloutBatch | None
    composition: dict[str, Any]  # `batch_composition` of ``batch`` (empty without one)
    budgets: np.ndarray  # (G,) rollouts of each generated group
    prompt_rates: np.ndarray  # (G,) each generated group's pass rate
    scores: np.ndarray  # (R_gen,) every generated rollout's score
    generated_tokens: int
    trained_tokens: int
    costs: dict[str, int]  # submissions, rounds, groups_evicted, groups_surplus, rollouts_cut, shortfall
    plugin_s: float = 0.0  # allocate + observe


def _pad_right(t: torch.Tensor, width: int, value: int) -> torch.Tensor:
    """(R, T) -> (R, width), padded with ``value`` on the right."""
    return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)


@dataclass
class _WaveTensors:
    """A wave's rollouts as the update needs them (`Wave.payload`); tensors on the model's device."""

    rollout_ids: np.ndarray  # (R,) stable prompt id of each rollout
    rows: np.ndarray  # (R,) position of each rollout's prompt in the wave's ``ids``
    prompt_ids: torch.Tensor  # (R, P) the rollouts' prompts, common left padding trimmed
    prompt_mask: torch.Tensor  # (R, P)
    resp: torch.Tensor  # (R, T) sampled response tokens
    rmask: torch.Tensor  # (R, T)


def _generate_wave(
    model: Qwen2ForCausalLM, ctx: SeedContext, ids: np.ndarray, budgets: np.ndarray, gen: torch.Generator
) -> Wave:
    """``budgets[i]`` rollouts of each prompt ``ids[i]``, scored; the `_WaveTensors` as payload."""
    rows = np.repeat(np.arange(ids.size), budgets)  # [3, 5] -> [0, 0, 0, 1, 1, 1, 1, 1]
    rollout_ids = ids[rows]  # (R,)
    p_ids, p_mask, resp, rmask = sample_responses(
        model, ctx.tok, ctx.train_ids[rollout_ids], ctx.train_mask[rollout_ids], gen,
        max_new_tokens=ctx.max_new_tokens,
    )  # fmt: skip
    scores = score_batch(decode_responses(ctx.tok, resp, rmask), [ctx.train.answers[i] for i in rollout_ids])
    lengths = rmask.sum(-1).cpu().numpy().astype(np.float64)  # (R,) response tokens, <eos> included
    payload = _WaveTensors(rollout_ids, rows, p_ids, p_mask, resp, rmask)
    return Wave(scores=scores, lengths=lengths, payload=payload)


def _dapo_rollouts(
    cfg: LabConfig, ctx: SeedContext, model: Qwen2ForCausalLM, stream: PromptStream, gen: torch.Generator,
    min_size: int, group_weight: str, cut_rng: np.random.Generator, options: tuple[str, ...],
    carried: list[tuple[Wave, Group]],
) -> tuple[_StepRollouts, list[tuple[Wave, Group]]]:  # fmt: skip
    """One DAPO step (`coba_verl.lab.dapo`): waves until M x n rollouts are ready, then the batch;
    with it, the groups kept for the next step (run option ``+carry``)."""
    step = collect_dapo_step(
        stream,
        lambda ids, budgets: _generate_wave(model, ctx, ids, budgets, gen),
        n=cfg.rollouts_per_prompt,
        min_size=min_size,
        max_gen_batches=cfg.dapo_max_gen_batches,
        cut=cfg.dapo_cut,
        whole_only=cfg.dapo_whole_only,
        rng=cut_rng,
        size_waves="size" in options,
        carried=carried,
        carry="carry" in options,
    )
    batch = None
    composition: dict[str, Any] = {}
    if step.trained:
        device = next(model.parameters()).device
        tensors = [(step.waves[w].payload, rows) for w, rows, _ in step.trained]
        width = max(int(t.rmask[rows].sum(-1).max()) for t, rows in tensors)
        pad = ctx.tok.token_to_id(PAD)
        rollout_ids = np.concatenate([t.rollout_ids[rows] for t, rows in tensors])
        resp = torch.cat([_pad_right(t.resp[rows][:, :width], width, pad) for t, rows in tensors])
        rmask = torch.cat([_pad_right(t.rmask[rows][:, :width], width, 0) for t, rows in tensors])
        index = np.concatenate([np.full(rows.size, k, np.int64) for _, rows, k in step.trained])
        scores = np.concatenate([step.waves[w].scores[rows] for w, rows, _ in step.trained])
        p_ids, p_mask = trim_padding(ctx.train_ids[rollout_ids], ctx.train_mask[rollout_ids])
        batch = RolloutBatch(p_ids.to(device), p_mask.to(device), resp, rmask, scores, index)
        composition = batch_composition(
            index, scores, np.asarray([float(g.scores.mean()) for g in step.trained_groups]),
            np.asarray([g.age for g in step.trained_groups]), group_weight,
        )  # fmt: skip
    budgets = np.asarray([g.size for g in step.groups], np.int64)
    new_scores = [w.scores for w in step.new_waves]
    return _StepRollouts(
        batch=batch,
        composition=composition,
        budgets=budgets,
        prompt_rates=np.asarray([float(g.scores.mean()) for g in step.groups]),
        scores=np.concatenate(new_scores) if new_scores else np.zeros(0),
        generated_tokens=step.generated_tokens,
        trained_tokens=step.trained_tokens,
        costs={
            "submissions": step.submissions,
            "rounds": len(step.allocations),
            "groups_evicted": step.evicted,
            "groups_surplus": step.surplus,
            "rollouts_cut": step.cut_rollouts,
            "groups_cut": step.groups_cut,
            "shortfall": step.shortfall,
            "prompts_skipped": step.skipped,
            "rollouts_trimmed": step.trimmed_rollouts,
            "rollouts_carried_in": step.carried_in,
            "rollouts_carried_out": step.carried_out,
            "rollouts_carried_dropped": step.carried_dropped,
        },
        plugin_s=sum(a.elapsed_s for a in step.allocations) + step.observe_s,
    ), step.carry_out


def _measured(
    allocator: BudgetAllocator, model: Qwen2ForCausalLM, ctx: SeedContext, spec: RunSpec
) -> MeasuredAllocator | None:
    """The run's allocator measured against the exact pass rates of the current ``model`` (an oracle
    run's allocating from them: `coba_verl.lab.oracle`); None for worked answers, which have none."""
    if any("=" in a for a in ctx.train.answers):
        return None

    def exact(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rates = exact_pass_rates(
            model, ctx.tok, ctx.train_ids[ids], ctx.train_mask[ids], [ctx.train.answers[i] for i in ids],
            max_new_tokens=ctx.max_new_tokens,
        )  # fmt: skip
        return rates.p, rates.bound

    return MeasuredAllocator(allocator, exact, oracle=spec.strategy if spec.oracle else None)


def train_run(
    cfg: LabConfig,
    ctx: SeedContext,
    spec: RunSpec,
    sink: StepSink,
    *,
    snapshot: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train one run from the seed's warm start; every step's metrics go to ``sink``.

    Without DAPO a step allocates its M prompts, generates their rollouts and trains them all;
    with ``cfg.dapo`` it generates waves until M x n rollouts with a reward spread are ready
    (`coba_verl.lab.dapo`). Either way each row counts the rollouts and response tokens generated
    and trained (``rollouts`` = trained, cumulative; ``rollouts_generated``, ``tokens_generated``).

    Returns the last row. ``snapshot`` receives {run, seed, step, pass_rates, budgets} at
    `snapshot_steps`; ``on_step`` is called after each step (progress display).
    """
    torch.manual_seed(ctx.seed)
    model = new_model(cfg, ctx.tok, ctx.seed)
    model.load_state_dict(ctx.warm_state)
    model.to(cfg.device).eval()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    coba_cfg = cfg.coba_config(
        spec.allocator_strategy, spec.group_weight, spec.budget_unit, spec.dapo_options
    )
    allocator = BudgetAllocator(coba_cfg, num_prompts=len(ctx.train))
    measured = _measured(allocator, model, ctx, spec)
    rounds = measured if measured is not None else allocator  # what allocates the rounds
    if spec.prior:  # before any update: the warm start's pass rates
        seed_priors(allocator, model, ctx, cfg.prior_samples, coba_cfg.success_value)
    total = cfg.budget(spec)
    actors: dict[int, Any] = {}

    def actor_for(rollouts: int) -> Any:
        """veRL's actor config with ``updates_per_step`` mini-batches of a batch of ``rollouts``."""
        if rollouts not in actors:
            actors[rollouts] = make_actor_config(
                rollout_n=cfg.rollouts_per_prompt,
                mini_batch_size=-(-rollouts // cfg.updates_per_step),  # ceil: updates_per_step mini-batches
                clip_ratio_low=cfg.clip_ratio_low,
                clip_ratio_high=cfg.clip_ratio_high,
            )
        return actors[rollouts]

    gen = sampling_generator(model, 7919 * (ctx.seed + 1))
    cut_rng = np.random.default_rng([ctx.seed, 104729])  # only `dapo_cut=random` draws from it
    m = cfg.prompts_per_step
    steps_per_epoch = math.ceil(cfg.n_train / m)
    stream = PromptStream(prompt_stream(len(ctx.train), ctx.seed), rounds, m, total) if cfg.dapo else None
    carried: list[tuple[Wave, Group]] = []  # groups kept from the step before (``+carry``)
    evals, snaps = eval_steps(cfg), snapshot_steps(cfg)
    base = {
        "run": spec.label,
        "strategy": spec.strategy,
        "budget_scale": spec.budget_scale,
        "group_weight": coba_cfg.group_weight,
        "budget_unit": coba_cfg.budget_unit,
        "prior": spec.prior,
        "prior_rollouts": len(ctx.train) * cfg.prior_samples if spec.prior else 0,
        "dapo": cfg.dapo,
        "dapo_options": "+".join(spec.dapo_options),
        "seed": ctx.seed,
    }
    counts = dict.fromkeys(("rollouts", "rollouts_generated", "tokens_generated", "tokens_trained"), 0)
    fails: list[float] = []  # F_t of every step so far
    row: dict[str, Any] = {}
    for step in range(1, cfg.steps + 1):
        t0 = time.perf_counter()
        if stream is not None:
            epoch = stream.drawn // cfg.n_train + 1
            out, carried = _dapo_rollouts(
                cfg, ctx, model, stream, gen, coba_cfg.min_rollouts, coba_cfg.group_weight, cut_rng,
                spec.dapo_options, carried,
            )  # fmt: skip
            res = stream.last_allocation  # the latest round's allocation (this step's or an earlier one)
            t_plugin = out.plugin_s
            t_gen = time.perf_counter() - t0 - t_plugin
        else:
            epoch = (step - 1) // steps_per_epoch + 1
            ids = ctx.order[step - 1]  # (M,)
            res = rounds.allocate(ids, total)
            t_alloc = time.perf_counter() - t0
            budgets = res.budgets  # (M,) int64, sum == total (rollout budget) or tokens within C
            wave = _generate_wave(model, ctx, ids, budgets, gen)
            t_gen = time.perf_counter() - t0 - t_alloc
            wt: _WaveTensors = wave.payload
            t1 = time.perf_counter()
            allocator.observe(wt.rollout_ids, wave.scores, wave.lengths)
            t_plugin = t_alloc + time.perf_counter() - t1
            rates = np.bincount(wt.rows, weights=wave.scores, minlength=m) / budgets
            out = _StepRollouts(
                batch=RolloutBatch(wt.prompt_ids, wt.prompt_mask, wt.resp, wt.rmask, wave.scores, wt.rows),
                composition=batch_composition(
                    wt.rows, wave.scores, rates, np.zeros(m), coba_cfg.group_weight
                ),
                budgets=np.asarray(budgets, np.int64),
                prompt_rates=rates,
                scores=wave.scores,
                generated_tokens=int(wave.lengths.sum()),
                trained_tokens=int(wave.lengths.sum()),
                costs=dict.fromkeys(NO_REFILL, 0) | {"submissions": 1, "rounds": 1},
            )
        # Without DAPO `allocate` returned it; with DAPO the step's first `stream.take(M)`, M >= 1,
        # allocated a round at the latest in step 1 (`PromptStream.last_allocation` is never reset).
        assert res is not None
        t1 = time.perf_counter()
        allocator.end_step()
        t_plugin += time.perf_counter() - t1
        budgets, per_prompt = out.budgets, out.prompt_rates  # (G,) of every generated group
        in_zero = (per_prompt == 0) | (per_prompt == 1)  # (G,) groups without GRPO signal
        fails.append(1.0 - float(per_prompt.mean()))
        t2 = time.perf_counter()
        upd: dict[str, float] = {}
        trained = 0 if out.batch is None else len(out.batch.scores)
        if out.batch is not None:
            upd = grpo_update(
                model, optimizer, out.batch, actor_for(trained), grad_clip=cfg.grad_clip,
                group_weight=coba_cfg.group_weight, rows=cfg.update_rows,
            )  # fmt: skip
        t_update = time.perf_counter() - t2
        counts["rollouts"] += trained
        counts["rollouts_generated"] += int(budgets.sum())
        counts["tokens_generated"] += out.generated_tokens
        counts["tokens_trained"] += out.trained_tokens
        row = {
            **base,
            "step": step,
            "epoch": epoch,
            **counts,
            "step_rollouts_trained": trained,
            "step_rollouts_generated": int(budgets.sum()),
            "step_tokens_generated": out.generated_tokens,
            "step_tokens_trained": out.trained_tokens,
            **out.costs,
            **out.composition,
            "total_budget": total,
            "train_acc": float(out.scores.mean()),
            "batch_pass_rate": float(per_prompt.mean()),
            "fail_rate": fails[-1],
            "fail_rate_avg3": float(np.mean(fails[-3:])),
            "zero_grad_share": float(in_zero.mean()),
            "zero_grad_rollout_share": float(budgets[in_zero].sum() / budgets.sum()),
            "all_pass_share": float(np.mean(per_prompt == 1)),
            "all_fail_share": float(np.mean(per_prompt == 0)),
            "pass_hist": pass_histogram(per_prompt),
            "alpha": res.alpha,  # the Beta that shaped the budgets
            "beta": res.beta,
            "alloc_strategy": res.strategy,
            "tau": res.tau,
            "budget_min": int(budgets.min()),
            "budget_max": int(budgets.max()),
            "budget_std": float(budgets.std()),
            "unseen_prompts": int(np.isnan(res.pass_rates).sum()),
            "pg_loss": upd.get("actor/pg_loss", float("nan")),
            "pg_clipfrac": upd.get("actor/pg_clipfrac", float("nan")),
            "ppo_kl": upd.get("actor/ppo_kl", float("nan")),
            "grad_norm": upd.get("actor/grad_norm", float("nan")),
            "response_len": out.generated_tokens / max(1, int(budgets.sum())),
            "gen_s": t_gen,
            "update_s": t_update,
            "plugin_s": t_plugin,
            "step_s": time.perf_counter() - t0,
            "eval_acc": float("nan"),
            **(measured.step_measures() if measured is not None else {}),
        }
        if snapshot is not None and step in snaps:
            snapshot(
                {**base, "step": step, "pass_rates": res.pass_rates.tolist(), "budgets": res.budgets.tolist()}
            )
        if step in evals:
            ev = evaluate(model, ctx, cfg.eval_samples)
            row["eval_acc"] = ev.acc
            row.update({f"eval_acc/{k}": v for k, v in ev.per_level.items()})
        sink(row)
        if on_step is not None:
            on_step(row)
    return row
