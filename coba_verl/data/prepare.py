"""Read a source (Hugging Face hub or local file), build veRL rows, and write them as parquet.

One row of every written file (the schema of veRL's own preprocessors, fixed so that files of
different datasets concatenate in one ``data.val_files`` list)::

    data_source    str                       selects the veRL scorer (coba_verl.data.sources)
    prompt         list<{role, content}>     one user turn: question + the style's instruction
    ability        str                       "math"
    reward_model   {style: "rule", ground_truth: str}
    extra_info     {split, index: int64, source_id, question, solution}

``extra_info.index`` is the row's position among the rows kept, plus ``index_offset``: a stable
integer (same source, same index), unique within the file. CoBA-RL keys its per-prompt tracker
by it, so training files used together need disjoint offsets (``--index-offset``).

Rows are never dropped silently. A row is rejected and counted by reason (in the report and
``manifest.json``) when it has the faults below; all but exact ``duplicate`` rows are also listed
in ``<split>.rejected.jsonl`` (DAPO-Math-17K alone repeats ~1.77M rows):

* ``no_question``: no non-empty problem text;
* ``no_answer``: no parsable ground truth (e.g. a GSM8K solution without ``####``);
* ``unscorable_answer``: a ground truth that veRL's routed scorer cannot award 1.0 even to a
  response stating it verbatim (the prompt could never be solved);
* ``duplicate``: a repeated problem in a de-duplicated set (first occurrence kept);
* ``duplicate_conflict``: a repeated problem whose answer differs from the kept one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coba_verl.data.formats import (
    DAPO_SUFFIX,
    AnswerKind,
    PromptStyle,
    gold_response,
    parse_answer,
    question_text,
    render_prompt,
)
from coba_verl.data.reward import OWN_TASKS, compute_score, score_value
from coba_verl.data.sources import SourceSpec

__all__ = [
    "SCHEMA",
    "REJECT_REASONS",
    "Built",
    "SplitReport",
    "load_split",
    "build_rows",
    "write_rows",
    "prepare_split",
    "check_files",
    "hub_unreachable",
    "train_test_overlap",
]

logger = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("split", pa.string()),
                    ("index", pa.int64()),
                    ("source_id", pa.string()),
                    ("question", pa.string()),
                    ("solution", pa.string()),
                ]
            ),
        ),
    ]
)
REJECT_REASONS: tuple[str, ...] = (
    "no_question",
    "no_answer",
    "unscorable_answer",
    "duplicate",
    "duplicate_conflict",
)
_LOCAL_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


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

    @property
    def rows_rejected(self) -> int:
        """Rows left out, all reasons together (``rows_read == rows_written + rows_rejected``)."""
        return sum(self.rejected.values())


@dataclass
class Built:
    """The result of :func:`build_rows`.

    Attributes:
        rows: Kept rows, in source order, ``extra_info.index = index_offset, +1, ...``.
        rejected: One record per listed rejected row: ``reason``, source ``position``, a preview.
        counts: Rejected rows per reason (all reasons, ``duplicate`` included).
        n_read: Source records read.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    n_read: int = 0


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


#: Seconds to wait for the hub before saying it is unreachable (instead of ~25 s of retries).
HUB_PROBE_TIMEOUT_S = 5.0
_hub_probes: dict[str, str | None] = {}


def hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the Hugging Face hub cannot be reached, or ``None`` when it answers (once per process).

    One HEAD request to the endpoint (``HF_ENDPOINT``, proxies from the environment); any HTTP
    answer, even an error status, counts as reachable. Skipped (``None``) under ``HF_HUB_OFFLINE``,
    where ``datasets`` reads its local cache only.
    """
    import datasets
    from huggingface_hub import constants

    if datasets.config.HF_HUB_OFFLINE:
        return None
    endpoint = constants.ENDPOINT
    if endpoint not in _hub_probes:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
            _hub_probes[endpoint] = None
        except urllib.error.HTTPError:  # the hub answered
            _hub_probes[endpoint] = None
        except (urllib.error.URLError, OSError) as err:  # DNS, refused, timeout
            reason = getattr(err, "reason", err)
            _hub_probes[endpoint] = f"{endpoint} is unreachable ({reason})"
    return _hub_probes[endpoint]


def load_split(
    spec: SourceSpec,
    split: str,
    *,
    local_path: str | os.PathLike[str] | None = None,
    hub_id: str | None = None,
    hub_config: str | None = None,
    local_key: str | None = None,
) -> tuple[Any, str]:
    """Load one split as a ``datasets.Dataset``; returns it with a description of its origin.

    Without ``local_path`` this is ``datasets.load_dataset(hub_id, hub_config, split=...)``, after
    a quick check that the hub answers at all (`hub_unreachable`). ``local_path`` may be a
    ``.parquet`` / ``.jsonl`` / ``.json`` / ``.csv`` file (read whole as this split), a directory
    written by ``save_to_disk``, or a downloaded hub snapshot. ``local_key`` is the KEY of
    ``--local-path KEY=FILE`` that serves this split (default: the split; a group uses the member
    name); it only shapes the message when the hub fails.

    Raises:
        RuntimeError: the hub is unreachable or cannot serve the split; the message gives the
            ``--local-path`` form that works instead.
    """
    import datasets

    if split not in spec.splits:
        raise ValueError(f"{spec.name} has no split {split!r}; its splits are {sorted(spec.splits)}.")
    hub_split = spec.splits[split]
    if local_path is None:
        repo = hub_id or spec.hub_id
        config = hub_config if hub_config is not None else spec.hub_config
        origin = f"hf://{repo}" + (f" ({config})" if config else "") + f" split={hub_split}"
        instead = (
            f"Download it elsewhere and pass --local-path {local_key or split}=FILE "
            "(parquet/jsonl/json/csv) or a hub snapshot directory"
        )
        down = hub_unreachable()
        if down:
            raise RuntimeError(
                f"Could not load {origin} for {spec.name}: the Hugging Face hub at {down}. {instead}; "
                "or, if an earlier run cached it, set HF_HUB_OFFLINE=1 to read the cache."
            )
        logger.info("Loading %s from the Hugging Face hub: %s", spec.name, origin)
        try:
            return datasets.load_dataset(repo, config, split=hub_split), origin
        except Exception as err:  # renamed, gated, hub error: say how to continue without the hub
            raise RuntimeError(f"Could not load {origin} for {spec.name}: {err}. {instead}.") from err

    path = Path(local_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"--local-path {path} does not exist.")
    origin = str(path.resolve())
    if path.is_file():
        builder = _LOCAL_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(
                f"--local-path {path} has suffix {path.suffix!r}; use one of {sorted(_LOCAL_BUILDERS)}."
            )
        return datasets.load_dataset(builder, data_files=str(path), split="train"), origin
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if hub_split not in loaded:
                raise ValueError(f"{path} has splits {sorted(loaded)}, not {hub_split!r}.")
            loaded = loaded[hub_split]
        return loaded, origin
    config = hub_config if hub_config is not None else spec.hub_config
    return datasets.load_dataset(str(path), config, split=hub_split), origin


# ---------------------------------------------------------------------------------------------
# Building rows
# ---------------------------------------------------------------------------------------------


def _get(row: Mapping[str, Any], name: str) -> Any:
    """``row["a"]["b"]`` for ``name="a.b"``; ``None`` when any part is missing."""
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _has_column(columns: Iterable[str], name: str) -> bool:
    """Whether the top-level column of a possibly dotted field name is among ``columns``."""
    return name.split(".")[0] in set(columns)


def _require_columns(
    spec: SourceSpec,
    columns: list[str],
    question_fields: tuple[str, ...],
    answer_fields: tuple[tuple[str, AnswerKind], ...],
) -> None:
    """Fail before any row is read when no candidate column exists at all (a schema mismatch)."""
    if not any(_has_column(columns, f) for f in question_fields):
        raise ValueError(
            f"{spec.name}: none of the question columns {list(question_fields)} is in the source, "
            f"whose columns are {sorted(columns)}; pass --question-field."
        )
    if not any(_has_column(columns, f) for f, _ in answer_fields):
        raise ValueError(
            f"{spec.name}: none of the answer columns {[f for f, _ in answer_fields]} is in the source, "
            f"whose columns are {sorted(columns)}; pass --answer-field."
        )


def _reject_reason(
    spec: SourceSpec, question: str | None, answer: str | None, seen: dict[str, str]
) -> str | None:
    """Why a parsed row cannot be written (one of :data:`REJECT_REASONS`), or ``None`` to keep it.

    ``seen`` maps each problem met so far (whitespace-normalised) to its first answer; with
    ``spec.dedupe`` the row's problem is added, so later repeats count as duplicates.
    """
    if question is None:
        return "no_question"
    if answer is None:
        return "no_answer"
    if spec.dedupe:
        key = " ".join(question.split())
        if key in seen:
            return "duplicate" if seen[key] == answer else "duplicate_conflict"
        seen[key] = answer
    if score_value(compute_score(spec.data_source, gold_response(answer, spec.style), answer)) != 1.0:
        return "unscorable_answer"
    return None


def _solution_text(value: Any) -> str | None:
    """A reference solution as text: a string as is, a list of strings (OlympiadBench) joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "\n\n".join(value)
    return None


def build_rows(
    spec: SourceSpec,
    records: Iterable[Mapping[str, Any]],
    *,
    split: str,
    index_offset: int = 0,
    columns: list[str] | None = None,
    question_field: str | None = None,
    answer_field: str | None = None,
) -> Built:
    """Turn source records into veRL rows (schema in the module docstring).

    Args:
        spec: The dataset.
        records: Source rows (dicts), in source order.
        split: Written to ``extra_info.split``.
        index_offset: ``extra_info.index`` of the first kept row.
        columns: The source's column names, to fail early on a schema mismatch.
        question_field / answer_field: Override the spec's candidate columns (the answer is
            parsed as ``plain``, or per the spec's kind when the column is one of its own).

    Returns:
        A :class:`Built` with the kept rows and what was rejected, by reason.
    """
    question_fields = (question_field,) if question_field else spec.question_fields
    if answer_field:
        kinds = dict(spec.answer_fields)
        answer_fields: tuple[tuple[str, AnswerKind], ...] = (
            (answer_field, kinds.get(answer_field, "plain")),
        )
    else:
        answer_fields = spec.answer_fields
    if columns is not None:
        _require_columns(spec, columns, question_fields, answer_fields)

    out = Built()
    rows = out.rows
    seen: dict[str, str] = {}  # normalised problem -> kept ground truth (dedupe only)
    for position, record in enumerate(records):
        out.n_read += 1
        question = next((q for q in (question_text(_get(record, f)) for f in question_fields) if q), None)
        answer = next((a for a in (parse_answer(_get(record, f), k) for f, k in answer_fields) if a), None)

        reason = _reject_reason(spec, question, answer, seen)
        if reason is not None:
            out.counts[reason] += 1
            if reason != "duplicate":
                preview = {"question": (question or "")[:300], "answer": answer}
                out.rejected.append({"reason": reason, "position": position, **preview})
            continue

        contexts = (_get(record, f) for f in spec.context_fields)
        context = next((c.strip() for c in contexts if isinstance(c, str) and c.strip()), "")
        full_question = f"{context}\n{question}" if context else question
        source_id = next((v for v in (_get(record, f) for f in spec.id_fields) if v is not None), position)
        solutions = (_solution_text(_get(record, f)) for f in spec.solution_fields)
        solution = next((s for s in solutions if s is not None), "")
        rows.append(
            {
                "data_source": spec.data_source,
                "prompt": render_prompt(full_question, spec.style),
                "ability": spec.ability,
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {
                    "split": split,
                    "index": index_offset + len(rows),
                    "source_id": str(source_id),
                    "question": full_question,
                    "solution": solution,
                },
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


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
) -> SplitReport:
    """Load, build and write ``<output_dir>/<split>.parquet`` for one dataset split.

    Rejected rows go to ``<output_dir>/<split>.rejected.jsonl`` and are counted in the report.
    ``limit`` reads only the first rows of the source (for smoke runs; indices stay positional).
    ``local_key`` is passed to `load_split` (the ``--local-path`` form its hub message suggests).
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


# ---------------------------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------------------------


def _iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        yield from batch.to_pylist()


def _is_training(extra: Mapping[str, Any]) -> bool:
    """A row belongs to a training set unless its ``extra_info.split`` names another split."""
    return extra.get("split") in (None, "train")


def check_files(paths: Iterable[str | os.PathLike[str]], *, score_gold: bool = True) -> list[str]:
    """Problems that would break training on these files; an empty list means none.

    Checks every row for a chat prompt, a non-empty ground truth and an integer
    ``extra_info.index``, and, with ``score_gold``, that a response stating the ground truth scores
    1.0 through the routed veRL scorer (which also catches a ``data_source`` veRL cannot route).
    Indices must be unique within the training set, i.e. over the rows of every file whose
    ``extra_info.split`` is ``train`` (or missing): CoBA-RL keys its tracker by them, and training
    files used together share one tracker. Evaluation rows (any other split) never reach the
    tracker, so each evaluation file may count from 0, and a test file may reuse a training
    file's indices. Whether test prompts also appear in training is another question, answered by
    `train_test_overlap`. A file that cannot be read as parquet is reported, not raised.
    """
    problems: list[str] = []
    owner: dict[int, str] = {}  # training index -> the row that has it
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            names = set(pq.read_schema(path).names)
        except (OSError, pa.ArrowException) as err:
            problems.append(f"{path}: cannot be read as parquet ({err})")
            continue
        missing = {"data_source", "prompt", "reward_model", "extra_info"} - names
        if missing:
            problems.append(f"{path}: missing columns {sorted(missing)}")
            continue
        for pos, row in enumerate(_iter_rows(path)):
            where = f"{path} row {pos}"
            prompt, reward, extra = row["prompt"], row["reward_model"] or {}, row["extra_info"] or {}
            is_chat = isinstance(prompt, list) and all(
                isinstance(m, dict) and m.get("content") for m in prompt
            )
            if not (is_chat and prompt):
                problems.append(f"{where}: prompt is not a non-empty list of chat messages")
            truth = reward.get("ground_truth")
            if not truth:
                problems.append(f"{where}: reward_model.ground_truth is empty")
            index = extra.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                problems.append(f"{where}: extra_info.index={index!r} is not an integer")
            elif _is_training(extra):
                if index in owner:
                    problems.append(f"{where}: extra_info.index={index} repeats {owner[index]}")
                else:
                    owner[index] = where
            if score_gold and truth and is_chat and prompt:
                own = row["data_source"] in OWN_TASKS  # scored on the bare answer
                gold = truth if own else gold_response(truth, _style_of(prompt))
                try:
                    value = score_value(compute_score(row["data_source"], gold, truth))
                except NotImplementedError:
                    problems.append(f"{where}: veRL has no scorer for data_source={row['data_source']!r}")
                    continue
                if value != 1.0:
                    problems.append(f"{where}: the gold answer {truth!r} scores {value}, not 1.0")
    return problems


def _problem_text(row: Mapping[str, Any]) -> str:
    """The problem a row poses, whitespace-normalised: ``extra_info.question``, else the last message."""
    extra = row.get("extra_info") or {}
    text = extra.get("question")
    if not text and isinstance(row.get("prompt"), list) and row["prompt"]:
        last = row["prompt"][-1]
        text = last.get("content") if isinstance(last, dict) else None
    return " ".join(str(text or "").split())


def train_test_overlap(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """One line per evaluation row whose problem also appears in a training row of ``paths``.

    Rows are split into training and evaluation by ``extra_info.split`` (as in `check_files`) and
    compared by their problem text (``extra_info.question``, whitespace-normalised), so the same
    problem matches across prompt styles. Files that cannot be read are skipped (`check_files`
    reports them).
    """
    train: dict[str, str] = {}
    evaluation: list[tuple[str, str]] = []
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            rows = list(enumerate(_iter_rows(path)))
        except (OSError, pa.ArrowException):
            continue
        for pos, row in rows:
            text = _problem_text(row)
            if not text:
                continue
            if _is_training(row.get("extra_info") or {}):
                train.setdefault(text, f"{path} row {pos}")
            else:
                evaluation.append((text, f"{path} row {pos}"))
    return [f"{where}: the same problem is in training, {train[t]}" for t, where in evaluation if t in train]


def _style_of(prompt: list[dict[str, Any]]) -> PromptStyle:
    """Guess the answer format a prompt asks for, from its instruction.

    The DAPO template is recognised first, since a DAPO problem may itself mention ``\\boxed``.
    """
    content = prompt[-1].get("content") or ""
    if content.endswith(DAPO_SUFFIX):
        return "dapo"
    if '"####"' in content:
        return "gsm8k"
    if "\\boxed" in content:
        return "boxed"
    return "dapo"
