"""The allocator's state as a side file of TRL's checkpoint folder: ``checkpoint-<step>/coba_allocator.npz``.

Written by the main process after TRL's own files, read by every process on resume (the same way
GRPOTrainer keeps its entropy controller beside the checkpoint). Plain ``.npz`` without pickle:

    meta                 JSON: strategy, id column, id-map fingerprint, tracker scalars, TRL's
                         ``_step``, and the unfinished round's allocation scalars (if any)
    tracker/<name>       the tracker's arrays (`CapabilityTracker.state_dict`)
    round/<name>         the unfinished round: ``ids`` (M,) tracker ids, ``budgets``, ``pass_rates``
                         and, when known, ``lengths``

A round is unfinished when the checkpoint falls inside it (``num_iterations > 1``, or more
buffered steps than accumulation steps): the tracker has observed it, but TRL does not save its
completions and generates the round again on resume. The side file keeps the round's allocation
so the trainer can spend the regenerated round's budgets as the interrupted run did.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from coba_verl.core import Allocation, BudgetAllocator

__all__ = ["STATE_FILE", "RoundPlan", "Resumed", "load_allocator", "save_allocator"]

#: Name of the side file inside a TRL ``checkpoint-<step>`` folder.
STATE_FILE = "coba_allocator.npz"


@dataclass
class RoundPlan:
    """A round's prompts and their allocation."""

    ids: np.ndarray  # (M,) int64 tracker ids, in the round's order
    allocation: Allocation

    def for_ids(self, ids: np.ndarray) -> Allocation | None:
        """This allocation for the same prompts in the order ``ids`` (M,); None for other prompts.

        The order can differ after a resume past the first epoch: TRL's RepeatSampler restarts
        its shuffle there. ids [3, 0, 4], B [5, 2, 5]; for_ids([0, 4, 3]) -> B [2, 5, 5].
        """
        position = {int(i): k for k, i in enumerate(self.ids.tolist())}  # tracker id -> index here
        if len(position) != len(ids) or set(position) != set(np.asarray(ids).tolist()):
            return None
        order = np.asarray([position[int(i)] for i in ids], dtype=np.int64)  # (M,)
        a = self.allocation
        return dataclasses.replace(a, budgets=a.budgets[order], pass_rates=a.pass_rates[order])


@dataclass
class Resumed:
    """What a side file restores besides the tracker."""

    trl_step: int  # TRL's GRPOTrainer._step at the save
    unfinished: RoundPlan | None  # the round the checkpoint fell inside, or None on a round boundary


def save_allocator(
    folder: str,
    allocator: BudgetAllocator,
    *,
    fingerprint: str,
    id_column: str,
    trl_step: int,
    unfinished: RoundPlan | None = None,
) -> str:
    """Write the allocator's state, TRL's ``_step`` and the unfinished round into ``folder``; its path."""
    state = allocator.state_dict()
    tracker = state["tracker"]
    arrays = {f"tracker/{k}": np.asarray(v) for k, v in tracker.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in tracker.items() if not isinstance(v, np.ndarray)}
    arrays.update({f"step_scores/{k}": np.asarray(v) for k, v in state["step_scores"].items()})
    meta: dict[str, Any] = {
        "strategy": state["strategy"],
        "fingerprint": fingerprint,
        "id_column": id_column,
        "tracker": scalars,
        "trl_step": int(trl_step),
    }
    if unfinished is not None:
        arrays["round/ids"] = np.asarray(unfinished.ids, dtype=np.int64)
        fields = dataclasses.asdict(unfinished.allocation)
        # Allocation's array fields (budgets, pass_rates, lengths when known) as arrays; the rest to meta.
        array_fields = [k for k, v in fields.items() if isinstance(v, np.ndarray)]
        arrays.update({f"round/{k}": fields.pop(k) for k in array_fields})
        meta["round"] = fields
    path = os.path.join(folder, STATE_FILE)
    with open(path, "wb") as f:
        np.savez(f, meta=np.asarray(json.dumps(meta, default=lambda x: x.item())), **arrays)
    return path


def load_allocator(folder: str, allocator: BudgetAllocator, *, fingerprint: str) -> Resumed | None:
    """Restore ``allocator`` from ``folder``; None (state untouched) when the folder has no side file.

    Raises:
        ValueError: when the file was written for another training set (id-map fingerprint), or
            by the tracker's own checks (window, id space).
    """
    path = os.path.join(folder, STATE_FILE)
    if not os.path.exists(path):
        return None
    with np.load(path, allow_pickle=False) as data:
        meta: dict[str, Any] = json.loads(str(data["meta"]))
        tracker = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("tracker/")}
        round_arrays = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("round/")}
        step_scores = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("step_scores/")}
    if meta["fingerprint"] != fingerprint:
        raise ValueError(
            f"{path} was written for a training set whose {meta['id_column']!r} ids differ from this "
            "run's (id-map fingerprint mismatch); resume with the same train_dataset, or start "
            "without resume_from_checkpoint."
        )
    tracker.update(meta["tracker"])
    allocator.load_state_dict({"strategy": meta["strategy"], "tracker": tracker, "step_scores": step_scores})
    unfinished = None
    if "round" in meta:
        ids = round_arrays.pop("ids")
        unfinished = RoundPlan(ids=ids, allocation=Allocation(**round_arrays, **meta["round"]))
    return Resumed(trl_step=int(meta["trl_step"]), unfinished=unfinished)
