"""Prepare one dataset split end to end: load it (`loading`), build its rows (`rows`), write the parquet
file and the rejected rows, and record the split in ``manifest.json``.

    prepare_split(SOURCES["gsm8k"], "train", "~/data/gsm8k")
        -> ~/data/gsm8k/train.parquet, train.rejected.jsonl (if any), manifest.json

The row schema and the rejection reasons are `coba_verl.data.rows`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coba_verl.data.loading import load_split
from coba_verl.data.rows import SCHEMA, build_rows
from coba_verl.data.sources import SourceSpec

__all__ = ["SplitReport", "prepare_split", "write_rows"]

logger = logging.getLogger(__name__)


@dataclass
class SplitReport:
    """What one written split contains and what was left out (also saved in ``manifest.json``)."""

    dataset: str
    split: str
    path: str
    data_source: str
    origin: str
    rows_read: int = 0
    rows_written: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    index_min: int | None = None
    index_max: int | None = None
    sha256: str = ""
    #: Rows written with an ``extra_info.pass_rate`` (None: no ``--pass-rate-field``).
    with_pass_rate: int | None = None

    @property
    def rows_rejected(self) -> int:
        """Rows left out, all reasons together (``rows_read == rows_written + rows_rejected``)."""
        return sum(self.rejected.values())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file in the same directory, then rename: no half-written output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_rows(rows: list[dict[str, Any]], path: str | os.PathLike[str]) -> str:
    """Write rows with :data:`SCHEMA` to a parquet file; returns its sha256."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    target = Path(path)
    _atomic_write(target, lambda tmp: pq.write_table(table, tmp))
    return _sha256(target)


def _write_rejected(rejected: list[dict[str, Any]], path: Path) -> None:
    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as handle:
            for record in rejected:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    _atomic_write(path, write)


def prepare_split(
    spec: SourceSpec,
    split: str,
    output_dir: str | os.PathLike[str],
    *,
    local_path: str | os.PathLike[str] | None = None,
    hub_id: str | None = None,
    hub_config: str | None = None,
    index_offset: int = 0,
    limit: int | None = None,
    question_field: str | None = None,
    answer_field: str | None = None,
    local_key: str | None = None,
    pass_rate_field: str | None = None,
) -> SplitReport:
    """Load, build and write ``<output_dir>/<split>.parquet`` for one dataset split.

    Rejected rows go to ``<output_dir>/<split>.rejected.jsonl`` and are counted in the report.
    ``limit`` reads only the first rows of the source (for smoke runs; indices stay positional).
    ``local_key`` is passed to `load_split` (the ``--local-path`` form its hub message suggests).
    ``pass_rate_field`` names the source column copied to ``extra_info.pass_rate`` (`build_rows`);
    rows without a value are counted in a warning.
    """
    if index_offset < 0:
        raise ValueError(f"index_offset={index_offset} must be >= 0.")
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit} must be >= 1 (or None to read every row).")
    dataset, origin = load_split(
        spec, split, local_path=local_path, hub_id=hub_id, hub_config=hub_config, local_key=local_key
    )
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    fields = (
        (question_field,) if question_field else spec.question_fields,
        (answer_field,) if answer_field else tuple(f for f, _ in spec.answer_fields),
        spec.context_fields,
        spec.solution_fields,
        spec.id_fields,
        (pass_rate_field,) if pass_rate_field else (),
    )
    needed = {f.split(".")[0] for group in fields for f in group}
    columns = list(dataset.column_names)
    if set(columns) - needed:  # decode only what is read: DAPO-Math-17K has ~1.8M rows
        dataset = dataset.select_columns([c for c in columns if c in needed])
    built = build_rows(
        spec,
        dataset,
        split=split,
        index_offset=index_offset,
        columns=columns,
        question_field=question_field,
        answer_field=answer_field,
        pass_rate_field=pass_rate_field,
    )
    out = Path(output_dir).expanduser()
    path = out / f"{split}.parquet"
    report = SplitReport(
        dataset=spec.name, split=split, path=str(path), data_source=spec.data_source, origin=origin
    )
    rows = built.rows
    report.rows_read = built.n_read
    report.rejected = dict(sorted(built.counts.items()))
    if not rows:
        raise ValueError(
            f"{spec.name}/{split}: all {built.n_read} rows were rejected ({report.rejected}); nothing "
            "written. Check --question-field / --answer-field against the source's columns."
        )
    report.sha256 = write_rows(rows, path)
    report.rows_written = len(rows)
    if pass_rate_field is not None:
        report.with_pass_rate = len(rows) - built.without_pass_rate
        log = logger.warning if built.without_pass_rate else logger.info
        log(
            "%s/%s: %d of %d rows carry a pass rate from %s in extra_info.pass_rate (use "
            "coba.prior_field=extra_info.pass_rate); the others start without a prior",
            spec.name, split, report.with_pass_rate, len(rows), pass_rate_field,
        )  # fmt: skip
    report.index_min, report.index_max = index_offset, index_offset + len(rows) - 1
    rejected_path = out / f"{split}.rejected.jsonl"
    if report.rows_rejected:
        logger.warning(
            "%s/%s: %d of %d rows rejected %s",
            spec.name,
            split,
            report.rows_rejected,
            built.n_read,
            report.rejected,
        )
    if built.rejected:
        _write_rejected(built.rejected, rejected_path)
        logger.warning(
            "%s/%s: rejected rows other than exact duplicates are listed in %s",
            spec.name,
            split,
            rejected_path,
        )
    elif rejected_path.exists():  # a stale list from an earlier run would mislead
        rejected_path.unlink()
    _update_manifest(out / "manifest.json", report)
    return report


def _update_manifest(path: Path, report: SplitReport) -> None:
    """Record the split's report under ``splits[<split>]`` in ``manifest.json``."""
    import verl

    manifest: dict[str, Any] = {}
    if path.exists():
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            manifest = {}
    manifest.setdefault("splits", {})[report.split] = asdict(report)
    manifest["verl_version"] = getattr(verl, "__version__", "unknown")
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
