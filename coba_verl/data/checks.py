"""Check written veRL files before training: rows a trainer could not use, indices CoBA-RL could not key,
gold answers the scorer would not award, and evaluation problems that are also in training.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coba_verl.data.formats import PromptStyle, gold_response
from coba_verl.data.reward import OWN_TASKS, compute_score, score_value
from coba_verl.data.sources import SOURCES
from coba_verl.records.prompt_ids import INDEX_RULE, IndexRegistry

__all__ = ["FILE_RULES", "STYLE_OF_SOURCE", "check_files", "gold_score", "train_test_overlap"]

#: What a training or evaluation file needs, as the pre-flight of ``python -m coba_verl.main`` says it.
FILE_RULES = (
    "veRL reads parquet files with rows and the columns data_source, prompt (a non-empty list of chat "
    "messages), reward_model (with a non-empty ground_truth) and, in training files, extra_info; "
    f"CoBA-RL needs {INDEX_RULE}."
)


#: The prompt style each data source of `SOURCES` is written with (its scorer expects that format).
STYLE_OF_SOURCE: dict[str, PromptStyle] = {spec.data_source: spec.style for spec in SOURCES.values()}
_STYLES: tuple[PromptStyle, ...] = ("gsm8k", "boxed", "dapo")


def gold_score(data_source: str, truth: str) -> float:
    """The routed veRL score of a response that states ``truth``; 1.0 for a learnable row.

    The response is written in the style `SOURCES` gives ``data_source`` (`STYLE_OF_SOURCE`);
    the package's own tasks (`OWN_TASKS`) are scored on the bare answer. A data source of another
    origin has no known style: the best score over the three styles is returned.

    Raises:
        NotImplementedError: veRL has no scorer for ``data_source``.
    """
    if data_source in OWN_TASKS:
        return score_value(compute_score(data_source, truth, truth))
    styles = (STYLE_OF_SOURCE[data_source],) if data_source in STYLE_OF_SOURCE else _STYLES
    return max(score_value(compute_score(data_source, gold_response(truth, s), truth)) for s in styles)


def _iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        yield from batch.to_pylist()


def _is_training(extra: Mapping[str, Any]) -> bool:
    """A row belongs to a training set unless its ``extra_info.split`` names another split."""
    return extra.get("split") in (None, "train")


def check_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    score_gold: bool = True,
    training: bool | None = None,
    prompt_key: str = "prompt",
    data_source_key: str = "data_source",
) -> list[str]:
    """Problems that would break training on these files; an empty list means none.

    The one check of veRL files: ``python -m coba_verl.data check`` lists its problems, and the
    pre-flight of ``python -m coba_verl.main`` refuses the first one for ``data.train_files``
    (``training=True``) and ``data.val_files`` (``training=False``). Each file must be parquet,
    have rows and the columns ``data_source``, ``prompt``, ``reward_model`` and (unless
    ``training=False``) ``extra_info``; every row a chat prompt and a non-empty ground truth; and,
    with ``score_gold``, a response stating the ground truth must score 1.0 through the routed veRL
    scorer (which also catches a ``data_source`` veRL cannot route).

    Training rows' ``extra_info.index`` values follow `INDEX_RULE` (`IndexRegistry`) over the
    rows of all the files together: CoBA-RL keys its tracker by them, and training files used
    together share one tracker. Which rows train: with ``training=None``, a row whose
    ``extra_info.split`` is ``train`` or missing (`_is_training`); otherwise every row or none.
    Evaluation rows never reach the tracker, so their indices are not checked: each evaluation
    file may count from 0, and a test file may reuse a training file's indices. Whether test
    prompts also appear in training is another question, answered by `train_test_overlap`.

    Args:
        paths: The files; a file that cannot be read as parquet is reported, not raised.
        score_gold: Score each row's gold answer (slow on large files).
        training: Whether the rows are training rows; None reads it from ``extra_info.split``.
        prompt_key, data_source_key: veRL's ``data.prompt_key`` and ``data.reward_fn_key``.
    """
    problems: list[str] = []
    indices = IndexRegistry()
    required = {data_source_key, prompt_key, "reward_model"}
    if training is not False:
        required.add("extra_info")
    for raw in paths:
        path = Path(raw).expanduser()
        try:
            metadata = pq.read_metadata(path)
        except (OSError, pa.ArrowException) as err:
            problems.append(f"{path}: cannot be read as parquet ({err})")
            continue
        missing = required - set(metadata.schema.to_arrow_schema().names)
        if missing:
            problems.append(f"{path}: missing columns {sorted(missing)}")
            continue
        if metadata.num_rows == 0:
            problems.append(f"{path}: has no rows")
            continue
        for pos, row in enumerate(_iter_rows(path)):
            where = f"{path} row {pos}"
            prompt, reward, extra = row[prompt_key], row["reward_model"] or {}, row.get("extra_info") or {}
            is_chat = isinstance(prompt, list) and all(
                isinstance(m, dict) and m.get("content") for m in prompt
            )
            if not (is_chat and prompt):
                problems.append(f"{where}: {prompt_key} is not a non-empty list of chat messages")
            truth = reward.get("ground_truth")
            if not truth:
                problems.append(f"{where}: reward_model.ground_truth is empty")
            if _is_training(extra) if training is None else training:
                try:
                    indices.add(extra.get("index"), where)
                except ValueError as err:
                    problems.append(f"{where}: {err}")
            if score_gold and truth and is_chat and prompt:
                source = row[data_source_key]
                try:
                    value = gold_score(source, truth)
                except NotImplementedError:
                    problems.append(f"{where}: veRL has no scorer for {data_source_key}={source!r}")
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
