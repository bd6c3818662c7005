"""`run_lab`: every (seed, run) of a `LabConfig`, written to a run folder as it goes.

Run folder::

    config.json, config.yaml   the resolved LabConfig, plus status (running/finished/interrupted)
    metrics.jsonl              one row per run and step (step 0 = the warm start's evaluation), flushed
                               as it goes
    metrics.csv                the same rows' scalar columns, written at the end
    snapshots.jsonl            (p_hat_i, B_i) of every prompt at a few steps, per run
    warmstart.json             per seed: time, held-out accuracy per level, pass-rate histogram
    summary.txt, summary.json  the text printed at the end (`coba_verl.lab.report.format_summary`)
    plots/*.png                see `coba_verl.lab.plots`

Rows are appended and flushed step by step, and the summary, config status and plots are
written in a ``finally`` block, so Ctrl-C leaves a folder that every reader above accepts.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import platform
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from coba_verl.lab.composition import PASS_BINS, pass_histogram
from coba_verl.lab.config import LabConfig
from coba_verl.lab.evaluation import evaluate
from coba_verl.lab.plots import write_plots
from coba_verl.lab.report import format_summary, regime, summarise
from coba_verl.lab.runner import train_run
from coba_verl.lab.seeds import new_model, prepare_seed

__all__ = ["LabOutcome", "RunFolder", "run_lab", "read_metrics"]

logger = logging.getLogger(__name__)


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    return x


def _from_json(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (float("nan") if v is None else v) for k, v in row.items()}


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """Rows of ``metrics.jsonl`` (None -> NaN)."""
    path = Path(folder) / "metrics.jsonl"
    if not path.exists():
        return []
    return [_from_json(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


class RunFolder:
    """Appends metrics rows to JSONL and CSV as they arrive; writes the other files on demand."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []
        self.snaps: list[dict[str, Any]] = []
        self._jsonl: TextIO = open(self.path / "metrics.jsonl", "w")  # noqa: SIM115 - closed in close()
        self._snap: TextIO = open(self.path / "snapshots.jsonl", "w")  # noqa: SIM115

    def add_row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self._jsonl.write(json.dumps({k: _jsonable(v) for k, v in row.items()}) + "\n")
        self._jsonl.flush()

    def add_snapshot(self, snap: dict[str, Any]) -> None:
        self.snaps.append(snap)
        self._snap.write(json.dumps({k: _jsonable(v) for k, v in snap.items()}).replace("NaN", "null") + "\n")
        self._snap.flush()

    def write_json(self, name: str, obj: Any) -> None:
        (self.path / name).write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")

    def write_config(self, cfg: LabConfig, status: str, extra: dict[str, Any]) -> None:
        doc = json.loads(json.dumps({"status": status, "lab": cfg.to_dict(), **extra}, default=_jsonable))
        self.write_json("config.json", doc)
        (self.path / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    def close(self) -> None:
        """Close the JSONL files; write ``metrics.csv`` (every scalar column, in first-seen order)."""
        for f in (self._jsonl, self._snap):
            f.close()
        columns = list(dict.fromkeys(k for r in self.rows for k, v in r.items() if not isinstance(v, list)))
        with open(self.path / "metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            for r in self.rows:
                writer.writerow(
                    {k: "" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                )


@dataclass
class LabOutcome:
    """What `run_lab` returns: the folder, the summary rows and table, and how it ended."""

    folder: Path
    summary: list[dict[str, Any]]
    regime: list[dict[str, Any]]
    table: str
    status: str
    wall_s: float
    peak_rss_mb: float


def _peak_rss_mb() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru / (1024 * 1024) if sys.platform == "darwin" else ru / 1024


def run_lab(
    cfg: LabConfig,
    out_dir: Path,
    *,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> LabOutcome:
    """Warm start each seed, train every run, write the folder; Ctrl-C ends early but cleanly.

    The caller sets torch's thread count (the CLI uses ``cfg.threads``); the warm-start cache
    key includes it, because float reductions may differ between thread counts.
    """
    start = time.perf_counter()
    folder = RunFolder(out_dir)
    env = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "command": " ".join(sys.argv),
    }
    folder.write_config(cfg, "running", {"env": env})
    warm_info: dict[str, Any] = {}
    status = "interrupted"
    specs = cfg.run_specs
    bar = tqdm(disable=True)
    try:
        for i_seed, seed in enumerate(cfg.seeds):
            ctx = prepare_seed(cfg, seed, cache_dir=cache_dir)
            model = new_model(cfg, ctx.tok, seed)
            model.load_state_dict(ctx.warm_state)
            model.to(cfg.device).eval()
            ev0 = evaluate(model, ctx, cfg.eval_samples)
            del model
            warm_info[str(seed)] = {
                "seconds": ctx.warm_seconds,
                "cached": ctx.warm_cached,
                **ctx.info,
                "eval_acc": ev0.acc,
                "eval_acc_per_level": ev0.per_level,
                "eval_pass_rate_histogram": {
                    name: count / len(ev0.pass_rates)
                    for name, count in zip(PASS_BINS, pass_histogram(ev0.pass_rates), strict=True)
                },
            }
            folder.write_json("warmstart.json", warm_info)
            logger.info(
                "seed %d: warm start %.1fs%s, held-out accuracy %.3f, pass-rate histogram %s",
                seed,
                ctx.warm_seconds,
                " (cached)" if ctx.warm_cached else "",
                ev0.acc,
                warm_info[str(seed)]["eval_pass_rate_histogram"],
            )
            folder.add_row({"run": "warm_start", "seed": seed, "step": 0, "rollouts": 0, "eval_acc": ev0.acc})
            # one bar per seed, started after the warm start so its rate counts GRPO steps only
            bar = tqdm(total=len(specs) * cfg.steps, disable=not progress, unit="step", dynamic_ncols=True)
            for spec in specs:
                bar.set_description(f"seed {seed} ({i_seed + 1}/{len(cfg.seeds)}) {spec.label}")
                last_acc = [ev0.acc]

                def on_step(row: dict[str, Any], last_acc: list[float] = last_acc, bar: Any = bar) -> None:
                    if not math.isnan(row["eval_acc"]):
                        last_acc[0] = row["eval_acc"]
                    bar.update(1)
                    shown = {"held_out": f"{last_acc[0]:.3f}", "F": f"{row['fail_rate_avg3']:.2f}"}
                    if not math.isnan(row["alpha"]):
                        shown.update(α=f"{row['alpha']:.2f}", β=f"{row['beta']:.2f}")
                    bar.set_postfix(shown, refresh=False)

                train_run(cfg, ctx, spec, folder.add_row, snapshot=folder.add_snapshot, on_step=on_step)
            bar.close()
        status = "finished"
    except KeyboardInterrupt:
        logger.warning("interrupted: writing a partial run folder to %s", folder.path)
    except Exception:
        status = "failed"
        raise
    finally:
        bar.close()
        previous = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not truncate the folder
        except ValueError:  # not the main thread
            previous = None
        try:
            folder.close()
            summary, reg = summarise(folder.rows), regime(folder.rows)
            table = format_summary(summary, reg)
            wall = time.perf_counter() - start
            peak = _peak_rss_mb()
            (folder.path / "summary.txt").write_text(table + "\n")
            folder.write_json(
                "summary.json",
                {"status": status, "wall_s": wall, "peak_rss_mb": peak, "runs": summary, "regime": reg},
            )
            try:
                write_plots(folder.rows, folder.snaps, folder.path / "plots", k=cfg.eval_samples)
            except Exception:  # the metrics are safe on disk; a plotting bug must not hide them
                logger.exception("plotting failed; metrics and summary are in %s", folder.path)
            folder.write_config(cfg, status, {"env": env, "wall_s": wall, "peak_rss_mb": peak})
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
    return LabOutcome(folder.path, summary, reg, table, status, wall, peak)
