"""The allocator's state as a side file of TRL's checkpoint folder: ``checkpoint-<step>/coba_allocator.npz``.

Written by the main process after TRL's own files, read by every process on resume (the same way
GRPOTrainer keeps its entropy controller beside the checkpoint). Plain ``.npz`` without pickle:

    meta                 JSON: strategy, id column, id-map fingerprint, tracker scalars
    tracker/<name>       the tracker's arrays (`CapabilityTracker.state_dict`)
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from coba_verl.core import BudgetAllocator

__all__ = ["STATE_FILE", "load_allocator", "save_allocator"]

#: Name of the side file inside a TRL ``checkpoint-<step>`` folder.
STATE_FILE = "coba_allocator.npz"


def save_allocator(folder: str, allocator: BudgetAllocator, *, fingerprint: str, id_column: str) -> str:
    """Write ``allocator``'s state into ``folder``; returns the file path."""
    state = allocator.state_dict()
    tracker = state["tracker"]
    arrays = {f"tracker/{k}": np.asarray(v) for k, v in tracker.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in tracker.items() if not isinstance(v, np.ndarray)}
    meta = {
        "strategy": state["strategy"],
        "fingerprint": fingerprint,
        "id_column": id_column,
        "tracker": scalars,
    }
    path = os.path.join(folder, STATE_FILE)
    with open(path, "wb") as f:
        np.savez(f, meta=np.asarray(json.dumps(meta)), **arrays)
    return path


def load_allocator(folder: str, allocator: BudgetAllocator, *, fingerprint: str) -> bool:
    """Restore ``allocator`` from ``folder``; False (state untouched) when the folder has no side file.

    Raises:
        ValueError: when the file was written for another training set (id-map fingerprint), or
            by the tracker's own checks (window, id space).
    """
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
        return False
    with np.load(path, allow_pickle=False) as data:
        meta: dict[str, Any] = json.loads(str(data["meta"]))
        tracker = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("tracker/")}
    if meta["fingerprint"] != fingerprint:
        raise ValueError(
            f"{path} was written for a training set whose {meta['id_column']!r} ids differ from this "
            "run's (id-map fingerprint mismatch); resume with the same train_dataset, or start "
            "without resume_from_checkpoint."
        )
    tracker.update(meta["tracker"])
    allocator.load_state_dict({"strategy": meta["strategy"], "tracker": tracker})
    return True
