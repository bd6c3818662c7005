"""Build veRL rows from a source's records: the row schema, the prompt, the rejections.

One row of every written file (the schema of veRL's own preprocessors, fixed so that files of
different datasets concatenate in one ``data.val_files`` list)::

    data_source    str                       selects the veRL scorer (coba_verl.data.sources)
    prompt         list<{role, content}>     one user turn: question + the style's instruction
    ability        str                       "math"
    reward_model   {style: "rule", ground_truth: str}
    extra_info     {split, index: int64, source_id, question, solution, pass_rate: float64 | null}

``extra_info.index`` is the row's position among the rows kept, plus ``index_offset``: a stable
integer (same source, same index), unique within the file. CoBA-RL keys its per-prompt tracker
by it, so training files used together need disjoint offsets (``--index-offset``).

``extra_info.pass_rate`` carries a pass rate the source ships per problem (``--pass-rate-field``,
e.g. a difficulty-filtered set's measured accuracy), for ``coba.prior_field=extra_info.pass_rate``;
null when not asked for or when the row has none (counted). A value that is not a number in
[0, 1] stops the build with the row named.

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

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from coba_verl.data.formats import AnswerKind, gold_response, parse_answer, question_text, render_prompt
from coba_verl.data.reward import compute_score, score_value
from coba_verl.data.sources import SourceSpec
from coba_verl.records.priors import dotted_get as _get

__all__ = ["REJECT_REASONS", "SCHEMA", "Built", "build_rows"]

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
                    ("pass_rate", pa.float64()),
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
    #: Kept rows with no value in the pass-rate field (when one was asked for).
    without_pass_rate: int = 0


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
    pass_rate_field: str | None = None,
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
        pass_rate_field: A source column (dotted for a nested field) holding each problem's pass
            rate, written to ``extra_info.pass_rate``.

    Raises:
        ValueError: a candidate or the pass-rate column missing from ``columns``; a pass rate that
            is not a number in [0, 1], naming the row.

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
        if pass_rate_field is not None and not _has_column(columns, pass_rate_field):
            raise ValueError(
                f"{spec.name}: --pass-rate-field {pass_rate_field} is not a column of the source, whose "
                f"columns are {sorted(columns)}."
            )

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
        rate = None
        if pass_rate_field is not None:
            rate = _pass_rate(spec, _get(record, pass_rate_field), pass_rate_field, position)
            out.without_pass_rate += rate is None
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
                    "pass_rate": rate,
                },
            }
        )
    return out


def _pass_rate(spec: SourceSpec, value: Any, name: str, position: int) -> float | None:
    """``value`` as a pass rate in [0, 1]; None stays None (a row without one)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(
            f"{spec.name}: source row {position} has {name}={value!r}; a pass rate must be a number in "
            "[0, 1] (a share of attempts solved). Pass the column that holds one, or drop --pass-rate-field."
        )
    return float(value)
