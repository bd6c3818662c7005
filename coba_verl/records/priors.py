"""Pass-rate priors: (successes, attempts) measured before training, keyed by a prompt's index.

CoBA-RL learns a prompt's pass rate from the rollouts it got the last time it was drawn, so the
first epoch is plain GRPO (spec §2, ``coba/cold_start`` = 1). A prior record gives a prompt a
pass rate before it is first drawn: `CapabilityTracker.set_prior` counts it as one appearance
(and the records' mean failure rate as one F_t), so it leaves the windows as an old appearance
does. Records come from a row field of the training set or from a file:

    row field, a pass rate      extra_info.pass_rate = 0.375   -> (round(0.375 * weight), weight)
    row fields, counts          extra_info.pass_count = 3, extra_info.attempts = 8  -> (3, 8)
    file (JSON lines)           {"index": 17, "successes": 3, "attempts": 8}
                                {"index": 18, "pass_rate": 0.375}

A record of a bad value is an error naming its index; a row without the field has no prior
(counted in the log); a record whose index is not in the training set is ignored with a warning
that counts them, and a file none of whose indices is in the training set (a file for another
dataset) is an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coba_verl.core.config import invalid_pass_rates
from coba_verl.core.tracker import CapabilityTracker, pass_rate_records, scores_to_successes
from coba_verl.records.prompt_ids import PromptIdMap, index_key
from coba_verl.refusal import CobaRefusal

__all__ = [
    "PriorRecords",
    "apply_priors",
    "column_rows",
    "combine",
    "dotted_get",
    "outcome_records",
    "parse_prior_field",
    "read_prior_file",
    "records_from_rows",
    "seed_from_table",
    "write_prior_file",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PriorRecords:
    """Prior records, one per prompt index, and where they came from (for messages).

    Attributes:
        index: (K,) the prompts' index values (``extra_info.index``, TRL's ``prompt_id``).
        successes, attempts: (K,) int64 counts, 0 <= successes <= attempts, attempts >= 1.
        source: e.g. ``"field extra_info.pass_rate"`` or ``"file priors.jsonl"``.
        without_prior: rows read that carry no record (the field is missing or null).

    Raises:
        CobaRefusal: an index that is no prompt index (`index_key`), or one with two records: a
            prompt has one prior (3 and 3.0 are one index).
    """

    index: list[Any]
    successes: np.ndarray
    attempts: np.ndarray
    source: str
    without_prior: int = 0

    def __post_init__(self) -> None:
        seen: set[int | str] = set()
        for value in self.index:
            key = index_key(value, f"{self.source}: index")
            if key in seen:
                raise CobaRefusal(f"{self.source}: index {value!r} has more than one prior record.")
            seen.add(key)


def parse_prior_field(spec: str) -> tuple[str, ...]:
    """``"extra_info.pass_rate"`` -> one field (a pass rate); ``"a.successes/a.attempts"`` -> two (counts).

    Raises:
        ValueError: not one or two non-empty dotted names.
    """
    names = tuple(part.strip() for part in str(spec).split("/"))
    if len(names) not in (1, 2) or not all(names):
        raise CobaRefusal(
            f"prior_field={spec!r} must name one field holding a pass rate (e.g. extra_info.pass_rate) "
            "or two fields holding successes and attempts, joined by '/' "
            "(e.g. extra_info.pass_count/extra_info.attempts)."
        )
    return names


def dotted_get(row: Mapping[str, Any], dotted: str) -> Any:
    """``row["a"]["b"]`` for ``dotted="a.b"``; None when any part is missing."""
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _checked(
    index: list[Any], successes: list[Any], attempts: list[Any], source: str
) -> tuple[np.ndarray, np.ndarray]:
    """Counts as int64 arrays; ValueError naming the first bad record by its index."""
    for i, s, a in zip(index, successes, attempts, strict=True):
        ok = (
            isinstance(s, int | float | np.integer | np.floating)
            and isinstance(a, int | float | np.integer | np.floating)
            and float(s).is_integer()
            and float(a).is_integer()
            and a >= 1
            and 0 <= s <= a
        )
        if not ok:
            raise CobaRefusal(
                f"{source}: the prior of index {i!r} is successes={s!r}, attempts={a!r}; a prior needs "
                "integers with attempts >= 1 and 0 <= successes <= attempts."
            )
    return np.asarray(successes, dtype=np.int64), np.asarray(attempts, dtype=np.int64)


def _from_rates(
    index: list[Any], rates: list[Any], weight: int, source: str
) -> tuple[np.ndarray, np.ndarray]:
    values = np.array([_as_number(p) for p in rates], dtype=np.float64)
    for i, p, bad in zip(index, rates, invalid_pass_rates(values), strict=True):
        if bad:
            raise CobaRefusal(
                f"{source}: the prior pass rate of index {i!r} is {p!r}; a pass rate lies in [0, 1]."
            )
    return pass_rate_records(values, weight)


def _as_number(value: Any) -> float:
    """``value`` as a float, or NaN when it is no number (a bool, a str, None)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return float("nan")
    return float(value)


def records_from_rows(
    rows: Iterable[Mapping[str, Any]], index_values: Iterable[Any], field: str, weight: int
) -> PriorRecords:
    """Records from the training rows' ``field`` (`parse_prior_field`); rows without it have no prior.

    Args:
        rows: the training set's rows (mappings; dotted names read nested fields).
        index_values: each row's index, aligned with ``rows``.
        field: one field with a pass rate, or two with successes and attempts.
        weight: attempts a pass rate counts as.
    """
    names = parse_prior_field(field)
    source = f"field {field}"
    index: list[Any] = []
    values: list[tuple[Any, ...]] = []
    without = 0
    for row, idx in zip(rows, index_values, strict=True):
        got = tuple(dotted_get(row, name) for name in names)
        if any(v is None for v in got):
            without += 1
            continue
        index.append(idx)
        values.append(got)
    if len(names) == 1:
        succ, att = _from_rates(index, [v[0] for v in values], weight, source)
    else:
        succ, att = _checked(index, [v[0] for v in values], [v[1] for v in values], source)
    return PriorRecords(index, succ, att, source, without)


def read_prior_file(path: str | Path, weight: int, name: str = "prior_file") -> PriorRecords:
    """Records from a JSON-lines file: ``index`` and either ``successes`` and ``attempts`` or ``pass_rate``.

    The one reader of a prior file: the trainers read it with it, and the pre-flights of
    ``coba-verl train`` and ``python -m coba_verl.openrlhf.train`` before Ray starts, so that the
    same file is refused in the same words. ``name`` is the setting as the user wrote it
    (``coba.prior_file``, ``--coba.prior_file``); every message starts with it.

    Raises:
        CobaRefusal: no such file, a line that is not a JSON object with ``index`` and one of the
            two forms, or a bad value (named with its line or index).
    """
    given, path = str(path), Path(path).expanduser()
    if not path.is_file():
        raise CobaRefusal(
            f"{name}={given!r} does not exist: give a JSON-lines file of prior records keyed by the "
            'training set\'s prompt index ({"index": ..., "successes": ..., "attempts": ...} or '
            '{"index": ..., "pass_rate": ...}; `coba-verl estimate` writes one), or leave it unset.'
        )
    try:
        return _read_records(path, weight)
    except CobaRefusal as err:
        raise CobaRefusal(f"{name}: {err}") from None


def _read_records(path: Path, weight: int) -> PriorRecords:
    source = f"file {path}"
    index: list[Any] = []
    succ: list[Any] = []
    att: list[Any] = []
    rate_index: list[Any] = []
    rates: list[Any] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise CobaRefusal(f"{source} line {number} is not JSON: {err}.") from err
        if not isinstance(record, dict) or "index" not in record:
            raise CobaRefusal(f"{source} line {number} has no index: {line[:120]!r}.")
        if "successes" in record and "attempts" in record:
            index.append(record["index"])
            succ.append(record["successes"])
            att.append(record["attempts"])
        elif "pass_rate" in record:
            rate_index.append(record["index"])
            rates.append(record["pass_rate"])
        else:
            raise CobaRefusal(
                f"{source} line {number} has neither successes and attempts nor pass_rate: {line[:120]!r}."
            )
    s1, a1 = _checked(index, succ, att, source)
    s2, a2 = _from_rates(rate_index, rates, weight, source)
    return PriorRecords(index + rate_index, np.concatenate([s1, s2]), np.concatenate([a1, a2]), source)


def outcome_records(
    index: Iterable[Any], scores: Iterable[float], success_value: float, source: str
) -> PriorRecords:
    """One record per distinct index from scored samples: successes = #{score == success_value}.

    The tracker's success rule, `scores_to_successes` (spec §2, `CobaConfig.success_value`): a NaN
    or infinite score is an error naming the sample, never a failure, so a broken reward cannot
    become a hard prior. Records are in the order each index first appears.

    Args:
        index: each sample's prompt index.
        scores: each sample's score, aligned with ``index``.
        success_value: the score of a success.
        source: where the samples come from (for messages).

    Raises:
        ValueError: ``index`` and ``scores`` differ in length, or a score is not finite (the
            message names ``source`` and the sample's position).
    """
    index = list(index)
    scores = list(scores)
    if len(index) != len(scores):
        raise CobaRefusal(f"{source}: {len(index)} prompt indices but {len(scores)} scores.")
    try:
        success = scores_to_successes(scores, success_value).tolist()  # (N,) 0/1
    except ValueError as err:
        raise CobaRefusal(f"{source}: {err}") from None
    successes: dict[Any, int] = {}
    attempts: dict[Any, int] = {}
    for value, hit in zip(index, success, strict=True):
        attempts[value] = attempts.get(value, 0) + 1
        successes[value] = successes.get(value, 0) + hit
    keys = list(attempts)
    return PriorRecords(
        keys,
        np.asarray([successes[k] for k in keys], dtype=np.int64),
        np.asarray([attempts[k] for k in keys], dtype=np.int64),
        source,
    )


def write_prior_file(path: str | Path, records: PriorRecords) -> Path:
    """Write ``records`` as the JSON lines `read_prior_file` reads: ``{"index", "successes", "attempts"}``."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"index": _plain(i), "successes": int(s), "attempts": int(a)})
        for i, s, a in zip(records.index, records.successes, records.attempts, strict=True)
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value (JSON), anything else unchanged."""
    return value.item() if isinstance(value, np.generic) else value


def combine(first: PriorRecords, second: PriorRecords) -> PriorRecords:
    """Both sets of records; for an index in both, ``second``'s record wins."""
    override = set(second.index)
    keep = [i for i, value in enumerate(first.index) if value not in override]
    return PriorRecords(
        [first.index[i] for i in keep] + list(second.index),
        np.concatenate([first.successes[keep], second.successes]),
        np.concatenate([first.attempts[keep], second.attempts]),
        f"{first.source} and {second.source}",
        first.without_prior,
    )


def column_rows(table: Any, tops: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows of a column table (a HuggingFace ``Dataset``: ``column_names``, ``table[name]``) holding
    the columns ``tops``; a column the table lacks reads as None in every row."""
    n = len(table)
    columns = {t: table[t] if t in table.column_names else [None] * n for t in tops}
    return [{t: columns[t][i] for t in tops} for i in range(n)]


def configured_priors(
    field: str | None,
    file: str | None,
    weight: int,
    rows: Callable[[tuple[str, ...]], Iterable[Mapping[str, Any]]],
    index_values: Callable[[], Iterable[Any]],
    prefix: str = "",
) -> PriorRecords | None:
    """The records ``prior_field`` and ``prior_file`` (`CobaConfig`) name; None when neither is set.

    A refusal names the setting as ``prefix`` + its field name (``coba.prior_file``).

    Args:
        field, file, weight: `CobaConfig.prior_field`, ``prior_file``, ``prior_weight``.
        rows: given the top-level columns ``field`` reads, the training rows (mappings holding at
            least those columns), in the order of ``index_values``; called only with a field.
        index_values: each training row's index.
    """
    records: PriorRecords | None = None
    if field is not None:
        tops = tuple(sorted({name.split(".")[0] for name in parse_prior_field(field)}))
        records = records_from_rows(rows(tops), index_values(), field, weight)
        if not records.index:
            raise CobaRefusal(
                f"{prefix}prior_field={field!r}: no row of the training set has it ({records.without_prior} "
                f"rows read); check the field's name, or drop {prefix}prior_field."
            )
    if file is not None:
        from_file = read_prior_file(file, weight, f"{prefix}prior_file")
        records = from_file if records is None else combine(records, from_file)
    return records


def apply_priors(
    tracker: CapabilityTracker, prompt_ids: PromptIdMap, records: PriorRecords
) -> dict[str, float]:
    """Seed ``tracker`` with ``records`` (`CapabilityTracker.set_prior`); returns what was applied.

    Records whose index is not in ``prompt_ids`` are ignored with a warning counting them.

    Raises:
        CobaRefusal: none of the records' indices is in the training set (a file for another
            dataset?).
    """
    known, unknown = [], 0
    for position, value in enumerate(records.index):
        try:
            known.append((position, int(prompt_ids.ids([value])[0])))
        except ValueError:
            unknown += 1
    if records.index and not known:
        raise CobaRefusal(
            f"none of the {len(records.index)} prior records of {records.source} has an index of this "
            "training set: are they for another dataset (or another extra_info.index numbering)?"
        )
    if unknown:
        logger.warning(
            "%s: %d of %d prior records have an index that is not in the training set; they are ignored",
            records.source,
            unknown,
            len(records.index),
        )
    rows = np.asarray([p for p, _ in known], dtype=np.int64)
    ids = np.asarray([i for _, i in known], dtype=np.int64)
    tracker.set_prior(ids, records.successes[rows], records.attempts[rows])
    applied = {
        "prior_prompts": float(ids.size),
        "prior_ignored": float(unknown),
        "prior_pass_rate_mean": float(np.mean(records.successes[rows] / records.attempts[rows]))
        if ids.size
        else float("nan"),
    }
    logger.info(
        "CoBA-RL priors from %s: %d of %d prompts (mean pass rate %.3f); %d rows without a prior, %d ignored",
        records.source,
        ids.size,
        prompt_ids.num_prompts,
        applied["prior_pass_rate_mean"],
        records.without_prior,
        unknown,
    )
    return applied


def seed_from_table(
    tracker: CapabilityTracker,
    prompt_ids: PromptIdMap,
    field: str | None,
    file: str | None,
    weight: int,
    table: Any,
    id_column: str,
    prefix: str = "",
) -> dict[str, float] | None:
    """Seed ``tracker`` from ``prior_field`` (columns of ``table``) and ``prior_file`` (records keyed by
    ``id_column``'s values), if either is set; None when neither is.

    ``table`` is a column table (a HuggingFace ``Dataset``: ``column_names``, ``table[name]``), the
    training set as the trainer reads it (TRL's ``train_dataset``, OpenRLHF's prompt dataset). Dotted
    field names read nested fields. The errors are `configured_priors`' (which names the settings
    with ``prefix``) and `apply_priors`'.
    """
    records = configured_priors(
        field, file, weight, lambda tops: column_rows(table, tops), lambda: table[id_column], prefix
    )
    return None if records is None else apply_priors(tracker, prompt_ids, records)
