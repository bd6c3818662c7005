"""`coba-verl plan`: what a step will cost, before a run (docs/plan.md; maths: `coba_verl.core.step_cost`).

    coba-verl plan --prior-file priors.jsonl --prompts 16 --n 4 --max-rollouts 16 --dapo
    coba-verl plan --pass-rates 0.0,0.1,0.5,0.9 --prompts 4 --n 8
    coba-verl plan --pass-rates uniform:0:0.4 --prompts 128 --n 16 --answer-tokens 900

For uniform GRPO and for ``--strategy`` (coba by default) it prints the budgets' histogram, the
expected share of groups without a reward spread and, with ``--dapo``, the rollouts (and with
``--answer-tokens`` the tokens) generated per one trained. The prior file is read by
`coba_verl.records.priors.read_prior_file`, the trainer's own reader, so it is checked as
``coba.prior_file`` is. Needs numpy only.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from coba_verl.core.config import SIZE_REFILLS_VALUES, STRATEGIES, CobaConfig, auto_size_refills
from coba_verl.core.step_cost import TRUTHS, Population, StepCost, beta_binomial_fit, plan_step_cost
from coba_verl.records.priors import read_prior_file
from coba_verl.refusal import REFUSAL_STATUS, CobaRefusal

__all__ = ["format_plan", "main", "parse_pass_rates", "plan", "population"]

#: Prompts a ``uniform:LOW:HIGH`` draw makes when it names no count.
DRAW_SIZE = 1024


def _floats(text: str, flag: str) -> np.ndarray:
    try:
        return np.asarray([float(v) for v in text.split(",") if v.strip()], dtype=np.float64)
    except ValueError:
        raise CobaRefusal(f"{flag} {text!r}: give numbers separated by commas.") from None


def parse_pass_rates(text: str, seed: int = 0) -> np.ndarray:
    """``"0.1,0.5,0.9"`` -> those rates; ``"uniform:LOW:HIGH[:K]"`` -> K (default 1024) rates drawn
    uniformly from [LOW, HIGH] with ``seed``. A rate outside [0, 1] is refused by `Population`."""
    if not text.startswith("uniform:"):
        return _floats(text, "--pass-rates")
    parts = text.split(":")[1:]
    try:
        low, high = float(parts[0]), float(parts[1])
        size = int(parts[2]) if len(parts) == 3 else DRAW_SIZE
        if len(parts) not in (2, 3) or not 0.0 <= low <= high <= 1.0 or size < 1:
            raise ValueError
    except (ValueError, IndexError):
        raise CobaRefusal(
            f"--pass-rates {text!r}: a draw is uniform:LOW:HIGH or uniform:LOW:HIGH:K, "
            "with 0 <= LOW <= HIGH <= 1 and K >= 1 prompts."
        ) from None
    return np.random.default_rng(seed).uniform(low, high, size)


def population(args: argparse.Namespace) -> Population:
    """The prompts of ``--prior-file`` (read by `read_prior_file`) or ``--pass-rates``, with the
    ``--answer-tokens`` (one length for all, or one per prompt in the file's or the list's order)."""
    lengths = None if args.answer_tokens is None else _floats(args.answer_tokens, "--answer-tokens")
    if args.prior_file is not None:
        records = read_prior_file(args.prior_file, CobaConfig.prior_weight, "--prior-file")
        size, source = len(records.index), f"{args.prior_file}"
    else:
        rates = parse_pass_rates(args.pass_rates, args.seed)
        size, source = rates.size, f"--pass-rates {args.pass_rates}"
    if lengths is not None and lengths.size == 1:
        lengths = np.full(size, lengths[0])
    if args.prior_file is not None:
        return Population(records.successes, records.attempts, lengths, source=source)
    return Population.from_rates(rates, lengths, source)


def plan(args: argparse.Namespace) -> str:
    """The table for parsed arguments (`main`'s parser)."""
    pop = population(args)
    truth = args.truth or ("estimate" if pop.exact else "posterior")
    common = dict(
        prompts=args.prompts, n=args.n, min_rollouts=args.min_rollouts, max_rollouts=args.max_rollouts,
        dapo=args.dapo, steps=args.steps, draws=args.draws, seed=args.seed, truth=truth,
    )  # fmt: skip
    sized = {name: sized_waves(args.size_refills, name, args.dapo) for name in ("uniform", args.strategy)}
    costs = [plan_step_cost(pop, strategy="uniform", size_refills=sized["uniform"], **common)]
    if args.strategy != "uniform":
        costs.append(
            plan_step_cost(
                pop,
                strategy=args.strategy,
                failure_rate=args.failure_rate,
                skip_spread_below=args.skip_spread_below,
                size_refills=sized[args.strategy],
                **common,
            )  # fmt: skip
        )
    elif args.failure_rate is not None:
        raise CobaRefusal(f"--failure-rate {args.failure_rate}: uniform budgets read no Beta.")
    sized_rows = [name for name, on in sized.items() if on]
    return format_plan(pop, costs, failure_rate=args.failure_rate, sized=sized_rows, **common)


def sized_waves(setting: str, strategy: str, dapo: bool) -> bool:
    """Whether ``strategy``'s row sizes its waves under ``--size-refills setting``, as veRL resolves
    ``coba.size_refills``: ``auto`` by `auto_size_refills` (the row of ``--strategy coba`` under
    ``--dapo``, no other), ``true`` for every row (DAPO only: `plan_step_cost` refuses it otherwise),
    ``false`` for none.

        sized_waves("auto", "coba", True) -> True     sized_waves("auto", "knapsack", True) -> False
    """
    if setting == "auto":
        return auto_size_refills(strategy, dapo)
    return setting == "true"


def _row(label: str, values: list[str]) -> str:
    return f"  {label:<36}" + "".join(f"{v:>13}" for v in values)


def format_plan(
    pop: Population,
    costs: list[StepCost],
    *,
    prompts: int,
    n: int,
    min_rollouts: int,
    max_rollouts: int,
    dapo: bool,
    steps: int,
    draws: int,
    seed: int,
    truth: str,
    failure_rate: float | None = None,
    sized: list[str] | None = None,
) -> str:
    """The plan as a short text table: uniform, then the strategy and its ratio to uniform."""
    p = pop.estimates
    lines = [
        f"coba-verl plan: M={prompts} prompts x n={n} = {prompts * n} rollouts a step, budgets in "
        f"[{min_rollouts}, {max_rollouts}], DAPO {'on' if dapo else 'off'}"
        + (f", waves sized to the rollouts missing: {', '.join(sized)} (size_refills)" if sized else ""),
        f"prompts: {pop.size} from {pop.source}; mean pass rate {p.mean():.3f}, "
        f"{np.mean(p == 0):.0%} at 0, {np.mean(p == 1):.0%} at 1",
    ]
    if truth == "posterior":
        a, b = beta_binomial_fit(pop.successes, pop.attempts)
        lines.append(
            f"truth: posterior, p_i ~ Beta({a:.2f} + s_i, {b:.2f} + a_i - s_i) (the population's Beta "
            "fitted to the counts)"
        )
    else:
        lines.append("truth: the pass rates as given" if pop.exact else "truth: estimate, p_i = s_i / a_i")
    if len(costs) > 1:
        shape = f"Beta({costs[1].alpha:.3f}, {costs[1].beta:.3f}) at its first round"
        if math.isnan(costs[1].alpha):
            shape = "no Beta"
        source = f"F_bar = {failure_rate} (--failure-rate)" if failure_rate is not None else "the tracker"
        lines.append(f"{costs[1].strategy}: {shape}, from {source}")
    names = [c.strategy for c in costs]
    lines += ["", _row("", [*names, *(["/ uniform"] if len(costs) > 1 else [])])]
    lines.append("  budgets, prompts of a round in bin:")
    for label in dict.fromkeys(label for c in costs for label in c.histogram):  # "0 (skipped)" first
        counts = [c.histogram.get(label, 0.0) for c in costs]
        if any(counts):
            lines.append(_row(f"  B {label}", [f"{v:.1f}" for v in counts]))

    def row(label: str, values: list[float], fmt: str) -> None:
        ratio = [f"{values[1] / values[0]:.3f}"] if len(values) > 1 and values[0] else []
        lines.append(_row(label, [format(v, fmt) if math.isfinite(v) else "-" for v in values] + ratio))

    row("groups without reward spread", [c.no_spread_share for c in costs], ".1%")
    row("prompts generated a step", [c.prompts_per_step for c in costs], ".1f")
    row("rollouts generated a step", [c.generated_per_step for c in costs], ".1f")
    row("rollouts generated per trained", [c.generated_per_trained for c in costs], ".3f")
    if pop.lengths is not None:
        row("answer tokens generated a step", [c.tokens_per_step for c in costs], ".0f")
        row("tokens generated per trained token", [c.tokens_per_trained_token for c in costs], ".3f")
    short = sum(c.short_steps for c in costs)
    lines += ["", "uniform's share without spread: the closed form mean_i p_i^n + (1 - p_i)^n"]
    lines[-1] += " (its expectation over each p_i's Beta)." if truth == "posterior" else "."
    if not dapo:
        lines.append("Without DAPO every rollout generated is trained: 1 per trained, exactly.")
    lines.append(f"The rest: Monte Carlo over {draws} runs x {steps} step(s) each, seed {seed}.")
    if short:
        lines.append(f"{short} simulated steps trained fewer than M x n rollouts.")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="coba-verl plan",
        description="Predict a step's cost before a run: uniform GRPO beside a CoBA-RL strategy.",
    )
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--prior-file", help="JSON lines of prior records (coba.prior_file's format)")
    given.add_argument("--pass-rates", help="'0.1,0.5,0.9', or a draw 'uniform:LOW:HIGH[:K]' (K: 1024)")
    ap.add_argument("--prompts", type=int, required=True, help="M, prompts a step (data.train_batch_size)")
    ap.add_argument("--n", type=int, required=True, help="rollouts a prompt (actor_rollout_ref.rollout.n)")
    ap.add_argument(
        "--min-rollouts", type=int, default=CobaConfig.min_rollouts, help="B_low (default %(default)s)"
    )
    ap.add_argument(
        "--max-rollouts", type=int, default=CobaConfig.max_rollouts, help="B_up (default %(default)s)"
    )
    ap.add_argument("--strategy", default=CobaConfig.strategy, choices=STRATEGIES, help="default %(default)s")
    ap.add_argument(
        "--dapo", action=argparse.BooleanOptionalAction, default=False, help="DAPO dynamic sampling"
    )
    ap.add_argument("--answer-tokens", help="mean answer length, or one per prompt ('120,340,...')")
    ap.add_argument(
        "--failure-rate", type=float, help="F_bar fixing the Beta of coba/reverse (default: tracker)"
    )
    ap.add_argument(
        "--skip-spread-below", type=float, default=0.0,
        help="coba.skip_spread_below of the CoBA row (GRESO's skip; --dapo only; default 0: off)",
    )  # fmt: skip
    ap.add_argument(
        "--size-refills", nargs="?", const="true", default="auto", choices=SIZE_REFILLS_VALUES,
        help="coba.size_refills (C-size: each wave sized to the rollouts missing; DAPO only): auto (the "
        "default, as in veRL) for the row of --strategy coba under --dapo, true (or the bare flag) both "
        "rows, false none",
    )  # fmt: skip
    ap.add_argument("--truth", choices=TRUTHS, help="default: posterior for a prior file, estimate for rates")
    ap.add_argument("--steps", type=int, default=1, help="steps of a run, the tracker learning (default 1)")
    ap.add_argument("--draws", type=int, default=200, help="simulated runs (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the Monte Carlo and of a draw (default 0)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        text = plan(args)
    except CobaRefusal as err:
        sys.stderr.write("coba-verl plan: " + " ".join(str(err).splitlines()) + "\n")
        return REFUSAL_STATUS
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
