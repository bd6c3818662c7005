"""`CobaConfig`: every knob of the allocator, with its one default (spec tags in brackets).

The veRL config group ``coba`` (``coba_verl/config/coba/default.yaml``) mirrors these fields
key for key; a test keeps the two from drifting. `coba_verl.allocate`, `BudgetAllocator`, the veRL
trainer and the lab all build a `CobaConfig`, so the rules below hold for every one of them. Nothing
here imports veRL; beyond the standard library it needs numpy (`invalid_pass_rates`, and
`coba_verl.core.group_weight`).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from coba_verl.core.group_weight import check_group_weight
from coba_verl.refusal import CobaRefusal, CobaTypeRefusal

STRATEGIES: tuple[str, ...] = ("coba", "coba_release", "knapsack", "uniform", "static", "reverse")
SOLVERS: tuple[str, ...] = ("fast", "heap", "dp")
BUDGET_UNITS: tuple[str, ...] = ("rollouts", "tokens")
#: ``CobaConfig.cut_sessions``: which sessions a group cut to the update's budget keeps.
CUT_SESSIONS: tuple[str, ...] = ("auto", "random", "spread")
#: The words ``size_refills`` takes where it is set by name (veRL's ``coba`` group, `coba-verl plan`).
SIZE_REFILLS_VALUES: tuple[str, ...] = ("true", "false", "auto")
#: Strategies whose value `coba_verl.core.token_budget` can maximise under a token budget.
TOKEN_BUDGET_STRATEGIES: tuple[str, ...] = ("coba", "static", "reverse")

#: B_low can be no lower: under GRPO a group of one rollout has no baseline, so its advantage would
#: be its raw score.
GRPO_MIN_ROLLOUTS = 2

_COBA_VALUE = ("tau", "solver", "unseen_pass_rate", "p_clip_low", "p_clip_high")
#: GRESO's skip (`coba_verl.core.spread_skip`): read by every strategy that reads pass rates.
_SKIP = ("skip_spread_below", "skip_explore")
#: What makes the pass rates: every strategy but ``uniform`` reads them.
_PASS_RATES = ("success_value", "prior_field", "prior_file", "prior_weight")
#: Knobs (besides the bounds) that change each strategy's budgets. A knob set away from its default
#: under a strategy that does not read it is reported with a `UserWarning`, never silently dropped.
#: ``window`` (the pass rates' and F_bar's) is not read by ``knapsack``, which allocates from each
#: prompt's last pass rate, nor by ``uniform``, which reads no pass rate.
READS: dict[str, tuple[str, ...]] = {
    "coba": ("kappa", "window", *_COBA_VALUE, *_PASS_RATES, *_SKIP),
    "coba_release": ("kappa", "window", *_COBA_VALUE, *_PASS_RATES, *_SKIP),
    "reverse": ("kappa", "window", *_COBA_VALUE, *_PASS_RATES, *_SKIP),
    "static": ("static_alpha", "static_beta", "window", *_COBA_VALUE, *_PASS_RATES, *_SKIP),
    "knapsack": ("solver", *_PASS_RATES, *_SKIP),
    "uniform": (),
}
_STRATEGY_KNOBS = frozenset(knob for knobs in READS.values() for knob in knobs)


def auto_size_refills(strategy: str, dapo: bool) -> bool:
    """What ``size_refills=auto`` means: C-size for ``coba`` under DAPO dynamic sampling, off for every
    other strategy and without DAPO. Only ``coba`` was measured with it on the DAPO bench (n = 4, 8
    and 16, where the pre-registered rule picked it: docs/dapo_n16_design.md, section 4 and
    amendment 7); ``size_refills=true`` offers it to any strategy.

        auto_size_refills("coba", dapo=True)      -> True
        auto_size_refills("knapsack", dapo=True)  -> False   (uniform, static, reverse, coba_release too)
        auto_size_refills("coba", dapo=False)     -> False

    ``dapo``: whether the run's sampler is DAPO's (veRL: the V1 sync trainer with
    ``algorithm.filter_groups.enable``; `coba-verl plan`: ``--dapo``).
    """
    return dapo and strategy == "coba"


def require_rollout_budget(config: CobaConfig, framework: str, setting: str = "coba.budget_unit") -> None:
    """Refuse ``budget_unit=tokens`` in a trainer whose generation round is a fixed number of samples.

    TRL's ``generation_batch_size`` and OpenRLHF's rollout batch are M x n completions by
    construction; a token budget makes sum_i B_i vary, so there it cannot be kept.

    Raises:
        ValueError: naming ``setting``, the framework and what to set instead.
    """
    if config.budget_unit == "tokens":
        raise CobaRefusal(
            f"{setting}='tokens' is not supported in {framework}: a generation round there is a fixed "
            "M x n completions, while under a token budget sum_i B_i varies. Use rollouts, or veRL's V1 "
            "trainer for a token budget."
        )


#: `CobaConfig` fields only a DAPO-style sampler honours (veRL's V1 sync trainer with
#: ``algorithm.filter_groups.enable=true``, the lab's DAPO): the value that turns each off, and why a
#: trainer that generates a round whole cannot. GRESO's skip gives a prompt B_i = 0, and only a sampler
#: that fills the step with whatever groups are ready trains a round with fewer prompts than drawn;
#: C-size trims the submissions of a step, and elsewhere a round is one submission.
SYNC_DAPO_ONLY: dict[str, tuple[str, str]] = {
    "skip_spread_below": (
        "0",
        "a skipped prompt gets no rollouts, and a round there must hold every prompt it drew",
    ),
    "size_refills": (
        "false",
        "it sizes DAPO's refills to the rollouts a step still misses, and a round there is generated whole",
    ),
}


def require_no_sync_dapo_options(config: CobaConfig, framework: str, prefix: str = "coba.") -> None:
    """Refuse the `SYNC_DAPO_ONLY` fields switched on (the skip > 0, ``size_refills``) in ``framework``,
    a trainer that generates each round whole; ``prefix`` + the field's name is the setting named.

    Raises:
        ValueError: naming the setting, its value and the framework.
    """
    for name, (off, why) in SYNC_DAPO_ONLY.items():
        value = getattr(config, name)
        if value:
            raise CobaRefusal(
                f"{prefix}{name}={value} is not supported in {framework}: {why}. Set it to {off}, or use "
                "veRL's V1 sync trainer with DAPO dynamic sampling (algorithm.filter_groups.enable=true)."
            )


def _shown(value: Any) -> str:
    """``'40' (str)``: the repr and the type, so that a string never reads as a number."""
    return f"{value!r} ({type(value).__name__})"


def check_int(name: str, value: Any) -> int:
    """``value`` as an int. TypeError for a non-number (a bool, a str), ValueError for 2.5 or NaN.

    >>> check_int("total", "40")
    Traceback (most recent call last):
    ...
    coba_verl.refusal.CobaTypeRefusal: total='40' (str) must be an integer.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CobaTypeRefusal(f"{name}={_shown(value)} must be an integer.")
    if not (math.isfinite(value) and value == int(value)):
        raise CobaRefusal(f"{name}={_shown(value)} must be an integer.")
    return int(value)


def check_real(name: str, value: Any) -> float:
    """``value`` as a float; TypeError naming it for a non-number (a bool, a str)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise CobaTypeRefusal(f"{name}={_shown(value)} must be a number.")
    return float(value)


def check_kappa(kappa: Any, name: str = "kappa") -> float:
    """``kappa`` = alpha_t + beta_t as a float > 2, so that alpha, beta >= 1 fit in it (spec §3).

    >>> check_kappa(2)
    Traceback (most recent call last):
    ...
    coba_verl.refusal.CobaRefusal: kappa=2.0 must be > 2 so that alpha, beta >= 1 fit in it.
    """
    value = check_real(name, kappa)
    if not value > 2:
        raise CobaRefusal(f"{name}={value} must be > 2 so that alpha, beta >= 1 fit in it.")
    return value


def invalid_pass_rates(p: np.ndarray, *, unseen: bool = False) -> np.ndarray:
    """Which entries of the float array ``p`` are no pass rate: not a number in [0, 1].

    NaN, inf, -0.1 and 1.5 are invalid; with ``unseen``, NaN is valid (a prompt without history).
    ``invalid_pass_rates(np.array([0.5, np.nan, 1.5]))`` -> ``[False, True, True]``.
    """
    bad = ~((p >= 0.0) & (p <= 1.0))  # NaN compares False, so it is invalid unless allowed below
    if unseen:
        bad &= ~np.isnan(p)
    return bad


def check_shape(alpha: Any, beta: Any, names: tuple[str, str] = ("alpha", "beta")) -> tuple[float, float]:
    """A Beta shape (alpha, beta) with both >= 1, so that BetaPdf is bounded on (0, 1) (spec §3)."""
    a, b = check_real(names[0], alpha), check_real(names[1], beta)
    if not (a >= 1.0 and b >= 1.0):
        raise CobaRefusal(
            f"{names[0]}={alpha!r}, {names[1]}={beta!r} must both be >= 1 (a Beta density bounded on (0, 1))."
        )
    return a, b


@dataclass
class CobaConfig:
    """Configuration of CoBA-RL budget allocation (spec ``shared/spec/COBA_RL.md``).

    Each field has its one default here; `coba_verl.allocate`, `CapabilityTracker` and `CobaValue`
    take theirs from this class. A knob set away from its default under a strategy whose budgets
    it cannot change (see `READS`, e.g. ``kappa`` under ``knapsack``) is reported with a
    `UserWarning` naming it.

    Args:
        strategy: How per-prompt budgets B_i are chosen.
            ``coba``: the paper's budgets: Algorithm 1 on V = eta(B, p) * BetaPdf(p; alpha_t,
            beta_t), with alpha_t/beta_t following the global failure rate (spec §3-5) [paper],
            and the release's constants where the paper gives none (adaptive ``tau``, p clipped
            to [0.01, 0.99], ``window`` 3) [release]. The paper changes nothing else in GRPO
            (spec §1); under the default ``group_weight=equal`` this package also reweights each
            group in the loss, which is not the paper's: ``group_weight=proportional`` trains as
            the paper does.
            ``coba_release``: the same value, wrapped in the authors' release buckets and fallback
            (spec §6) [release].
            ``knapsack``: Knapsack-RL's value and allocation rules (spec §9), the main baseline.
            ``uniform``: every prompt gets total // M rollouts, and the first total % M prompts
            of the batch one more: stock GRPO.
            ``static``: CoBA with a fixed Beta(static_alpha, static_beta) (paper ablation, §8).
            ``reverse``: CoBA with alpha driven by the success rate instead of the failure rate
            (explore first, exploit later; paper ablation, §3).
        min_rollouts: B_low, the fewest rollouts a prompt gets [paper: 2]. Must be >= 2: under
            GRPO a group of one has no baseline. This is the one check of that rule for
            `allocate`, `BudgetAllocator`, the veRL trainer and the lab; only the bare optimisers
            of `coba_verl.core.solvers` accept B_low = 1.
        max_rollouts: B_up, the most rollouts a prompt gets [paper: 128].
        kappa: kappa = alpha_t + beta_t, the concentration of the Beta density; alpha_t lies in
            [1, kappa - 1] (spec §3) [paper: 11; the release's class default is 7]. Must be > 2.
        window: k, the number of a prompt's last appearances averaged into its pass rate, and
            the number of last steps averaged into F_bar (spec §2-3) [release default 3; the
            paper's launch script uses 1].
        tau: Saturation temperature of eta(B, p) = 1 - exp(-(B / tau) p (1 - p)). ``None`` uses
            the release's adaptive rule tau = 3 + 9 * clip(Var(p) / 0.1667, 0, 1) per call
            (spec §4) [release]. A positive number fixes tau.
        solver: Exact optimiser for the paper's Algorithm 1 objective (spec §5). ``fast``:
            threshold on the marginal gain (production default); ``heap``: textbook heap, the
            readable reference; ``dp``: exact dynamic programme (slow; for checking).
            ``knapsack`` uses it for its knapsack step; ``uniform`` ignores it.
        success_value: A rollout counts as a success iff its score equals this value (spec §2).
            Works for 0/1 and DAPO's -1/+1 scorers alike. Must be finite.
        unseen_pass_rate: Pass rate used for a prompt without history when other prompts of the
            batch have history (spec §2) [release: 0.5]. A batch with no history at all is
            allocated uniformly.
        p_clip_low: Lower clip of p before the value is computed (spec §4) [release: 0.01].
        p_clip_high: Upper clip of p before the value is computed (spec §4) [release: 0.99].
        static_alpha: alpha of the ``static`` strategy's fixed Beta [ablation; default: the
            explore end of the schedule, Beta(2, kappa - 2) at kappa = 11].
        static_beta: beta of the ``static`` strategy's fixed Beta.
        group_weight: How much each prompt group weighs in the step's policy loss (read by every
            strategy; it changes the update, not the budgets). ``equal`` (the default; this
            package's, in neither the paper nor the release): each
            rollout's advantage is multiplied by (R / G) / B_g (R rollouts and G groups in the
            batch, B_g its group's size), so every group carries the same total weight whatever
            its B_i; the factor is exactly 1 when every group has the same size (uniform with
            total divisible by M), and the lab measured it not worse than ``proportional`` on both its
            scenarios (docs/lab.md, "Group weight"). Exact for veRL's and OpenRLHF's
            ``loss_agg_mode=seq-mean-token-mean`` and TRL's ``loss_type='grpo'``; under
            ``token-mean`` (their default, and the lab's) a group then weighs in proportion to its
            mean response length, as under uniform GRPO (docs/algorithm.md, "Group weight").
            ``proportional``: every rollout keeps its advantage, so a group weighs in proportion
            to its size B_i [paper, release: the GRPO update is unchanged]. ``tokens``, its name
            before it was renamed (``tokens`` now only means ``budget_unit=tokens``), is still
            read as ``proportional`` with a `DeprecationWarning`, for one release. See
            `coba_verl.core.group_weight.rollout_weights`.
        prior_field: A field of each training row holding a pass rate measured before
            training (e.g. ``extra_info.pass_rate``), or two fields joined by ``/`` holding
            successes and attempts (``extra_info.pass_count/extra_info.attempts``). A prompt
            with such a record starts with it as one appearance of its window, and the records'
            mean failure rate is one F_t, so epoch 1 is no longer uniform
            (`coba_verl.records.priors`). ``None``: no prior (every prompt starts unknown).
        prior_file: A JSON-lines file of prior records keyed by the prompt's index
            (``{"index": 17, "successes": 3, "attempts": 8}`` or ``{"index": 17, "pass_rate":
            0.375}``); with ``prior_field`` too, the file's records win for the prompts in both.
        budget_unit: What the step's budget counts. ``rollouts`` (the paper): sum_i B_i = M x n.
            ``tokens``: sum_i B_i L_i <= n sum_i L_i, L_i the prompt's recent mean response length
            (from the tracker; unknown ones take the batch's mean of the known), so the step
            generates about the tokens uniform GRPO would on the same prompts; the number of
            rollouts then varies from step to step (`coba_verl.core.token_budget`, docs/algorithm.md,
            "Token budget"). Only for ``coba``, ``static`` and ``reverse``; a batch with no length
            known is allocated as under ``rollouts``.
        prior_weight: Attempts a bare pass rate counts as (its successes are rounded to
            pass_rate x prior_weight). Must be >= 1.
        cut_sessions: Which sessions a trained group keeps when the update cuts it to make exactly
            M x n rollouts (veRL's buffers with budgets: DAPO dynamic sampling, the async trainers;
            the lab's ``dapo``). ``random``: uniformly at random, seeded by ``data.seed``, the
            group's step and the cut's number. ``spread``: the group's score mix as closely as the
            kept number allows, its reward spread kept (`core.trained_budget.sessions_to_keep`).
            ``auto`` (default): ``random`` under DAPO dynamic sampling, ``spread`` otherwise; the
            lab's DAPO study chose ``random`` by a rule fixed before its runs (docs/lab.md, "Where
            the accuracy goes under DAPO"). Uniform budgets never cut.
        skip_spread_below: GRESO's skip under DAPO dynamic sampling (`coba_verl.core.spread_skip`):
            a prompt whose chance of a reward spread at its budget, 1 - E[p^B + (1 - p)^B] under
            the Beta posterior of its window's counts, is below this gets B_i = 0 this round (not
            generated; no outcome recorded), its rollouts going to the other prompts. 0 (default):
            off. The lab's DAPO study measured 0.1 (docs/lab/dapo_changes.md). Not for ``uniform``
            (which reads no pass rate) nor a token budget.
        skip_explore: Chance that a prompt due to be skipped is drawn anyway, so its pass rate is
            still measured (seeded by the round and the prompt id).
        size_refills: C-size under DAPO dynamic sampling (docs/dapo_n16_design.md, amendment 1,
            item 6): each submission of a step (its first batch, each refill) is trimmed, in
            submission order, to the sessions the step still misses (M x n minus those ready and
            those in flight); the last prompt keeps max(``min_rollouts``, what is left), and the
            prompts beyond wait, with their allocated budgets, for the next submission. False
            (default): off; veRL's ``coba`` group's ``auto`` is on for ``coba`` under DAPO only
            (`auto_size_refills`). Offered to every strategy (uniform's budgets n are trimmed too). The
            lab measured it (docs/lab/dapo_changes.md). veRL's V1 sync trainer with DAPO only.

    Raises:
        ValueError: an unknown strategy, solver or group_weight; a knob outside its range (the message names
            it, its value and the rule).
        TypeError: a knob of the wrong type, e.g. ``min_rollouts="2"`` (the message shows its repr
            and type).
    """

    strategy: str = "coba"
    min_rollouts: int = 2
    max_rollouts: int = 128
    kappa: float = 11.0
    window: int = 3
    tau: float | None = None
    solver: str = "fast"
    success_value: float = 1.0
    unseen_pass_rate: float = 0.5
    p_clip_low: float = 0.01
    p_clip_high: float = 0.99
    static_alpha: float = 2.0
    static_beta: float = 9.0
    group_weight: str = "equal"
    prior_field: str | None = None
    prior_file: str | None = None
    prior_weight: int = 8
    budget_unit: str = "rollouts"
    cut_sessions: str = "auto"
    skip_spread_below: float = 0.0
    skip_explore: float = 0.1
    size_refills: bool = False

    #: ``stacklevel`` of the ignored-knob warning: 1 is __post_init__, 2 the generated __init__,
    #: 3 the line that built the config.
    _caller_depth: ClassVar[int] = 3

    def __post_init__(self) -> None:
        name = self._name
        if self.strategy not in STRATEGIES:
            raise CobaRefusal(f"{name('strategy')}={self.strategy!r} is unknown; choose one of {STRATEGIES}.")
        if self.solver not in SOLVERS:
            raise CobaRefusal(f"{name('solver')}={self.solver!r} is unknown; choose one of {SOLVERS}.")
        low, up = name("min_rollouts"), name("max_rollouts")
        self.min_rollouts = check_int(low, self.min_rollouts)
        if self.min_rollouts < GRPO_MIN_ROLLOUTS:
            raise CobaRefusal(
                f"{low}={self.min_rollouts} is below {GRPO_MIN_ROLLOUTS}: under GRPO a group of one "
                f"rollout has no baseline, so its advantage would be its raw score. Set {low} to "
                f"{GRPO_MIN_ROLLOUTS} or more."
            )
        self.max_rollouts = check_int(up, self.max_rollouts)
        if self.max_rollouts < self.min_rollouts:
            raise CobaRefusal(f"{up}={self.max_rollouts} must be an integer >= {low}={self.min_rollouts}.")
        self.kappa = check_kappa(self.kappa, name("kappa"))
        self.window = check_int(name("window"), self.window)
        if self.window < 1:
            raise CobaRefusal(f"{name('window')}={self.window} must be an integer >= 1.")
        if self.tau is not None:
            self.tau = check_real(name("tau"), self.tau)
            if not self.tau > 0:
                raise CobaRefusal(
                    f"{name('tau')}={self.tau} must be positive, or null/None for the adaptive rule."
                )
        self.success_value = check_real(name("success_value"), self.success_value)
        if not math.isfinite(self.success_value):
            raise CobaRefusal(
                f"{name('success_value')}={self.success_value} must be finite: no score equals it (a NaN or "
                "infinite score is refused), so every rollout would count as a failure. Set the score of "
                "a success, e.g. 1.0."
            )
        self.unseen_pass_rate = check_real(name("unseen_pass_rate"), self.unseen_pass_rate)
        if not 0.0 <= self.unseen_pass_rate <= 1.0:
            raise CobaRefusal(f"{name('unseen_pass_rate')}={self.unseen_pass_rate} must lie in [0, 1].")
        self.p_clip_low = check_real(name("p_clip_low"), self.p_clip_low)
        self.p_clip_high = check_real(name("p_clip_high"), self.p_clip_high)
        if not 0.0 < self.p_clip_low < self.p_clip_high < 1.0:
            raise CobaRefusal(
                f"{name('p_clip_low')}={self.p_clip_low}, {name('p_clip_high')}={self.p_clip_high} "
                "must satisfy 0 < low < high < 1."
            )
        self.group_weight = check_group_weight(self.group_weight, name("group_weight"))
        if self.budget_unit not in BUDGET_UNITS:
            raise CobaRefusal(
                f"{name('budget_unit')}={self.budget_unit!r} is unknown; choose one of {BUDGET_UNITS}."
            )
        if self.budget_unit == "tokens" and self.strategy not in TOKEN_BUDGET_STRATEGIES:
            setting, fix = self._token_budget_names()
            raise CobaRefusal(
                f"{setting} needs a strategy whose value is maximised under a token budget, one of "
                f"{TOKEN_BUDGET_STRATEGIES}; {name('strategy')}={self.strategy!r} allocates rollouts only. "
                f"{fix}, or one of those strategies."
            )
        if self.cut_sessions not in CUT_SESSIONS:
            raise CobaRefusal(
                f"{name('cut_sessions')}={self.cut_sessions!r} is unknown; choose one of {CUT_SESSIONS}."
            )
        for key in ("skip_spread_below", "skip_explore"):
            setattr(self, key, check_real(name(key), getattr(self, key)))
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise CobaRefusal(f"{name(key)}={getattr(self, key)} must lie in [0, 1].")
        if self.skip_spread_below > 0 and self.budget_unit == "tokens":
            raise CobaRefusal(
                f"{name('skip_spread_below')}={self.skip_spread_below} with {name('budget_unit')}=tokens: "
                "the skip re-spends a round's rollouts, which a token budget does not fix. Set one of them "
                f"back ({name('skip_spread_below')}=0 or {name('budget_unit')}=rollouts)."
            )
        if not isinstance(self.size_refills, (bool, np.bool_)):
            shown = _shown(self.size_refills)
            raise CobaTypeRefusal(f"{name('size_refills')}={shown} must be true or false.")
        self.size_refills = bool(self.size_refills)
        for key in ("prior_field", "prior_file"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise CobaRefusal(f"{name(key)}={_shown(value)} must be a non-empty string, or null/None.")
        self.prior_weight = check_int(name("prior_weight"), self.prior_weight)
        if self.prior_weight < 1:
            raise CobaRefusal(f"{name('prior_weight')}={self.prior_weight} must be an integer >= 1.")
        self.static_alpha, self.static_beta = check_shape(
            self.static_alpha, self.static_beta, (name("static_alpha"), name("static_beta"))
        )
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _STRATEGY_KNOBS and f.name not in READS[self.strategy] and value != f.default:
                warnings.warn(
                    f"{name(f.name)}={value!r} does not change the budgets of strategy={self.strategy!r}; "
                    "it is ignored.",
                    UserWarning,
                    stacklevel=self._caller_depth,
                )

    def _name(self, field: str) -> str:
        """How messages name a field: ``coba.<field>``, the key a veRL or yaml user sets."""
        return f"coba.{field}"

    def _token_budget_names(self) -> tuple[str, str]:
        """How messages name the setting that asks for a token budget, and how to count rollouts instead."""
        return f"{self._name('budget_unit')}='tokens'", f"Set {self._name('budget_unit')}=rollouts"

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any]) -> CobaConfig:
        """Build from a plain mapping (e.g. an OmegaConf node turned into a dict); unknown keys fail."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise CobaRefusal(f"Unknown coba config keys {unknown}; valid keys are {sorted(known)}.")
        return cls(**dict(mapping))
