"""Stable prompt ids: a dataset's ``extra_info.index`` mapped onto the tracker's id space [0, N).

The tracker is keyed by ``extra_info.index`` (spec §2), not by the dataloader's row position:
the two differ as soon as ``data.filter_overlong_prompts`` or ``train_max_samples`` drops rows.
The index values may be integers or strings (some public parquet files use UUIDs); they are
ranked into dense ids, so N is the number of distinct prompts, not the largest index.

    extra_info.index per row  [17, 3, 42, 8]   (row 2 of the file was filtered out)
    sorted distinct values    [3, 8, 17, 42]
    tracker id per row        [2, 0, 3, 1]
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def dataset_index_values(dataset: Any) -> list[Any]:
    """``extra_info.index`` of every row, read the way veRL's RLHFDataset reads it (missing -> 0).

    Uses the dataset's HuggingFace ``dataframe`` column when there is one (RLHFDataset and its
    subclasses); otherwise reads ``dataset[i]["index"]`` row by row.
    """
    frame = getattr(dataset, "dataframe", None)
    if frame is not None and hasattr(frame, "column_names"):
        if "extra_info" not in frame.column_names:
            return [0] * len(frame)
        return [(info or {}).get("index", 0) for info in frame["extra_info"]]
    logger.info("dataset %s has no dataframe: reading extra_info.index row by row", type(dataset).__name__)
    return [dataset[i]["index"] for i in range(len(dataset))]


#: What the repeated-index message says after the two rows under the default wording (veRL).
_INDEX_REPEATED_HINT = (
    "(a missing index reads as 0). CoBA-RL keys each prompt's pass rate by it. Give every row a unique "
    "extra_info.index, e.g. its row number in the source file."
)


class PromptIdMap:
    """Bijection between the distinct ``extra_info.index`` values of a training set and [0, N).

    Args:
        index_values: ``extra_info.index`` of every row of the (filtered) training set.
        name: How the messages call an id, e.g. a column name (TRL's ``prompt_id``).
        repeated_hint: What the repeated-id message says after "rows a and b both have index v":
            why that is refused and how to fix it.

    Raises:
        ValueError: when two rows share an index (the pass rates of different prompts would be
            merged), or when the values mix numbers and strings.
    """

    def __init__(
        self,
        index_values: Sequence[Any],
        *,
        name: str = "extra_info.index",
        repeated_hint: str = _INDEX_REPEATED_HINT,
    ) -> None:
        self._name = name
        values = [_normalise(v, name) for v in index_values]
        if not values:
            raise ValueError("the training set is empty: there are no prompts to allocate rollouts to.")
        kinds = {type(v) for v in values}
        if len(kinds) > 1:
            raise ValueError(
                f"{name} mixes types {sorted(k.__name__ for k in kinds)}; "
                "use integers (or strings) for every row."
            )
        first_row: dict[Any, int] = {}
        for row, value in enumerate(values):
            if value in first_row:
                raise ValueError(
                    f"{name} must identify each training prompt, but rows {first_row[value]} and "
                    f"{row} both have index {value!r} {repeated_hint}"
                )
            first_row[value] = row
        self._values = sorted(first_row)  # (N,) distinct index values, ascending
        self._id_of = {value: i for i, value in enumerate(self._values)}

    @classmethod
    def from_dataset(cls, dataset: Any) -> PromptIdMap:
        """The map of a (filtered) training dataset, read with `dataset_index_values`."""
        return cls(dataset_index_values(dataset))

    @property
    def num_prompts(self) -> int:
        """N, the size of the tracker's id space."""
        return len(self._values)

    @property
    def fingerprint(self) -> str:
        """SHA-1 of the sorted distinct index values; equal fingerprints mean equal id maps."""
        digest = hashlib.sha1()
        for value in self._values:
            digest.update(repr(value).encode())
            digest.update(b"\0")
        return digest.hexdigest()

    def ids(self, index_values: Iterable[Any]) -> np.ndarray:
        """(M,) int64 tracker ids of a batch's ``index`` values."""
        out = []
        for value in index_values:
            key = _normalise(value, self._name)
            if key not in self._id_of:
                raise ValueError(
                    f"batch prompt with {self._name}={key!r} is not in the training set this run "
                    "was started with."
                )
            out.append(self._id_of[key])
        return np.asarray(out, dtype=np.int64)


def _normalise(value: Any, name: str = "extra_info.index") -> Any:
    """numpy / torch scalars -> Python int or str, so that 3, np.int64(3) and tensor(3) are one key."""
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is a bool; use an integer or a string.")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int | str):
        raise ValueError(f"{name}={value!r} of type {type(value).__name__} is not an integer or a string.")
    return value
