"""The DAPO bench by n: U, C0 and C-size paired by seed at each n, `coba-verl plan`'s prediction
beside the measured generation, and the picture of measure 1 against n (docs/dapo_n16_design.md,
sections 3 and 6, amendments 5-7).

    python bench/dapo_bench_by_n.py --logs docs/data/dapo_bench --prior-file DATA/priors.jsonl \\
        --png docs/img/dapo_bench_by_n.png

``--logs`` holds one folder per n (``n16``, ``n8``, ``n4``), each with
``{uniform,coba,coba_size}_seed{S}.jsonl`` (veRL's file-logger rows of `dapo_bench_runs.py`'s runs);
a seed counts at an n when its three runs are there. Per n and change (C0 = ``coba``, C-size =
``coba_size``), against U of the same seed, mean and 95 % t-interval over the seeds:

    gen/trained       measure 1: rollouts generated per trained rollout of the run (sums over its
                      steps of ``coba/rollouts_generated`` and ``coba/trained_rollouts``), its ratio to U's
    tok/trained       the same for response tokens (``coba/tokens_generated``)
    gain/10k          measure 2: held-out gain per 10,000 generated rollouts, (accuracy after the
                      last step - before training) / rollouts generated x 10,000, minus U's
    Δ final           held-out accuracy after the last step minus U's
    reach U           measure 3: seeds whose last validation reaches U's final
    plan              measure 4: `coba-verl plan`'s generated per trained rollout for the run's M, n,
                      B_up (`shape`: the top of CoBA's budget histogram), DAPO on, its steps, ``--draws``
                      draws; C-size's predicted ratio is to plain U's row, as measured

Every step of every run must train M x n rollouts; one that does not stops the script (a defect).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from dapo_tiny import gain_per_10k, interval, per_trained, t_interval, training_steps, validation_curve
from tiny_runs import read_log

from coba_verl.core.config import CobaConfig
from coba_verl.core.step_cost import Population, plan_step_cost
from coba_verl.records.priors import read_prior_file

#: The runs of a seed at one n: file stem -> (label, coba strategy for the plan, size_refills).
RUNS = {
    "uniform": ("U", "uniform", False),
    "coba": ("C0", "coba", False),
    "coba_size": ("C-size", "coba", True),
}
CHANGES = ("coba", "coba_size")


def load(folder: Path) -> tuple[list[int], dict[str, list[list[dict]]]]:
    """The seeds with all three runs in ``folder``, in order, and their rows by run name."""
    seeds = sorted(int(p.stem.rsplit("seed", 1)[1]) for p in folder.glob("uniform_seed*.jsonl"))
    seeds = [s for s in seeds if all((folder / f"{name}_seed{s}.jsonl").is_file() for name in RUNS)]
    return seeds, {name: [read_log(folder / f"{name}_seed{s}.jsonl") for s in seeds] for name in RUNS}


def shape(uniform: list[dict], coba: list[dict]) -> dict[str, int]:
    """M, n, B_up and the steps of a seed's runs, from their logs: n is uniform's budget, M its
    trained rollouts a step over n, B_up the upper end of CoBA's budget histogram (``coba/budget_hist/
    LO-HI``); a step training another count than M x n is a defect."""
    steps = training_steps(uniform)
    n = int(steps[0]["coba/budget_max"])
    trained = {row["coba/trained_rollouts"] for rows in (uniform, coba) for row in training_steps(rows)}
    if len(trained) != 1:
        raise SystemExit(f"DEFECT: steps trained different counts of rollouts: {sorted(trained)}")
    bins = [key.rsplit("/", 1)[1] for key in training_steps(coba)[0] if key.startswith("coba/budget_hist/")]
    budget_up = max(int(label.split("-")[1]) for label in bins)
    return {"prompts": int(trained.pop()) // n, "n": n, "max_rollouts": budget_up, "steps": len(steps)}


def measures(runs: dict[str, list[list[dict]]]) -> dict[str, dict[str, list[float]]]:
    """Per change, per seed: the ratios and differences to U of the module docstring."""
    out: dict[str, dict[str, list[float]]] = {}
    for change in CHANGES:
        m: dict[str, list[float]] = {"gen": [], "tok": [], "gain": [], "final": [], "reach": []}
        for u, c in zip(runs["uniform"], runs[change], strict=True):
            us, cs = training_steps(u), training_steps(c)
            m["gen"].append(
                per_trained(cs, "coba/rollouts_generated") / per_trained(us, "coba/rollouts_generated")
            )
            m["tok"].append(
                per_trained(cs, "coba/tokens_generated") / per_trained(us, "coba/tokens_generated")
            )
            curves = [validation_curve(rows, "coba/rollouts_generated") for rows in (u, c)]
            u_gain, c_gain = (gain_per_10k(curve) for curve in curves)
            if u_gain is None or c_gain is None:
                raise SystemExit("a run without a validation before training and after its last step")
            m["gain"].append(c_gain - u_gain)
            u_final, c_final = (curve[-1][1] for curve in curves)
            m["final"].append(c_final - u_final)
            m["reach"].append(float(c_final >= u_final))
        out[change] = m
    return out


def planned(pop: Population, runs: dict[str, list[list[dict]]], draws: int) -> dict[str, float]:
    """`coba-verl plan`'s generated per trained rollout for each run name at the runs' shape (DAPO
    on; the truth is the posterior of the prior file's counts, as ``coba-verl plan`` takes it)."""
    common = dict(dapo=True, draws=draws, seed=0, truth="estimate" if pop.exact else "posterior")
    common |= shape(runs["uniform"][0], runs["coba"][0])
    return {
        name: plan_step_cost(pop, strategy=strategy, size_refills=size, **common).generated_per_trained
        for name, (_, strategy, size) in RUNS.items()
    }


def report(
    n_label: str,
    seeds: list[int],
    runs: dict[str, list[list[dict]]],
    measured: dict[str, dict[str, list[float]]],
    plan: dict[str, float] | None,
) -> None:
    """Print one n's table (``measured``: `measures` of ``runs``)."""
    pooled = {name: per_trained([r for rows in runs[name] for r in training_steps(rows)],
                                "coba/rollouts_generated") for name in RUNS}  # fmt: skip
    print(f"\n{n_label}: seeds {seeds}; generated per trained rollout, pooled: "
          + ", ".join(f"{RUNS[name][0]} {value:.3f}" for name, value in pooled.items()))  # fmt: skip
    if plan is not None:
        print("  plan's prediction: " + ", ".join(f"{RUNS[k][0]} {v:.3f}" for k, v in plan.items()))
    for change, m in measured.items():
        label = RUNS[change][0]
        planned_ratio = "" if plan is None else f" (plan {plan[change] / plan['uniform']:.3f})"
        print(f"  {label:<7} gen/trained / U {interval(m['gen'])}{planned_ratio}; "
              f"tok/trained / U {interval(m['tok'])}")  # fmt: skip
        print(f"  {'':<7} gain/10k - U's {interval(m['gain'], '+')}; Δ final {interval(m['final'], '+')}; "
              f"reach U's final {int(sum(m['reach']))}/{len(seeds)}")  # fmt: skip


def plot(
    measured: dict[int, dict[str, dict[str, list[float]]]], plans: dict[int, dict[str, float]], png: Path
) -> None:
    """Measure 1's ratio to U against n (``measured``: `measures` by n), mean and 95 % t-interval,
    plan's prediction hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    ns = sorted(measured)
    for offset, (change, color) in zip(
        (-0.04, 0.04), ((CHANGES[0], "tab:blue"), (CHANGES[1], "tab:orange")), strict=True
    ):
        stats_n = [t_interval(measured[n][change]["gen"]) for n in ns]
        x = [np.log2(n) + offset for n in ns]
        mean = np.array([s[0] for s in stats_n])
        err = np.array([[s[0] - s[1] for s in stats_n], [s[2] - s[0] for s in stats_n]])
        seeds = [len(measured[n][change]["gen"]) for n in ns]
        ax.errorbar(x, mean, yerr=err, fmt="o-", color=color, capsize=3,
                    label=f"{RUNS[change][0]} (seeds {'/'.join(map(str, seeds))})")  # fmt: skip
        if plans:
            ax.plot(x, [plans[n][change] / plans[n]["uniform"] for n in ns], "o", mfc="none", color=color,
                    label=f"{RUNS[change][0]}, plan's prediction")  # fmt: skip
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(0.8, color="grey", lw=0.8, ls=":")
    ax.set_xticks([np.log2(n) for n in ns], [str(n) for n in ns])
    ax.set_xlabel("n (rollouts a prompt under uniform)")
    ax.set_ylabel("generated per trained rollout / U's")
    ax.set_title("The tiny recipe's DAPO bench (48 steps, M = 16)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--logs", type=Path, default=Path("docs/data/dapo_bench"), help="folder of n16, n8, n4"
    )
    parser.add_argument("--prior-file", type=Path, help="the data's priors.jsonl, for plan's prediction")
    parser.add_argument("--draws", type=int, default=10, help="plan's simulated runs")
    parser.add_argument("--png", type=Path, help="measure 1 against n, with plan's prediction")
    args = parser.parse_args()
    folders = sorted(args.logs.glob("n[0-9]*"), key=lambda p: -int(p.name[1:]))
    if not folders:
        parser.error(f"{args.logs} holds no n16, n8, ... folder")
    pop = None
    if args.prior_file is not None:
        records = read_prior_file(args.prior_file, CobaConfig.prior_weight, "--prior-file")
        pop = Population(records.successes, records.attempts, None, source=str(args.prior_file))
    measured, plans = {}, {}
    for folder in folders:
        seeds, runs = load(folder)
        if not seeds:
            print(f"\n{folder.name}: no seed with all three runs")
            continue
        n = shape(runs["uniform"][0], runs["coba"][0])["n"]
        measured[n] = measures(runs)
        if pop is not None:
            plans[n] = planned(pop, runs, args.draws)
        report(f"n = {n}", seeds, runs, measured[n], plans.get(n))
    if args.png is not None:
        plot(measured, plans, args.png)


if __name__ == "__main__":
    main()
