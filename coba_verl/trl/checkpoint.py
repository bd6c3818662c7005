"""The allocator's state as a side file of TRL's checkpoint folder: ``checkpoint-<step>/coba_allocator.npz``.

Written by the main process after TRL's own files, read by every process on resume (the same way
GRPOTrainer keeps its entropy controller beside the checkpoint). The file is the allocator's saved
state in the format every glue keeps (`coba_verl.records.saved_state`: identity, allocator state,
an ``.npz`` without pickle), with TRL's own part as its extra:

    trl_step    TRL's ``GRPOTrainer._step`` at the save
    round       the unfinished round, if any (`coba_verl.records.rounds.Round`): ``ids`` (M,) tracker ids
                and its `Allocation`

A round is unfinished when the checkpoint falls inside it (``num_iterations > 1``, or more
buffered steps than accumulation steps): the tracker has observed it, but TRL does not save its
completions and generates the round again on resume. The side file keeps the round's allocation
so the trainer can spend the regenerated round's budgets as the interrupted run did.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coba_verl.core import Allocation, BudgetAllocator
from coba_verl.records.prompt_ids import PromptIdMap
from coba_verl.records.rounds import Round
from coba_verl.records.saved_state import (
    ResumeMismatch,
    RunIdentity,
    decode,
    encode,
    identify,
    restore_state,
    saved_state,
)

__all__ = ["STATE_FILE", "Resumed", "load_allocator", "run_identity", "save_allocator"]

#: Name of the side file inside a TRL ``checkpoint-<step>`` folder.
STATE_FILE = "coba_allocator.npz"


@dataclass
class Resumed:
    """What a side file restores besides the tracker."""

    trl_step: int  # TRL's GRPOTrainer._step at the save
    unfinished: Round | None  # the round the checkpoint fell inside, or None on a round boundary


def run_identity(train_dataset: Any, id_map: PromptIdMap, id_column: str, model: Any) -> RunIdentity:
    """What a TRL run's pass rates belong to: the ids, each id's ``prompt`` and the model.

    ``model`` is GRPOTrainer's ``model`` argument: a path or hub id is fingerprinted as given, a
    loaded model by its ``config._name_or_path`` (a model built from a config alone has none: None).
    """
    prompts = list(train_dataset["prompt"]) if "prompt" in train_dataset.column_names else None
    path = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", None)
    ids = id_map.ids(train_dataset[id_column]) if prompts is not None else None  # (N,) row order
    return identify(id_map, ids, prompts, path or None)


def save_allocator(
    folder: str,
    allocator: BudgetAllocator,
    *,
    identity: RunIdentity,
    trl_step: int,
    unfinished: Round | None = None,
) -> str:
    """Write the allocator's state, TRL's ``_step`` and the unfinished round into ``folder``; its path."""
    extra: dict = {"trl_step": int(trl_step)}
    if unfinished is not None:
        extra["round"] = {
            "ids": np.asarray(unfinished.ids, dtype=np.int64),
            "allocation": dataclasses.asdict(unfinished.allocation),
        }
    path = os.path.join(folder, STATE_FILE)
    Path(path).write_bytes(encode(saved_state(allocator, identity, extra)))
    return path


def load_allocator(
    folder: str, allocator: BudgetAllocator, *, identity: RunIdentity, id_column: str
) -> Resumed | None:
    """Restore ``allocator`` from ``folder``; None (state untouched) when the folder has no side file.

    Raises:
        ResumeMismatch: (a ValueError) the file was written for a training set with other
            ``id_column`` ids, other prompts under them, or another model (`restore_state`).
        ValueError: the tracker's own checks (window, id space).
    """
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
        return None
    start_fresh = (
        f"{path}: resume with the train_dataset and model it was written with, or start without "
        "resume_from_checkpoint."
    )
    try:
        saved = decode(Path(path).read_bytes())
    except ResumeMismatch as err:
        raise ResumeMismatch(f"{err} {start_fresh}") from None
    extra = restore_state(
        saved, allocator, identity, ids_name=f"train_dataset column {id_column!r}", start_fresh=start_fresh
    )
    unfinished = None
    if "round" in extra:
        saved = extra["round"]
        unfinished = Round(ids=saved["ids"], allocation=Allocation(**saved["allocation"]))
    return Resumed(trl_step=int(extra["trl_step"]), unfinished=unfinished)
