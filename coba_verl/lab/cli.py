"""``coba-verl lab`` / ``python -m coba_verl.lab``: compare allocation strategies on CPU in minutes.

Examples::

    coba-verl lab                                   # the default scenario: uniform, knapsack, coba
    coba-verl lab --scenario paper --seeds 0,1,2    # the paper's regime (see docs/lab.md)
    coba-verl lab --runs uniform,coba,coba@0.5 --steps 64
    coba-verl lab --coba kappa=7 --coba window=1    # allocator knobs (CobaConfig fields)
    coba-verl lab --runs uniform,coba,coba:proportional   # coba.group_weight=proportional for one run
    coba-verl lab --coba group_weight=proportional        # ... or for every run (the default: equal)
    coba-verl lab --runs coba,coba+prior            # the tracker starts from k samples of the warm start
    coba-verl lab --scenario dapo                   # DAPO dynamic sampling: M x n rollouts with a spread
    coba-verl lab --scenario worked --runs uniform,coba,coba+token_budget   # a token budget
    coba-verl lab --update-rows signal              # the update skips rows with zero advantage

Every `LabConfig` field is a flag (``n_train`` -> ``--n-train``) whose help is the field's line of
the `LabConfig` docstring; a flag left out takes the scenario's value.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

from coba_verl.core.config import CobaConfig
from coba_verl.lab.config import UPDATE_ROWS, LabConfig, parse_run_label
from coba_verl.lab.scenarios import DEFAULT_SCENARIO, SCENARIOS
from coba_verl.refusal import CobaRefusal

__all__ = ["main", "build_parser"]

logger = logging.getLogger("coba_verl.lab")

_SPECIAL = ("scenario", "coba")  # flags written by hand below
_CHOICES: dict[str, tuple[str, ...]] = {"update_rows": UPDATE_ROWS}  # flags whose values are listed


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coba_verl" / "lab"


def _field_help() -> dict[str, str]:
    """Field name -> its (joined) line from the ``Args:`` section of `LabConfig`'s docstring."""
    args = (LabConfig.__doc__ or "").split("Args:", 1)[1]
    out: dict[str, str] = {}
    name = None
    for line in args.splitlines():
        m = re.match(r"^ {8}(\w+): (.*)$", line)
        if m:
            name, out[m[1]] = m[1], m[2]
        elif name and line.strip():
            out[name] += " " + line.strip()
    return out


def _show(value: Any) -> str:
    """A value as the user would type it: lists and dicts comma-separated, no Python brackets."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{v:g}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _parser_for(name: str, default: Any) -> Any:
    """The argparse ``type`` of a LabConfig field, from its default's type."""

    def parse(text: str) -> Any:
        items = [x.strip() for x in text.split(",") if x.strip()]
        try:
            if isinstance(default, dict):  # "2+1:1,3*2:0.5" (weight 1 when left out)
                value: Any = {k: float(w or 1) for k, _, w in (x.partition(":") for x in items)}
            elif isinstance(default, list) and default and isinstance(default[0], int):
                value = [int(x) for x in items]
            elif isinstance(default, list):
                value = items
            elif isinstance(default, bool):
                value = text.lower() in ("1", "true", "yes")
            else:
                value = type(default)(text)
        except ValueError:
            example = _show(default)
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid value; e.g. {example}") from None
        if isinstance(value, (list, dict)) and not value:
            raise argparse.ArgumentTypeError(f"{text!r} names nothing; e.g. {_show(default)}")
        if name == "runs":
            for label in value:
                try:
                    parse_run_label(label)
                except CobaRefusal as err:
                    raise argparse.ArgumentTypeError(str(err)) from None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
        return value

    parse.__name__ = type(default).__name__
    return parse


def _coba_item(text: str) -> tuple[str, Any]:
    """``kappa=7`` -> ("kappa", 7.0), typed by the CobaConfig field's default."""
    # the lab has no pass-rate priors: coba_verl.records.priors reads a training set's rows or a file;
    # its DAPO cut is --dapo-cut (LabConfig.dapo_cut), not coba.cut_sessions; its sized waves are the
    # run option +size, not coba.size_refills (veRL's)
    known = {
        f.name: f
        for f in fields(CobaConfig)
        if f.name not in ("strategy", "cut_sessions", "size_refills") and not f.name.startswith("prior_")
    }
    key, sep, raw = (x.strip() for x in text.partition("="))
    if not sep or key not in known:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE with KEY one of {', '.join(sorted(known))} (e.g. kappa=7)"
        )
    default = known[key].default
    if raw.lower() in ("null", "none"):
        return key, None
    if isinstance(default, str):
        return key, raw
    try:
        return key, int(raw) if isinstance(default, int) else float(raw)
    except ValueError:
        kind = "an integer" if isinstance(default, int) else "a number"
        raise argparse.ArgumentTypeError(
            f"--coba {key}={raw!r}: {key} must be {kind}, e.g. {key}={default}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    presets = {name: LabConfig.from_scenario(name) for name in SCENARIOS}
    base = presets[DEFAULT_SCENARIO]
    p = argparse.ArgumentParser(
        prog="coba-verl lab",
        description=(
            "CPU lab: warm-start a tiny Qwen2 on generated arithmetic, then train it with GRPO "
            "(veRL's advantage and policy loss) under several rollout-allocation strategies at "
            "equal budget, and compare held-out accuracy. A flag left out takes the scenario's value."
        ),
    )
    p.add_argument(
        "--scenario",
        choices=list(SCENARIOS),
        default=DEFAULT_SCENARIO,
        help=f"named preset of every setting below (default {DEFAULT_SCENARIO}; see docs/lab.md)",
    )
    helps = _field_help()
    for f in fields(LabConfig):
        if f.name in _SPECIAL:
            continue
        default = getattr(base, f.name)
        values = {name: _show(getattr(cfg, f.name)) for name, cfg in presets.items()}
        shown = (
            values[DEFAULT_SCENARIO]
            if len(set(values.values())) == 1
            else "; ".join(f"{k}: {v}" for k, v in values.items())
        )
        text = f"{helps.get(f.name, '')} [default {shown}]".replace("%", "%%")
        choices = _CHOICES.get(f.name)
        metavar = "A,B" if isinstance(default, (list, dict)) else type(default).__name__.upper()
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=_parser_for(f.name, default),
            default=None,
            choices=choices,
            metavar=None if choices else metavar,  # argparse lists the choices
            help=text,
        )
    p.add_argument(
        "--coba",
        type=_coba_item,
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="allocator knob (a CobaConfig field), repeatable, e.g. --coba kappa=7",
    )
    p.add_argument("--out", type=Path, default=None, help="run folder [default runs/lab-YYYYmmdd-HHMMSS]")
    p.add_argument(
        "--cache-dir", type=Path, default=_default_cache(), help="warm-start cache [default %(default)s]"
    )
    p.add_argument("--no-cache", action="store_true", help="always recompute the warm start")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the progress bar [default: only when stderr is a terminal, so a redirected log "
        "gets no bar]",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    return p


def config_from_args(args: argparse.Namespace) -> LabConfig:
    """The scenario's `LabConfig` with every flag the user gave on top (ValueError when invalid)."""
    given = {
        f.name: getattr(args, f.name)
        for f in fields(LabConfig)
        if f.name not in _SPECIAL and getattr(args, f.name, None) is not None
    }
    if args.coba is not None:
        given["coba"] = {**SCENARIOS[args.scenario].get("coba", {}), **dict(args.coba)}
    return LabConfig.from_scenario(args.scenario, **given)


def _progress(args: argparse.Namespace) -> bool:
    """``--progress`` / ``--no-progress`` when given, else whether stderr is a terminal: tqdm redraws
    by writing carriage returns, which a redirected log keeps as one line per update."""
    if args.progress is not None:
        return bool(args.progress)
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def _unique_dir(path: Path) -> Path:
    if not path.exists():
        return path
    i = 1
    while path.with_name(f"{path.name}-{i}").exists():
        i += 1
    return path.with_name(f"{path.name}-{i}")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the lab, print the summary; returns the exit code
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

    from coba_verl.lab.experiment import run_lab

    try:
        cfg = config_from_args(args)
    except CobaRefusal as err:
        parser.error(str(err))
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {cfg.device}: torch sees no CUDA device here; use --device cpu.")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = args.out if args.out is not None else _unique_dir(Path("runs") / time.strftime("lab-%Y%m%d-%H%M%S"))
    outcome = run_lab(cfg, out, cache_dir=None if args.no_cache else args.cache_dir, progress=_progress(args))
    sys.stdout.write(outcome.table + "\n")
    sys.stdout.write(
        f"\n{outcome.status} in {outcome.wall_s:.0f} s, peak RSS {outcome.peak_rss_mb:.0f} MB; "
        f"run folder: {outcome.folder}\n"
    )
    return 0 if outcome.status == "finished" else 130
