"""``python -m coba_verl.data``: write veRL parquet files for the recipes, or check existing ones.

    python -m coba_verl.data gsm8k --output-dir ~/data/coba/gsm8k
    python -m coba_verl.data dapo_math --output-dir ~/data/coba/dapo_math
    python -m coba_verl.data dapo_eval --output-dir ~/data/coba        # one folder per benchmark
    python -m coba_verl.data gsm8k --local-path train=gsm8k_train.jsonl --local-path test=test.jsonl
    python -m coba_verl.data check ~/data/coba/gsm8k/train.parquet ~/data/coba/gsm8k/test.parquet

``coba-verl data ...`` is the same command. A dataset writes ``<output-dir>/<split>.parquet``
(plus ``manifest.json`` and, when rows were rejected, ``<split>.rejected.jsonl``); a group writes
each member to ``<output-dir>/<member>/``. ``check`` reports what would break training (see
`check_files`) and, as notes that do not change the exit status, evaluation prompts that also
appear in the training files. Exit status: 0 on success, 1 when a split cannot be prepared,
``--strict`` finds rejected rows or ``check`` finds problems, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from coba_verl.data.checks import check_files, train_test_overlap
from coba_verl.data.prepare import SplitReport, prepare_split
from coba_verl.data.sources import GROUPS, SOURCES, SourceSpec, resolve
from coba_verl.refusal import CobaRefusal

__all__ = ["main", "build_parser"]

logger = logging.getLogger("coba_verl.data")

DEFAULT_ROOT = Path("~/data/coba")


def build_parser(prog: str = "coba-verl data") -> argparse.ArgumentParser:
    """The argument parser (its epilog lists datasets and groups); ``prog`` names the command."""
    choices = [*SOURCES, *GROUPS, "check"]
    listing = "\n".join(f"  {s.name:<14} {s.description}" for s in SOURCES.values())
    groups = "\n".join(f"  {g:<14} {', '.join(m)}" for g, m in GROUPS.items())
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write veRL parquet files (data_source, chat prompt, ability, reward_model, "
        "extra_info.index) for CoBA-RL recipes, or check existing files.",
        epilog=f"datasets:\n{listing}\ngroups:\n{groups}\n  {'check':<14} check the parquet FILES given "
        "(training indices unique, gold answers score 1.0; notes test prompts also in training)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dataset", choices=choices, metavar="DATASET", help="a dataset, a group, or 'check'")
    parser.add_argument("files", nargs="*", metavar="FILES", help="parquet files (only with 'check')")
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where to write; a dataset writes <dir>/<split>.parquet, a group <dir>/<member>/... "
        "(default ~/data/coba/<dataset> for a dataset, ~/data/coba for a group)",
    )
    parser.add_argument(
        "--local-path",
        action="append",
        default=[],
        metavar="[KEY=]PATH",
        help="read from a local file (parquet/jsonl/json/csv), save_to_disk folder or hub snapshot "
        "instead of the hub. KEY is a split (train=, test=) or, for a group, a member (amc23=). "
        "A bare PATH serves a dataset with one split. Repeatable.",
    )
    parser.add_argument("--splits", default=None, help="comma-separated subset of the splits to write")
    parser.add_argument(
        "--index-offset",
        type=int,
        default=0,
        help="extra_info.index of the first row (give training files used together disjoint ranges)",
    )
    parser.add_argument("--hub-id", default=None, help="read this hub dataset instead of the default")
    parser.add_argument("--hub-config", default=None, help="hub config name to use with --hub-id")
    parser.add_argument("--question-field", default=None, help="source column holding the problem")
    parser.add_argument("--answer-field", default=None, help="source column holding the final answer")
    parser.add_argument(
        "--pass-rate-field",
        default=None,
        help="source column holding each problem's pass rate in [0, 1], written to extra_info.pass_rate "
        "(train with coba.prior_field=extra_info.pass_rate)",
    )
    parser.add_argument("--limit", type=int, default=None, help="read only the first N source rows")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any row was rejected")
    parser.add_argument(
        "--no-score-gold", action="store_true", help="'check' only: skip scoring gold answers through veRL"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    return parser


def _local_paths(raw: list[str], specs: tuple[SourceSpec, ...], group: bool) -> dict[str, dict[str, str]]:
    """``--local-path`` values -> {dataset: {split: path}}; raises ValueError on an ambiguous one."""
    out: dict[str, dict[str, str]] = {s.name: {} for s in specs}
    for item in raw:
        key, sep, path = item.partition("=")
        if not sep:
            key, path = "", item
        if group:
            if key not in out:
                raise CobaRefusal(
                    f"--local-path {item}: for a group, prefix the path with a member, one of {sorted(out)}."
                )
            spec = next(s for s in specs if s.name == key)
            if len(spec.splits) != 1:
                raise CobaRefusal(
                    f"--local-path {item}: {key} has splits {sorted(spec.splits)}; prepare it on its own."
                )
            out[key][next(iter(spec.splits))] = path
            continue
        spec = specs[0]
        if not key:
            if len(spec.splits) != 1:
                raise CobaRefusal(
                    f"--local-path {item}: {spec.name} has splits {sorted(spec.splits)}; "
                    f"write SPLIT=PATH, e.g. --local-path train={item}."
                )
            key = next(iter(spec.splits))
        if key not in spec.splits:
            raise CobaRefusal(
                f"--local-path {item}: {spec.name} has no split {key!r}; "
                f"its splits are {sorted(spec.splits)}."
            )
        out[spec.name][key] = path
    return out


def _print_table(reports: list[SplitReport]) -> None:
    """Print one line per written split to stdout: the CLI's user-facing summary."""
    header = ("dataset", "split", "read", "written", "rejected", "index", "data_source", "path")
    lines = [header]
    for r in reports:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(r.rejected.items())) or "0"
        lines.append(
            (
                r.dataset,
                r.split,
                str(r.rows_read),
                str(r.rows_written),
                reasons,
                f"{r.index_min}..{r.index_max}",
                r.data_source,
                r.path,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _run_check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``check FILES...``: print the problems (the first 50), then overlap notes; return the status."""
    if not args.files:
        parser.error("check: give one or more parquet files")
    for name in args.files:
        if not Path(name).expanduser().is_file():
            parser.error(f"check: no such file {name}")
    problems = check_files(args.files, score_gold=not args.no_score_gold)
    for problem in problems[:50]:
        print(problem)
    if len(problems) > 50:
        print(f"... and {len(problems) - 50} more")
    overlap = train_test_overlap(args.files)
    for line in overlap[:20]:
        print(f"note: {line}")
    if len(overlap) > 20:
        print(f"note: ... and {len(overlap) - 20} more")
    print(
        f"checked {len(args.files)} file(s): {len(problems)} problem(s); "
        f"{len(overlap)} evaluation prompt(s) also in the training files"
    )
    return 1 if problems else 0


def _log_to_stderr(quiet: bool) -> None:
    """Log lines to stderr, each once: the hub libraries (``huggingface_hub``, ``datasets``) print
    through handlers of their own (or logging's last resort), so they must not also pass their
    records on to the root handler."""
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in ("huggingface_hub", "datasets"):
        logging.getLogger(name).propagate = False


def main(argv: list[str] | None = None, prog: str = "coba-verl data") -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    ``prog`` is the command named in usage lines (``python -m coba_verl.data`` passes its own).
    """
    parser = build_parser(prog)
    # intermixed: options may come after the subcommand and between files (check --no-score-gold F)
    args = parser.parse_intermixed_args(argv)
    _log_to_stderr(args.quiet)
    if args.dataset == "check":
        return _run_check(parser, args)
    if args.files:
        parser.error(f"unexpected arguments {args.files}; only 'check' takes files")

    group = args.dataset in GROUPS
    try:
        specs = resolve(args.dataset)
        local = _local_paths(args.local_path, specs, group)
        if group and (args.hub_id or args.question_field or args.answer_field or args.pass_rate_field):
            raise CobaRefusal(
                "--hub-id, --question-field, --answer-field and --pass-rate-field apply to one dataset, "
                "not a group."
            )
        wanted = set(args.splits.split(",")) if args.splits else None
        if args.index_offset < 0:
            raise CobaRefusal(f"--index-offset {args.index_offset}: give an integer >= 0.")
        if args.limit is not None and args.limit < 1:
            raise CobaRefusal(f"--limit {args.limit}: give an integer >= 1, or omit it to read every row.")
    except CobaRefusal as err:
        parser.error(str(err))

    root = (args.output_dir or (DEFAULT_ROOT if group else DEFAULT_ROOT / args.dataset)).expanduser()
    todo = []
    for spec in specs:
        splits = [s for s in spec.splits if wanted is None or s in wanted]
        if wanted is not None and not group and not splits:
            parser.error(f"--splits {args.splits}: {spec.name} has splits {sorted(spec.splits)}")
        todo += [(spec, split) for split in splits]
    reports: list[SplitReport] = []
    for spec, split in todo:
        try:
            reports.append(
                prepare_split(
                    spec,
                    split,
                    root / spec.name if group else root,
                    local_path=local[spec.name].get(split),
                    hub_id=args.hub_id,
                    hub_config=args.hub_config,
                    index_offset=args.index_offset,
                    limit=args.limit,
                    question_field=args.question_field,
                    answer_field=args.answer_field,
                    local_key=spec.name if group else None,
                    pass_rate_field=args.pass_rate_field,
                )
            )
        except (RuntimeError, OSError, ValueError) as err:  # no hub, missing file, unusable source
            logger.debug("preparing %s/%s failed", spec.name, split, exc_info=True)
            print(f"{parser.prog}: error: {err}", file=sys.stderr)
            if reports:
                _print_table(reports)  # what was written before the failure
            return 1
    _print_table(reports)
    rejected = sum(r.rows_rejected for r in reports)
    if rejected and args.strict:
        logger.error("--strict: %d row(s) rejected; see the <split>.rejected.jsonl files.", rejected)
        return 1
    return 0
