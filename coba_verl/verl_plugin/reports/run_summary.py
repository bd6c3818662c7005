"""A short summary of a veRL run with coba-verl, read from veRL's file logger.

``trainer.logger=[console,file]`` with ``VERL_FILE_LOGGER_PATH=FILE`` makes veRL's `Tracking` write
one JSON line per logged step, ``{"step": s, "data": {metric: value}}`` (the validation before
training is step 0). From it::

    python -m coba_verl.verl_plugin.reports.run_summary FILE [--log LOG] [--checkpoints DIR] [--png PNG]

writes, per training step, the budgets' range and spread, whether they differ from uniform, the
groups with no reward spread (all rollouts failed or all passed: no GRPO gradient) among the
groups the tracker observed (under DAPO more than the step allocated: evicted groups and
refills) and the per-prompt mean score; then the totals, the share of such groups the tracker's
pass rates predict with these budgets and with the same number of rollouts for every prompt, the
held-out accuracy at every validation with its change from the first validation to the last, that
change's standard error and whether it is within noise (`HeldOutChange`; the error needs the number
of held-out prompts: ``--val-files``), the training prompts' mean score early and late in the run
beside it (`training_score_line`), the time veRL logged (steps, validations, checkpoints), and
where the metrics, the console log, the checkpoints and the picture are. ``--png`` also draws the
run as one picture (`run_plots.summary_figure`: budgets per step, the share of groups without
reward spread, rollouts generated against trained).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coba_verl.core.allocator import METRIC_PREFIX as PREFIX
from coba_verl.core.step_line import held_out_score
from coba_verl.verl_plugin.reports.metrics_file import read_metrics
from coba_verl.verl_plugin.verl_names import HELD_OUT_PREFIX

__all__ = [
    "HeldOutChange",
    "StepSummary",
    "held_out_change",
    "main",
    "read_metrics",
    "step_summaries",
    "summary_lines",
    "time_line",
    "training_score_line",
]

#: A change of held-out accuracy is beyond noise when it exceeds this many standard errors.
NOISE_SE = 2.0


@dataclass(frozen=True)
class StepSummary:
    """What the summary says about one training step.

    Attributes:
        step: veRL's global step (1-based).
        prompts: the prompts the step allocated (the budget histogram's total).
        budget_min, budget_max, budget_mean, budget_std: B_i over the step's prompts.
        observed: the groups the tracker observed this step (``coba/prompts``), over which
            ``coba/all_fail_share`` and ``all_pass_share`` are taken; under DAPO more than
            ``prompts`` (evicted groups, refills).
        all_fail, all_pass: observed groups whose rollouts all failed / all passed (no reward spread).
        prompt_mean_score: mean over prompts of each prompt's mean score (None if not logged).
    """

    step: int
    prompts: int
    budget_min: float
    budget_max: float
    budget_mean: float
    budget_std: float
    observed: int
    all_fail: int
    all_pass: int
    prompt_mean_score: float | None

    @property
    def uniform(self) -> bool:
        """Every prompt got the same number of rollouts."""
        return self.budget_min == self.budget_max

    @property
    def zero_variance(self) -> int:
        return self.all_fail + self.all_pass


def step_summaries(metrics: Mapping[int, Mapping[str, float]]) -> list[StepSummary]:
    """One `StepSummary` per step that logged coba-verl's budgets, in step order."""
    out = []
    for step in sorted(metrics):
        m = metrics[step]
        if PREFIX + "budget_min" not in m:
            continue
        prompts = round(sum(v for k, v in m.items() if k.startswith(PREFIX + "budget_hist/")))
        observed = round(float(m.get(PREFIX + "prompts", 0.0)))  # absent with the shares: none observed
        out.append(
            StepSummary(
                step=step,
                prompts=prompts,
                budget_min=float(m[PREFIX + "budget_min"]),
                budget_max=float(m[PREFIX + "budget_max"]),
                budget_mean=float(m[PREFIX + "budget_mean"]),
                budget_std=float(m[PREFIX + "budget_std"]),
                observed=observed,
                all_fail=round(float(m.get(PREFIX + "all_fail_share", 0.0)) * observed),
                all_pass=round(float(m.get(PREFIX + "all_pass_share", 0.0)) * observed),
                prompt_mean_score=m.get(PREFIX + "prompt_mean_score"),
            )
        )
    return out


def summary_lines(
    metrics: Mapping[int, Mapping[str, float]],
    *,
    metrics_file: str | Path | None = None,
    log_file: str | Path | None = None,
    checkpoints: str | Path | None = None,
    picture: str | Path | None = None,
    held_out_prompts: int | None = None,
) -> list[str]:
    """The summary's lines (no trailing newlines). ``held_out_prompts``: the prompts each validation
    answered (the rows of ``data.val_files``), for the standard error of the held-out change."""
    steps = step_summaries(metrics)
    lines = []
    if not steps:
        lines.append("no step logged coba-verl's budgets (coba/budget_*): was the run a coba-verl one?")
    for s in steps:
        score = "" if s.prompt_mean_score is None else f", prompt mean score {s.prompt_mean_score:.3f}"
        lines.append(
            f"step {s.step:3d}: B {s.budget_min:.0f}-{s.budget_max:.0f} (mean {s.budget_mean:.1f}, "
            f"std {s.budget_std:.1f}){' uniform' if s.uniform else ''}; zero-variance groups "
            f"{s.zero_variance}/{s.observed} observed ({s.all_fail} all fail, {s.all_pass} all pass){score}"
        )
    if steps:
        groups = sum(s.observed for s in steps)
        zero = sum(s.zero_variance for s in steps)
        varied = sum(not s.uniform for s in steps)
        share = f" ({100 * zero / groups:.0f} %)" if groups else ""
        lines.append(
            f"budgets differ from uniform in {varied} of {len(steps)} steps; zero-variance groups "
            f"{zero} of {groups} observed{share}"
        )
        expected = [
            (m[PREFIX + "expected_zero_var_share"], m[PREFIX + "expected_zero_var_share_uniform"])
            for m in (metrics[s.step] for s in steps)
            if PREFIX + "expected_zero_var_share" in m and PREFIX + "expected_zero_var_share_uniform" in m
        ]
        if expected:
            lines.append(
                "expected share of groups without reward spread (prompts with a pass rate, mean over "
                f"{len(expected)} steps): {sum(e for e, _ in expected) / len(expected):.3f} with these "
                f"budgets, {sum(u for _, u in expected) / len(expected):.3f} with {steps[0].budget_mean:.0f} "
                "rollouts each"
            )
    held_out = [(step, held_out_score(m, HELD_OUT_PREFIX)) for step, m in sorted(metrics.items())]
    held_out = [(step, found) for step, found in held_out if found is not None]
    if held_out:
        name = held_out[0][1][0]
        values = ", ".join(
            f"{found[1]:.3f} " + ("before training" if step == 0 else f"after step {step}")
            for step, found in held_out
        )
        change = held_out_change(metrics, held_out_prompts)
        lines.append(
            f"held-out accuracy ({name}): {values}" + ("" if change is None else f"; {change.text()}")
        )
        training = training_score_line(steps, None if change is None else change.change)
        if training:
            lines.append(training)
    else:
        lines.append("held-out accuracy: not measured (no validation logged)")
    timing = time_line(metrics)
    if timing:
        lines.append(timing)
    for label, where in (
        ("metrics", metrics_file),
        ("console log", log_file),
        ("checkpoints", checkpoints),
        ("picture", picture),
    ):
        if where is not None:
            lines.append(f"{label}: {where}")
    return lines


@dataclass(frozen=True)
class HeldOutChange:
    """Held-out accuracy from the run's first validation to its last, and whether that is noise.

    The standard error is binomial: each validation's ``prompts x samples`` answers taken as
    independent draws at its accuracy a, SE(a) = sqrt(a (1 - a) / (prompts x samples)), the two
    validations independent, SE(change) = sqrt(SE(first)^2 + SE(last)^2). For the same prompts
    answered twice by an unchanged model it is at most the true error (prompts whose pass rate is
    near 0 or 1 vary less than a binomial); it leaves out which prompts were drawn (for another
    held-out set of the same kind it is a lower bound: a prompt's samples are correlated) and the
    training's run-to-run spread. None without the number of prompts or for scores outside 0-1.

    Attributes:
        first_step, last_step: the steps of the two validations (0: before training).
        first, last: held-out accuracy at those validations.
        samples: answers per prompt (the k of veRL's ``mean@k``).
        prompts: held-out prompts per validation, or None if not known.
    """

    first_step: int
    last_step: int
    first: float
    last: float
    samples: int
    prompts: int | None

    @property
    def change(self) -> float:
        return self.last - self.first

    @property
    def standard_error(self) -> float | None:
        if not self.prompts or not all(0.0 <= a <= 1.0 for a in (self.first, self.last)):
            return None
        answers = self.prompts * self.samples
        return math.sqrt((self.first * (1 - self.first) + self.last * (1 - self.last)) / answers)

    @property
    def verdict(self) -> str | None:
        """One of within noise, rose beyond noise, fell beyond noise (beyond: by more than
        `NOISE_SE` standard errors); None without a standard error."""
        se = self.standard_error
        if se is None:
            return None
        if abs(self.change) <= NOISE_SE * se:
            return "within noise"
        return "rose beyond noise" if self.change > 0 else "fell beyond noise"

    def text(self) -> str:
        """The held-out line's tail: the change, its standard error and the verdict."""
        head = f"change {self.change:+.3f}"
        se = self.standard_error
        if se is None:
            why = "held-out prompts not known, --val-files" if not self.prompts else "scores not 0-1"
            return f"{head} (no standard error: {why})"
        side = "under" if self.verdict == "within noise" else "over"
        return (
            f"{head}, standard error {se:.3f} (binomial, {self.prompts} prompts x {self.samples} samples "
            f"each time): {self.verdict} ({side} {NOISE_SE:g} standard errors, {NOISE_SE * se:.3f})"
        )


def _at(step: int) -> str:
    return "before training" if step == 0 else f"after step {step}"


def held_out_change(
    metrics: Mapping[int, Mapping[str, float]], prompts: int | None = None
) -> HeldOutChange | None:
    """The change of held-out accuracy (the summary's ``mean@k`` metric) from the first validation to
    the last (the first and last the held-out line lists); None with fewer than two validations."""
    found = [(step, held_out_score(m, HELD_OUT_PREFIX)) for step, m in sorted(metrics.items())]
    found = [(step, hit) for step, hit in found if hit is not None]
    if len(found) < 2:
        return None
    (first_step, (name, first)), (last_step, (_, last)) = found[0], found[-1]
    samples = int(name.rsplit("@", 1)[1])
    return HeldOutChange(first_step, last_step, first, last, samples, prompts)


def training_score_line(steps: Sequence[StepSummary], held_out_change: float | None = None) -> str | None:
    """The training prompts' mean score over the first and the last quarter of the steps (at least one
    step each) with their all-fail groups, said to have fallen (risen) "too" when it moved the way
    held-out accuracy did. Consecutive steps draw other prompts (an epoch draws each prompt once), so
    part of a difference is which prompts were drawn. None with fewer than two steps with a score."""
    scored = [s for s in steps if s.prompt_mean_score is not None]
    if len(scored) < 2:
        return None
    quarter = max(1, len(scored) // 4)
    early, late = scored[:quarter], scored[-quarter:]
    a = sum(float(s.prompt_mean_score) for s in early) / len(early)
    b = sum(float(s.prompt_mean_score) for s in late) / len(late)
    moved = "fell" if b < a else "rose" if b > a else "held"
    too = held_out_change is not None and ((b < a and held_out_change < 0) or (b > a and held_out_change > 0))
    return (
        f"training prompts' mean score {moved}{' too' if too else ''}: {a:.3f} over {_span(early)}, "
        f"{b:.3f} over {_span(late)} (other prompts each step; all-fail groups "
        f"{sum(s.all_fail for s in early)} of {sum(s.observed for s in early)} observed, then "
        f"{sum(s.all_fail for s in late)} of {sum(s.observed for s in late)})"
    )


def _span(steps: Sequence[StepSummary]) -> str:
    first, last = steps[0].step, steps[-1].step
    return f"step {first}" if first == last else f"steps {first}-{last}"


def time_line(metrics: Mapping[int, Mapping[str, float]]) -> str | None:
    """Where veRL's logged time went: its steps (``timing_s/step``: generation, update and
    coba-verl's code; the sum and the median), validations (``timing_s/testing``) and checkpoints
    (``timing_s/save_checkpoint``), summed over the logged steps; None if no step logged a time.

    The rest of a launch, Ray's start, the workers' and the validation before training, is not
    logged by veRL (a wall clock around the launch shows it: scripts/quickstart.sh).
    """
    steps = sorted(float(m["timing_s/step"]) for m in metrics.values() if "timing_s/step" in m)
    if not steps:
        return None
    middle = len(steps) // 2
    median = steps[middle] if len(steps) % 2 else (steps[middle - 1] + steps[middle]) / 2
    testing = sum(float(m.get("timing_s/testing", 0.0)) for m in metrics.values())
    saving = sum(float(m.get("timing_s/save_checkpoint", 0.0)) for m in metrics.values())
    return (
        f"time logged by veRL: {len(steps)} steps {sum(steps):.1f} s (median {median:.2f} s), "
        f"validations after a step {testing:.1f} s, checkpoints {saving:.1f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coba_verl.verl_plugin.reports.run_summary FILE``: write the summary to standard output."""
    parser = argparse.ArgumentParser(
        prog="coba-verl summary",
        description="Summarise a coba-verl run from veRL's file logger (VERL_FILE_LOGGER_PATH).",
    )
    parser.add_argument("metrics", help="the file logger's JSON lines")
    parser.add_argument("--log", help="the run's console log, named in the summary")
    parser.add_argument("--checkpoints", help="the run's checkpoint folder, named in the summary")
    parser.add_argument("--val-files", nargs="+", metavar="PARQUET",
                        help="the run's data.val_files: their rows are the held-out prompts, for the "
                        "held-out change's standard error")  # fmt: skip
    parser.add_argument("--png", help="also draw the run here: budgets, groups without reward spread, "
                        "rollouts generated and trained, per step")  # fmt: skip
    args = parser.parse_args(argv)
    metrics = read_metrics(args.metrics)
    if args.png:
        from coba_verl.verl_plugin.reports import run_plots  # matplotlib: only when a picture is asked for

        run_plots.save(run_plots.summary_figure(metrics, f"coba-verl run: {args.metrics}"), args.png)
    prompts = None
    if args.val_files:
        import pyarrow.parquet as pq  # veRL's datasets read their parquet with it

        prompts = sum(pq.ParquetFile(Path(f).expanduser()).metadata.num_rows for f in args.val_files)
    lines = summary_lines(
        metrics,
        metrics_file=args.metrics,
        log_file=args.log,
        checkpoints=args.checkpoints,
        picture=args.png,
        held_out_prompts=prompts,
    )
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    from coba_verl.refusal import exit_on_refusal

    with exit_on_refusal():
        raise SystemExit(main())
