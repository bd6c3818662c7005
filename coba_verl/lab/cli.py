"""``coba-verl lab`` / ``python -m coba_verl.lab``: compare allocation strategies on CPU in minutes.

Examples::

    coba-verl lab                                   # uniform vs knapsack vs coba, seed 0
    coba-verl lab --runs uniform,coba,coba@0.5 --seeds 0,1,2 --steps 256
    coba-verl lab --coba kappa=7 --coba window=1    # allocator knobs (CobaConfig fields)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

from coba_verl.core.config import STRATEGIES, CobaConfig

__all__ = ["main", "build_parser"]

logger = logging.getLogger("coba_verl.lab")


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coba_verl" / "lab"


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers, e.g. 0,1,2"
        ) from None
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no integer; give e.g. 0,1,2")
    return out


def _run_list(text: str) -> list[str]:
    from coba_verl.lab.config import parse_run_label

    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no strategy; choose from {', '.join(STRATEGIES)}")
    for label in out:
        try:
            parse_run_label(label)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return out


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _coba_item(text: str) -> tuple[str, Any]:
    known = {f.name: f for f in fields(CobaConfig) if f.name != "strategy"}
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or key not in known:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE with KEY one of {', '.join(sorted(known))} (e.g. kappa=7)"
        )
    raw = raw.strip()
    value: Any
    if raw.lower() in ("null", "none"):
        value = None
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return key, value


def build_parser() -> argparse.ArgumentParser:
    from coba_verl.lab.config import LabConfig

    d = LabConfig()
    p = argparse.ArgumentParser(
        prog="coba-verl lab",
        description=(
            "CPU lab: warm-start a tiny Qwen2 on generated arithmetic, then train it with GRPO "
            "(veRL's advantage and policy loss) under several rollout-allocation strategies at "
            "equal budget, and compare held-out accuracy."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--runs",
        type=_run_list,
        default=d.runs,
        help=f"comma-separated strategies ({', '.join(STRATEGIES)}); 'coba@0.5' = half the rollouts per step",
    )
    p.add_argument("--seeds", type=_int_list, default=d.seeds, help="comma-separated seeds")
    p.add_argument("--steps", type=_positive(int), default=d.steps, help="GRPO steps per run")
    p.add_argument("--prompts-per-step", type=_positive(int), default=d.prompts_per_step, help="M")
    p.add_argument(
        "--rollouts-per-prompt", type=_positive(int), default=d.rollouts_per_prompt, help="n; budget M*n"
    )
    p.add_argument("--n-train", type=_positive(int), default=d.n_train, help="training prompts")
    p.add_argument("--n-eval", type=_positive(int), default=d.n_eval, help="held-out prompts")
    p.add_argument(
        "--eval-every", type=_positive(int), default=d.eval_every, help="steps between evaluations"
    )
    p.add_argument("--eval-samples", type=_positive(int), default=d.eval_samples, help="k of avg@k")
    p.add_argument("--lr", type=_positive(float), default=d.lr, help="GRPO learning rate")
    p.add_argument(
        "--mini-batch-size", type=int, default=d.mini_batch_size, help="rollouts per optimiser step, 0 = all"
    )
    p.add_argument("--warm-steps", type=int, default=d.warm_steps, help="most supervised warm-start steps")
    p.add_argument(
        "--warm-target",
        type=float,
        default=d.warm_target,
        help="warm start stops at this probe accuracy (0 = off)",
    )
    p.add_argument(
        "--coba",
        type=_coba_item,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="allocator knob (a CobaConfig field), repeatable, e.g. --coba kappa=7",
    )
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads (0 = torch default)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/lab-YYYYmmdd-HHMMSS)")
    p.add_argument("--cache-dir", type=Path, default=_default_cache(), help="warm-start cache")
    p.add_argument("--no-cache", action="store_true", help="always recompute the warm start")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    return p


def _unique_dir(path: Path) -> Path:
    if not path.exists():
        return path
    i = 1
    while path.with_name(f"{path.name}-{i}").exists():
        i += 1
    return path.with_name(f"{path.name}-{i}")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the lab, print the summary table; returns the exit code
    (0 finished, 130 interrupted, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    os.environ.setdefault("VERL_LOGGING_LEVEL", "ERROR")  # veRL's accelerator probing is noise on CPU
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
    import torch

    from coba_verl.lab.config import LabConfig
    from coba_verl.lab.experiment import run_lab

    try:
        cfg = LabConfig(
            runs=args.runs,
            seeds=args.seeds,
            steps=args.steps,
            prompts_per_step=args.prompts_per_step,
            rollouts_per_prompt=args.rollouts_per_prompt,
            n_train=args.n_train,
            n_eval=args.n_eval,
            eval_every=args.eval_every,
            eval_samples=args.eval_samples,
            lr=args.lr,
            mini_batch_size=args.mini_batch_size,
            warm_steps=args.warm_steps,
            warm_target=args.warm_target,
            coba=dict(args.coba),
            threads=args.threads,
        )
    except ValueError as err:
        parser.error(str(err))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = args.out if args.out is not None else _unique_dir(Path("runs") / time.strftime("lab-%Y%m%d-%H%M%S"))
    outcome = run_lab(
        cfg, out, cache_dir=None if args.no_cache else args.cache_dir, progress=not args.no_progress
    )
    sys.stdout.write(outcome.table + "\n")
    sys.stdout.write(
        f"\n{outcome.status} in {outcome.wall_s:.0f} s, peak RSS {outcome.peak_rss_mb:.0f} MB; "
        f"run folder: {outcome.folder}\n"
    )
    return 0 if outcome.status == "finished" else 130
