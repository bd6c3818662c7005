"""`CobaConfig`: every knob of the allocator, with its one default (spec tags in brackets).

The veRL config group ``coba`` (``coba_verl/config/coba/default.yaml``) mirrors these fields
key for key; a test keeps the two from drifting. Nothing here imports veRL.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

STRATEGIES: tuple[str, ...] = ("coba", "coba_release", "knapsack", "uniform", "static", "reverse")
SOLVERS: tuple[str, ...] = ("fast", "heap", "dp")


@dataclass
class CobaConfig:
    """Configuration of CoBA-RL budget allocation (spec ``shared/spec/COBA_RL.md``).

    Args:
        strategy: How per-prompt budgets B_i are chosen.
            ``coba``: the paper's Algorithm 1 on V = eta(B, p) * BetaPdf(p; alpha_t, beta_t), with
            alpha_t/beta_t following the global failure rate (spec §3-5) [paper].
            ``coba_release``: the same value, wrapped in the authors' release buckets and fallback
            (spec §6) [release].
            ``knapsack``: Knapsack-RL's value and allocation rules (spec §9), the main baseline.
            ``uniform``: every prompt gets total / M rollouts: stock GRPO.
            ``static``: CoBA with a fixed Beta(static_alpha, static_beta) (paper ablation, §8).
            ``reverse``: CoBA with alpha driven by the success rate instead of the failure rate
            (explore first, exploit later; paper ablation, §3).
        min_rollouts: B_low, the fewest rollouts a prompt gets. Must be >= 2 under GRPO, where a
            group of one has no baseline [paper: 2].
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
            Ignored by ``uniform`` and ``knapsack`` (which use their own rules).
        success_value: A rollout counts as a success iff its score equals this value (spec §2).
            Works for 0/1 and DAPO's -1/+1 scorers alike.
        unseen_pass_rate: Pass rate used for a prompt without history when other prompts of the
            batch have history (spec §2) [release: 0.5]. A batch with no history at all is
            allocated uniformly.
        p_clip_low: Lower clip of p before the value is computed (spec §4) [release: 0.01].
        p_clip_high: Upper clip of p before the value is computed (spec §4) [release: 0.99].
        static_alpha: alpha of the ``static`` strategy's fixed Beta [ablation; default: the
            explore end of the schedule, Beta(2, kappa - 2) at kappa = 11].
        static_beta: beta of the ``static`` strategy's fixed Beta.
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

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"coba.strategy={self.strategy!r} is unknown; choose one of {STRATEGIES}.")
        if self.solver not in SOLVERS:
            raise ValueError(f"coba.solver={self.solver!r} is unknown; choose one of {SOLVERS}.")
        if int(self.min_rollouts) != self.min_rollouts or self.min_rollouts < 1:
            raise ValueError(f"coba.min_rollouts={self.min_rollouts} must be an integer >= 1.")
        if int(self.max_rollouts) != self.max_rollouts or self.max_rollouts < self.min_rollouts:
            raise ValueError(
                f"coba.max_rollouts={self.max_rollouts} must be an integer >= "
                f"coba.min_rollouts={self.min_rollouts}."
            )
        self.min_rollouts = int(self.min_rollouts)
        self.max_rollouts = int(self.max_rollouts)
        if not self.kappa > 2:
            raise ValueError(f"coba.kappa={self.kappa} must be > 2 so that alpha, beta >= 1 fit in it.")
        if int(self.window) != self.window or self.window < 1:
            raise ValueError(f"coba.window={self.window} must be an integer >= 1.")
        self.window = int(self.window)
        if self.tau is not None and not self.tau > 0:
            raise ValueError(f"coba.tau={self.tau} must be positive, or null for the adaptive rule.")
        if not 0.0 < self.p_clip_low < self.p_clip_high < 1.0:
            raise ValueError(
                f"coba.p_clip_low={self.p_clip_low}, coba.p_clip_high={self.p_clip_high} "
                "must satisfy 0 < low < high < 1."
            )
        if not 0.0 <= self.unseen_pass_rate <= 1.0:
            raise ValueError(f"coba.unseen_pass_rate={self.unseen_pass_rate} must lie in [0, 1].")
        if not (self.static_alpha >= 1.0 and self.static_beta >= 1.0):
            raise ValueError(
                f"coba.static_alpha={self.static_alpha}, coba.static_beta={self.static_beta} "
                "must both be >= 1 (a Beta density bounded on (0, 1))."
            )

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any]) -> CobaConfig:
        """Build from a plain mapping (e.g. an OmegaConf node turned into a dict); unknown keys fail."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"Unknown coba config keys {unknown}; valid keys are {sorted(known)}.")
        return cls(**dict(mapping))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
