"""Stable prompt ids: each training row's index value mapped onto the tracker's id space [0, N).

The tracker is keyed by a stable index value per prompt (spec §2; ``extra_info.index`` in
coba-verl's parquet files, an id column elsewhere), not by the dataloader's row position: the
two differ as soon as a filter drops rows. `INDEX_RULE` says what the values must be; this
module is its one home: `PromptIdMap` (the trainers), `coba_verl.data.check_files` (``python -m
coba_verl.data check`` and the pre-flight of ``python -m coba_verl.main``) all apply it through
`IndexRegistry`. Strings are allowed because some public parquet files use UUIDs. The values
are ranked into dense ids, so N is the number of distinct prompts, not the largest index.

    index value per row       [17, 3, 42, 8]   (row 2 of the file was filtered out)
    sorted distinct values    [3, 8, 17, 42]
    tracker id per row        [2, 0, 3, 1]

How a trainer reads the values from its dataset is its glue's (e.g.
`coba_verl.verl_plugin.hooks.dataloader.dataset_index_values`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from coba_verl.refusal import CobaRefusal

#: What ``extra_info.index`` must be, in the words of every message and document that states it.
INDEX_RULE = (
    "an extra_info.index in every training row that no other training row has: an integer or a string, "
    "of one type in all rows"
)


#: What the repeated-index message says after the two rows, unless the caller words it its own way.
INDEX_REPEATED_HINT = (
    f"CoBA-RL keys each prompt's pass rate by it, so it needs {INDEX_RULE} "
    "(e.g. each row's number in the source file)."
)


class RepeatedIndex(ValueError):
    """Two training rows share an index value (their pass rates would be merged).

    Attributes:
        key: The shared value. first, where: the labels of the first row that has it and of this one.
    """

    def __init__(self, name: str, key: int | str, first: Any, where: Any) -> None:
        super().__init__(f"{name}={key!r} repeats {first}")
        self.key, self.first, self.where = key, first, where


class IndexRegistry:
    """The index values of one training set, taken row by row and held to `INDEX_RULE`.

    Args:
        name: How the messages call an id (``extra_info.index``; TRL's ``prompt_id`` column).
    """

    def __init__(self, name: str = "extra_info.index") -> None:
        self.name = name
        self.first: dict[int | str, Any] = {}  # value -> label of the first row that has it

    def add(self, value: Any, where: Any) -> int | str:
        """Check one row's value and record it; ``where`` labels the row in messages. Returns its key.

        Raises:
            ValueError: the value is missing, a bool, or neither an integer nor a string (`index_key`);
                its type differs from the first row's (the message says ``mixes types``).
            RepeatedIndex: an earlier row has the same value.
        """
        key = index_key(value, self.name)
        if self.first:
            first_key = next(iter(self.first))
            if type(key) is not type(first_key):
                raise CobaRefusal(
                    f"{self.name} mixes types: {key!r} ({type(key).__name__}) after {first_key!r} "
                    f"({type(first_key).__name__}) of an earlier row; give every row the same type."
                )
        if key in self.first:
            raise RepeatedIndex(self.name, key, self.first[key], where)
        self.first[key] = where
        return key


class PromptIdMap:
    """Bijection between the distinct index values of a training set and [0, N).

    Args:
        index_values: the index value of every row of the (filtered) training set.
        name: How the messages call an id, e.g. a column name (TRL's ``prompt_id``).
        repeated_hint: What the repeated-id message says after "rows a and b both have index v":
            why that is refused and how to fix it.

    Raises:
        ValueError: when the values break `INDEX_RULE` (`IndexRegistry`): two rows share an index
            (the pass rates of different prompts would be merged), a value is neither an integer
            nor a string, or the values mix the two; when there are none.
    """

    def __init__(
        self,
        index_values: Sequence[Any],
        *,
        name: str = "extra_info.index",
        repeated_hint: str = INDEX_REPEATED_HINT,
    ) -> None:
        self._name = name
        if not len(index_values):
            raise CobaRefusal("the training set is empty: there are no prompts to allocate rollouts to.")
        registry = IndexRegistry(name)
        for row, value in enumerate(index_values):
            try:
                registry.add(value, row)
            except RepeatedIndex as repeated:
                raise CobaRefusal(
                    f"{name} must identify each training prompt, but rows {repeated.first} and {row} both "
                    f"have index {repeated.key!r} {repeated_hint}"
                ) from None
        self._values = sorted(registry.first)  # (N,) distinct index values, ascending
        self._id_of = {value: i for i, value in enumerate(self._values)}

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
            key = index_key(value, self._name)
            if key not in self._id_of:
                raise CobaRefusal(
                    f"batch prompt with {self._name}={key!r} is not in the training set this run "
                    "was started with."
                )
            out.append(self._id_of[key])
        return np.asarray(out, dtype=np.int64)


def index_key(value: Any, name: str = "extra_info.index") -> int | str:
    """One index value as its key: 3, 3.0, np.int64(3) and tensor(3) are the same key 3.

    Raises:
        ValueError: naming the value when it is missing (None), a bool, or neither an integer nor
            a string (e.g. 1.5).
    """
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if value is None:
        raise CobaRefusal(f"{name} is missing.")
    if isinstance(value, bool):
        raise CobaRefusal(f"{name}={value!r} is a bool; use an integer or a string.")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int | str):
        raise CobaRefusal(f"{name}={value!r} of type {type(value).__name__} is not an integer or a string.")
    return value
