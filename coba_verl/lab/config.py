"""`LabConfig`: every knob of the CPU lab with its one default, validated before any work starts."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from coba_verl.arithmetic.task import parse_levels
from coba_verl.core.config import STRATEGIES, CobaConfig
from coba_verl.core.group_weight import GROUP_WEIGHTS, RENAMED_GROUP_WEIGHTS, check_group_weight
from coba_verl.core.solvers import check_budget
from coba_verl.lab.oracle import ORACLE_STRATEGIES
from coba_verl.lab.scenarios import SCENARIOS
from coba_verl.refusal import CobaRefusal

__all__ = ["UPDATE_ROWS", "LabConfig", "RunSpec", "parse_run_label"]


#: Run-label options after ``+``: ``prior``, the run's tracker starts from pass-rate priors;
#: ``token_budget``, the run's budget counts tokens (``coba.budget_unit=tokens``).
PRIOR_OPTION = "prior"
TOKEN_BUDGET_OPTION = "token_budget"
#: Under ``dapo`` only (docs/dapo_n16_design.md, amendment 1): ``carry``, cut-away sessions and
#: surplus groups train in the next step; ``size``, each wave generates no more than the rollouts
#: still missing; ``skip``, GRESO's skip (`coba_verl.core.spread_skip`, `SKIP_THRESHOLD`).
DAPO_OPTIONS = ("carry", "size", "skip")
#: ``coba.skip_spread_below`` of a ``+skip`` run (the study's 0.1; its explore chance is the default 0.1).
SKIP_THRESHOLD = 0.1
#: ``oracle``: the run allocates from the exact pass rates (`coba_verl.lab.oracle`), for
#: `ORACLE_STRATEGIES` only (``signal`` exists only so).
ORACLE_OPTION = "oracle"
RUN_OPTIONS = (PRIOR_OPTION, TOKEN_BUDGET_OPTION, *DAPO_OPTIONS, ORACLE_OPTION)


@dataclass(frozen=True)
class RunSpec:
    """One training run: a strategy, optionally a group weight, priors and a token budget, at a
    budget scale.

    ``coba@0.5`` = half the rollouts per step; ``coba:proportional`` = ``coba.group_weight=proportional`` for
    this run only (``None`` keeps the value of `LabConfig.coba`, default ``equal``);
    ``coba+prior`` = the tracker starts from pass rates measured on the warm start
    (`LabConfig.prior_samples` samples per training prompt, `coba_verl.lab.evaluation.measure_priors`);
    ``coba+token_budget`` = ``coba.budget_unit=tokens`` for this run only: sum_i B_i L_i is at most
    what n rollouts each would cost (`coba_verl.core.token_budget`).
    """

    strategy: str
    budget_scale: float = 1.0
    group_weight: str | None = None
    prior: bool = False
    budget_unit: str | None = None
    dapo_options: tuple[str, ...] = ()
    oracle: bool = False

    @property
    def label(self) -> str:
        name = self.strategy if self.group_weight is None else f"{self.strategy}:{self.group_weight}"
        name = f"{name}+{PRIOR_OPTION}" if self.prior else name
        name = f"{name}+{TOKEN_BUDGET_OPTION}" if self.budget_unit == "tokens" else name
        name = "".join([name, *(f"+{o}" for o in DAPO_OPTIONS if o in self.dapo_options)])
        name = f"{name}+{ORACLE_OPTION}" if self.oracle else name
        return name if self.budget_scale == 1.0 else f"{name}@{self.budget_scale:g}"

    @property
    def allocator_strategy(self) -> str:
        """The strategy of the run's `BudgetAllocator` (its tracker): ``uniform`` for ``signal``,
        which no shipped strategy computes."""
        return "uniform" if self.strategy not in STRATEGIES else self.strategy


#: ``LabConfig.dapo_cut``: how a DAPO group cut to the remainder picks the sessions it keeps.
DAPO_CUTS: tuple[str, ...] = ("random", "spread")
#: ``LabConfig.update_rows``: the rows the GRPO update runs (`coba_verl.lab.grpo.grpo_update`'s ``rows``).
UPDATE_ROWS: tuple[str, ...] = ("all", "signal")


def parse_run_label(label: str) -> RunSpec:
    """``STRATEGY[:GROUP_WEIGHT][+prior][+token_budget][@SCALE]``: ``"coba"`` -> RunSpec("coba", 1.0);
    ``"coba@0.5"`` -> RunSpec("coba", 0.5); ``"coba:equal"`` -> RunSpec("coba", 1.0, "equal");
    ``"coba+prior"`` -> RunSpec("coba", prior=True); ``"coba+token_budget"`` ->
    RunSpec("coba", budget_unit="tokens").

    The strategy, the group weight, the options and the scale are checked apart, so the message
    names the part that is wrong.

    Raises:
        ValueError: naming the strategy, the group weight or the option when it is unknown, or the
            scale when it is not a number in (0, 1].
    """
    head, at, raw = (x.strip() for x in label.strip().partition("@"))
    head, *options = (x.strip() for x in head.split("+"))
    for option in options:
        if option not in RUN_OPTIONS:
            raise CobaRefusal(
                f"run option {option!r} in {label!r} is unknown; the options are "
                f"{', '.join('+' + o for o in RUN_OPTIONS)} (e.g. '{head}+{PRIOR_OPTION}')."
            )
    prior = PRIOR_OPTION in options
    budget_unit = "tokens" if TOKEN_BUDGET_OPTION in options else None
    dapo_options = tuple(o for o in DAPO_OPTIONS if o in options)
    oracle = ORACLE_OPTION in options
    strategy, colon, weight = (x.strip() for x in head.partition(":"))
    if oracle:
        _check_oracle(label, strategy, budget_unit, dapo_options)
    elif strategy not in STRATEGIES:
        where = f" (in {label!r})" if at or colon else ""
        raise CobaRefusal(
            f"strategy {strategy!r}{where} is unknown; use one of {', '.join(STRATEGIES)}, "
            "optionally with a group weight and a budget scale such as 'coba:equal@0.5'."
        )
    group_weight = None
    if colon:
        if weight not in GROUP_WEIGHTS and weight not in RENAMED_GROUP_WEIGHTS:
            raise CobaRefusal(
                f"group weight {weight!r} in {label!r} is unknown; use one of {', '.join(GROUP_WEIGHTS)}, "
                f"e.g. '{strategy}:equal'."
            )
        group_weight = check_group_weight(weight, f"group weight in {label!r}")
    if not at:
        return RunSpec(
            strategy,
            group_weight=group_weight,
            prior=prior,
            budget_unit=budget_unit,
            dapo_options=dapo_options,
            oracle=oracle,
        )
    try:
        scale = float(raw)
    except ValueError:
        scale = math.nan
    if not 0.0 < scale <= 1.0:  # also false for NaN
        raise CobaRefusal(
            f"budget scale {raw!r} in {label!r} must be a number in (0, 1], the share of the "
            f"rollouts per step, e.g. '{strategy}@0.5'."
        )
    return RunSpec(strategy, scale, group_weight, prior, budget_unit, dapo_options, oracle)


def _check_oracle(label: str, strategy: str, budget_unit: str | None, dapo_options: tuple[str, ...]) -> None:
    """An ``+oracle`` run: one of `ORACLE_STRATEGIES`, a rollout budget, no GRESO skip."""
    if strategy not in ORACLE_STRATEGIES:
        raise CobaRefusal(
            f"strategy {strategy!r} in {label!r} has no oracle; +{ORACLE_OPTION} takes one of "
            f"{', '.join(ORACLE_STRATEGIES)} (e.g. 'coba+{ORACLE_OPTION}')."
        )
    if budget_unit is not None or "skip" in dapo_options:
        raise CobaRefusal(
            f"{label!r}: +{ORACLE_OPTION} allocates a rollout budget from exact pass rates; it takes "
            f"neither +{TOKEN_BUDGET_OPTION} nor +skip."
        )


@dataclass
class LabConfig:
    """Configuration of a lab invocation. The field defaults are the ``hard`` scenario; start from
    a named scenario with `LabConfig.from_scenario` (see `SCENARIOS`).

    Args:
        scenario: Name of the preset these values started from (a record; changes nothing itself).
        runs: Run labels to train, each from the same warm start and prompt order:
            ``strategy[:group_weight][+prior][+token_budget][+carry][+size][+skip][+oracle][@scale]``
            (carry, size and skip under ``dapo`` only, `DAPO_OPTIONS`; ``+oracle`` allocates from
            exact pass rates, `coba_verl.lab.oracle`, also ``signal+oracle``); scale multiplies the
            rollouts per step, ``:equal`` / ``:proportional`` sets ``coba.group_weight`` for that
            run only (e.g. ``coba:equal``; see `CobaConfig`), ``+prior`` starts its tracker from
            pass-rate priors and ``+token_budget`` sets ``coba.budget_unit=tokens``.
        seeds: One warm start, data split and prompt order per seed; every run uses each seed.
        levels: Task mixture, level name -> weight; a name is ``<digits><op><digits>``, e.g.
            ``"2*1"`` = a two-digit number times a one-digit number (see `coba_verl.arithmetic.task`).
        warm_levels: Levels the supervised warm start trains on (a subset of ``levels``); a level
            left out starts near pass rate 0, a level in it near the warm-start target.
        n_train: Training prompts (stable ids 0..n_train-1, the allocator's keys).
        n_eval: Held-out evaluation prompts (disjoint from the training prompts).
        steps: GRPO steps per run.
        prompts_per_step: M, prompts drawn per step (epoch-wise shuffled, same order for every run).
        rollouts_per_prompt: n; the step's budget is total = M * n * scale rollouts (spec §1).
        eval_every: Evaluate on the held-out set every this many steps (and at the first and last).
        eval_samples: Samples per held-out prompt at temperature 1 (accuracy = avg@k, as the paper).
        lr: AdamW learning rate of the GRPO updates (constant, as veRL's actor default). Adam moves
            every weight by about ``lr`` per step whatever the gradient's size, and the gradient of
            a few hundred rollouts is noisy: 1e-3 knocks the warm-started model down (held-out
            accuracy 0.22 -> 0.10 within 32 steps), 1e-4 improves it steadily (both in `hard`;
            `paper`, with 16 rollouts per prompt and two updates per step, uses 3e-4).
        weight_decay: AdamW weight decay (veRL's actor default 0.01).
        updates_per_step: Optimiser steps per GRPO step: the step's rollouts are split, in prompt
            order, into this many mini-batches (veRL's ``ppo_mini_batch_size`` = the batch divided
            by it). 1 = exactly on-policy; the paper's 7B runs use 2 (batch 256, mini-batch 128).
        clip_ratio_low: PPO clip epsilon below 1 (paper 0.2).
        clip_ratio_high: PPO clip epsilon above 1 (paper 0.28, "clip-higher").
        grad_clip: Gradient-norm clip (veRL's actor default 1.0).
        warm_steps: Most supervised warm-start steps (see `coba_verl.arithmetic.warmstart`).
        warm_target: The warm start stops once its probe accuracy (temperature 1, warm-start
            levels) reaches this; 0 = always run ``warm_steps`` steps.
        warm_batch_size: Problems per warm-start step.
        warm_lr: Warm-start learning rate (constant after a 20-step warm-up).
        hidden_size: Width of the Qwen2 model.
        num_layers: Decoder layers.
        intermediate_size: SwiGLU width.
        coba: Allocator knobs (`CobaConfig` fields except ``strategy``, which each run sets), e.g.
            ``{"group_weight": "equal"}`` for every run whose label does not set its own.
        device: torch device the model trains and samples on (``cpu``, ``cuda``, ``cuda:1``); the
            task, allocator and statistics stay on the CPU.
        threads: torch intra-op threads (1 is fastest and steadiest for this model size on a
            shared machine; 0 = torch's default).
        snapshot_steps: How many steps to record (p_hat, B) pairs at, for the budget plot.
        prior_samples: k, samples per training prompt that measure the pass-rate priors of the
            runs labelled ``+prior``: the seed's warm-started model, temperature 1, random numbers
            of their own (the runs' are untouched), measured once per seed and shared by its
            ``+prior`` runs; each prompt's record is (successes, k), one appearance of its window
            (`coba_verl.records.priors`). These n_train * k samples are not counted in a run's
            rollouts; the results record them as ``prior_rollouts``.
        dapo: DAPO dynamic sampling, as this package's veRL sync trainer does it
            (`coba_verl.lab.dapo`): a group whose rewards are all equal is evicted and refilled
            from the prompt stream until the update holds exactly M x n rollouts with a reward
            spread (one group cut to the remainder); every generated rollout reaches the tracker.
        dapo_max_gen_batches: Under ``dapo``, at most this many x M prompts generated for one update
            (the DAPO recipe's ``max_num_gen_batches``); past it the update trains what is ready and
            the row records the ``shortfall``.
        dapo_cut: Under ``dapo``, which sessions a group cut to the remainder keeps: ``random``
            (uniformly at random; the default, as ``coba.cut_sessions=auto`` is under DAPO in
            veRL, chosen by the rule of docs/lab/dapo_why_design.md) or ``spread``
            (`sessions_to_keep`: the group's score mix, its reward spread kept; the default before).
        dapo_whole_only: Under ``dapo``, train whole ready groups only, oldest first while they fit,
            none cut (a counterfactual: the update may train fewer than M x n, the row's
            ``shortfall``).
        update_rows: Rollouts the GRPO update runs: ``all`` (every one; the published pages' runs)
            or ``signal`` (only those with a non-zero advantage, the loss still divided by the whole
            mini-batch's token count: the same gradient up to float rounding, faster when many
            groups' rewards are all equal; a ``signal`` run is therefore not bit-identical to an
            ``all`` run; `coba_verl.lab.grpo.grpo_update`).
    """

    scenario: str = "hard"
    runs: list[str] = field(default_factory=lambda: ["uniform", "knapsack", "coba"])
    seeds: list[int] = field(default_factory=lambda: [0])
    levels: dict[str, float] = field(
        default_factory=lambda: {"2+1": 1.0, "2-1": 1.0, "2+2": 1.0, "2*1": 1.0, "3*2": 1.0}
    )
    warm_levels: list[str] = field(default_factory=lambda: ["2+1", "2-1", "2+2", "2*1"])
    n_train: int = 2048
    n_eval: int = 512
    steps: int = 256
    prompts_per_step: int = 32
    rollouts_per_prompt: int = 8
    eval_every: int = 32
    eval_samples: int = 4
    lr: float = 1e-4
    weight_decay: float = 0.01
    updates_per_step: int = 1
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    grad_clip: float = 1.0
    warm_steps: int = 4000
    warm_target: float = 0.4
    warm_batch_size: int = 64
    warm_lr: float = 3e-3
    hidden_size: int = 64
    num_layers: int = 2
    intermediate_size: int = 256
    coba: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    threads: int = 1
    snapshot_steps: int = 4
    prior_samples: int = 8
    dapo: bool = False
    dapo_max_gen_batches: int = 10
    dapo_cut: str = "random"
    dapo_whole_only: bool = False
    update_rows: str = "all"

    def __post_init__(self) -> None:
        if not self.runs:
            raise CobaRefusal("runs is empty; name at least one strategy, e.g. runs=['uniform', 'coba'].")
        specs = [parse_run_label(r) for r in self.runs]
        labels = [s.label for s in specs]
        if len(set(labels)) != len(labels):
            raise CobaRefusal(f"runs={self.runs} repeats a strategy; list each once.")
        self.runs = labels
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise CobaRefusal(f"seeds={self.seeds} must be a non-empty list of distinct integers.")
        positive = (
            "n_train", "n_eval", "steps", "prompts_per_step", "rollouts_per_prompt", "eval_every",
            "eval_samples", "hidden_size", "num_layers", "intermediate_size", "warm_batch_size",
            "snapshot_steps", "updates_per_step", "prior_samples", "dapo_max_gen_batches",
        )  # fmt: skip
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise CobaRefusal(f"{name}={getattr(self, name)} must be a positive integer.")
        for name in ("warm_steps", "threads"):
            if int(getattr(self, name)) < 0:
                raise CobaRefusal(f"{name}={getattr(self, name)} must be >= 0.")
        if self.dapo_cut not in DAPO_CUTS:
            raise CobaRefusal(f"dapo_cut={self.dapo_cut!r} is unknown; use one of {', '.join(DAPO_CUTS)}.")
        if self.update_rows not in UPDATE_ROWS:
            raise CobaRefusal(
                f"update_rows={self.update_rows!r} is unknown; use one of {', '.join(UPDATE_ROWS)}."
            )
        if self.prompts_per_step > self.n_train:
            raise CobaRefusal(
                f"prompts_per_step={self.prompts_per_step} exceeds n_train={self.n_train}; "
                "lower it or grow the set."
            )
        if self.hidden_size % 4:
            raise CobaRefusal(f"hidden_size={self.hidden_size} must be a multiple of 4 (4 attention heads).")
        if not 0.0 <= self.warm_target <= 1.0:
            raise CobaRefusal(f"warm_target={self.warm_target} must lie in [0, 1].")
        for name in ("lr", "warm_lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise CobaRefusal(f"{name}={getattr(self, name)} must be positive.")
        parse_levels(self.levels)  # validates the names and weights
        unknown = [lv for lv in self.warm_levels if lv not in self.levels]
        if unknown:
            raise CobaRefusal(f"warm_levels {unknown} are not in levels {list(self.levels)}; list a subset.")
        if not str(self.device).startswith(("cpu", "cuda", "mps")):
            raise CobaRefusal(f"device={self.device!r} is not a torch device; use cpu, cuda or cuda:N.")
        if "strategy" in self.coba:
            raise CobaRefusal("coba.strategy is set per run; list strategies in runs instead.")
        for name in ("prior_field", "prior_file"):
            if self.coba.get(name) is not None:
                raise CobaRefusal(
                    f"coba.{name}={self.coba[name]!r}: the lab generates its prompts per seed, so it "
                    "measures their priors itself; label a run '+prior' (e.g. 'coba+prior') and set "
                    "prior_samples."
                )
        try:
            cfg = self.coba_config("uniform")  # validates the knobs
        except TypeError as err:
            kinds = {k: type(v).__name__ for k, v in self.coba.items()}
            raise CobaRefusal(f"coba={self.coba} has a value of the wrong type ({kinds}): {err}") from None
        for spec in specs:
            if spec.dapo_options and not self.dapo:
                raise CobaRefusal(
                    f"run {spec.label!r}: the options {', '.join('+' + o for o in spec.dapo_options)} "
                    "change DAPO dynamic sampling and need dapo=true (e.g. --scenario dapo)."
                )
            run_cfg = self.coba_config(
                spec.allocator_strategy, spec.group_weight, spec.budget_unit, spec.dapo_options
            )
            if spec.oracle and any(level.worked for level in self.level_table):
                raise CobaRefusal(
                    f"run {spec.label!r}: worked levels have many correct strings, so no exact pass rate "
                    "(coba_verl.lab.exact_rates); an oracle needs levels with one answer string."
                )
            if run_cfg.skip_spread_below > 0 and not self.dapo:
                raise CobaRefusal(
                    f"run {spec.label!r}: coba.skip_spread_below={run_cfg.skip_spread_below} gives some "
                    "prompts no rollouts, which only DAPO dynamic sampling refills; set dapo=true."
                )
            unit = run_cfg.budget_unit
            if self.dapo and unit == "tokens":
                raise CobaRefusal(
                    f"run {spec.label!r}: a token budget (coba.budget_unit=tokens) with dapo=true: DAPO "
                    "trains exactly M x n rollouts a step, while under a token budget the rollouts of a "
                    "round vary (veRL's DAPO path refuses it too). Drop '+token_budget' or dapo."
                )
            check_budget(
                self.prompts_per_step, self.budget(spec), cfg.min_rollouts, cfg.max_rollouts,
                total_name=f"run {spec.label!r}: rollouts per step", low_name="min_rollouts",
                up_name="max_rollouts",
            )  # fmt: skip

    @classmethod
    def from_scenario(cls, name: str, **overrides: Any) -> LabConfig:
        """The preset ``SCENARIOS[name]`` with ``overrides`` on top.

        Raises:
            ValueError: naming the scenario when it is unknown.
        """
        if name not in SCENARIOS:
            raise CobaRefusal(f"scenario {name!r} is unknown; choose one of {', '.join(SCENARIOS)}.")
        return cls(**{**SCENARIOS[name], "scenario": name, **overrides})

    @property
    def level_table(self) -> tuple:
        """``levels`` as `coba_verl.arithmetic.task.Level` objects, in order."""
        return parse_levels(self.levels)

    @property
    def warm_level_table(self) -> tuple:
        """The warm start's levels, in order."""
        return parse_levels({k: self.levels[k] for k in self.warm_levels})

    @property
    def run_specs(self) -> list[RunSpec]:
        return [parse_run_label(r) for r in self.runs]

    def budget(self, spec: RunSpec) -> int:
        """Rollouts per step of a run: round(M * n * scale)."""
        return int(round(self.prompts_per_step * self.rollouts_per_prompt * spec.budget_scale))

    def coba_config(
        self,
        strategy: str,
        group_weight: str | None = None,
        budget_unit: str | None = None,
        dapo_options: tuple[str, ...] = (),
    ) -> CobaConfig:
        """The allocator config of one run: ``coba`` overrides plus its strategy (and its group
        weight, budget unit and skip, when its label sets them: ``+skip`` is
        ``skip_spread_below`` = `SKIP_THRESHOLD`)."""
        own: dict[str, Any] = {} if group_weight is None else {"group_weight": group_weight}
        if budget_unit is not None:
            own["budget_unit"] = budget_unit
        if "skip" in dapo_options:
            own["skip_spread_below"] = SKIP_THRESHOLD
        return CobaConfig.from_mapping({**self.coba, **own, "strategy": strategy})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
