"""One readable line per training step, from the step's metrics dict.

veRL's console logger prints every metric of a step on one very long line; what a CoBA-RL run
is about fits in one short one::

    coba-verl step 12: B 2-9 (mean 4.0, std 2.1), alpha 3.21 beta 7.79, prompt mean score 0.312,
        tokens 5.4k generated (1.08x uniform's), 64 rollouts / 2.1k tokens trained,
        held-out 0.418 (val-core/coba_arithmetic/acc/mean@4)        [one line]

``x uniform's`` is sum_i B_i L_i / (n sum_i L_i) over the step's allocated prompts, L_i their recent
mean response lengths: the tokens these budgets cost against what uniform GRPO would spend on the
same prompts (shown once some length is known).

``held-out`` appears on steps where the trainer validated: the first ``<prefix>.../mean@k``
metric of veRL's validation.
"""

from __future__ import annotations

from collections.abc import Mapping

from coba_verl.core.allocator import METRIC_PREFIX as PREFIX

__all__ = ["held_out_score", "step_line"]


def held_out_score(metrics: Mapping[str, float], prefix: str) -> tuple[str, float] | None:
    """``(name, value)`` of the first ``<prefix>.../mean@k`` metric (sorted by name), or None."""
    names = sorted(k for k in metrics if k.startswith(prefix) and "/mean@" in k)
    return (names[0], float(metrics[names[0]])) if names else None


def _k(count: float) -> str:
    """1234 -> '1.2k', 987 -> '987'."""
    return f"{count / 1000:.1f}k" if count >= 1000 else f"{count:.0f}"


def step_line(step: int, metrics: Mapping[str, float], held_out_prefix: str | None = None) -> str:
    """The line for ``step``: budget range, mean and spread, the Beta shape used, the per-prompt
    mean score, what the step generated and trained (and its allocation's token cost against
    uniform's) and, where the step validated, the held-out score (the first
    ``<held_out_prefix>.../mean@k`` metric; none without a prefix). Missing metrics are left out."""
    parts = []
    if PREFIX + "budget_min" in metrics:
        parts.append(
            f"B {metrics[PREFIX + 'budget_min']:.0f}-{metrics[PREFIX + 'budget_max']:.0f} "
            f"(mean {metrics[PREFIX + 'budget_mean']:.1f}, std {metrics[PREFIX + 'budget_std']:.1f})"
        )
    if PREFIX + "alpha" in metrics:
        parts.append(f"alpha {metrics[PREFIX + 'alpha']:.2f} beta {metrics[PREFIX + 'beta']:.2f}")
    if PREFIX + "prompt_mean_score" in metrics:
        parts.append(f"prompt mean score {metrics[PREFIX + 'prompt_mean_score']:.3f}")
    if PREFIX + "tokens_generated" in metrics:
        cost = f"tokens {_k(metrics[PREFIX + 'tokens_generated'])} generated"
        if metrics.get(PREFIX + "expected_tokens_uniform", 0) > 0:
            ratio = metrics[PREFIX + "expected_tokens"] / metrics[PREFIX + "expected_tokens_uniform"]
            cost += f" ({ratio:.2f}x uniform's)"
        if PREFIX + "trained_rollouts" in metrics:
            cost += (
                f", {metrics[PREFIX + 'trained_rollouts']:.0f} rollouts / "
                f"{_k(metrics[PREFIX + 'tokens_trained'])} tokens trained"
            )
        parts.append(cost)
    held_out = held_out_score(metrics, held_out_prefix) if held_out_prefix is not None else None
    if held_out is not None:
        parts.append(f"held-out {held_out[1]:.3f} ({held_out[0]})")
    return f"coba-verl step {step}: " + (", ".join(parts) if parts else "no coba metrics")
