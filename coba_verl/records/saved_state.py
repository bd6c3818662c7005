"""The allocator's saved state: one format for the three glues, and one check on resume.

Whatever a framework's checkpoint looks like (veRL's ``data.pt``, TRL's ``checkpoint-<step>/``
folder, OpenRLHF's DeepSpeed ``client_states``), the allocator's part of it is the same record::

    format      `FORMAT`
    identity    what the pass rates belong to (`RunIdentity`):
                  prompt_ids       SHA-1 of the sorted prompt ids (which prompts exist)
                  prompt_content   SHA-1 of (tracker id, prompt) in id order (what each id asks)
                  model            {"path": for messages, "fingerprint": `model_fingerprint`}
    allocator   `BudgetAllocator.state_dict` (the tracker's windows, F_t, this step's scores)
    extra       the glue's own (TRL's ``_step`` and unfinished round, veRL's rest of a round)

`restore_state` checks the identity before it loads anything, so a resume on other prompts or
another model stops instead of attaching pass rates to the wrong problems; a fingerprint the
writing run could not take (None) is skipped with a warning. `encode` / `decode` turn a record
into bytes and back (an ``.npz`` without pickle: JSON for the structure, arrays beside it), for
frameworks that store bytes or files (TRL, OpenRLHF); veRL keeps the record as a dict inside its
own ``torch.save``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coba_verl.core import BudgetAllocator
from coba_verl.records.prompt_ids import PromptIdMap
from coba_verl.refusal import CobaRefusal

__all__ = [
    "FORMAT",
    "ResumeMismatch",
    "RunIdentity",
    "decode",
    "encode",
    "identify",
    "local_model_path",
    "model_fingerprint",
    "prompt_content_fingerprint",
    "restore_state",
    "saved_state",
]

logger = logging.getLogger(__name__)

#: Version of the record `saved_state` writes; `restore_state` reads this one only.
FORMAT = 1

#: Files of a model folder whose whole contents identify the model: its configuration and the
#: tokenizer that renders its prompts (those present are hashed).
MODEL_FILES: tuple[str, ...] = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)
#: Weight files of a model folder, identified by their size and `WEIGHT_SAMPLE` bytes from their
#: middle (reading whole checkpoints would take minutes on a 70B model).
WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth")
WEIGHT_SAMPLE = 1 << 16


class ResumeMismatch(CobaRefusal):
    """A saved allocator state that belongs to other prompts or another model than this run's."""


@dataclass(frozen=True)
class RunIdentity:
    """What a run's pass rates belong to; None where the run cannot say (no prompt text, no model path).

    Attributes:
        prompt_ids: `PromptIdMap.fingerprint` (which ids exist).
        prompt_content: `prompt_content_fingerprint` (what each id asks), or None.
        model: `model_fingerprint` (``{"path", "fingerprint"}``), or None.
    """

    prompt_ids: str
    prompt_content: str | None = None
    model: dict[str, str] | None = None


def identify(
    id_map: PromptIdMap,
    ids: Iterable[int] | None = None,
    prompts: Sequence[Any] | None = None,
    model_path: str | None = None,
) -> RunIdentity:
    """A run's `RunIdentity`: its id map, each row's prompt (``ids``, the rows' tracker ids, and
    ``prompts`` row by row; None where the glue cannot read them) and its model path (None:
    unchecked)."""
    content = None
    if ids is not None and prompts is not None:
        content = prompt_content_fingerprint(ids, prompts)
    return RunIdentity(id_map.fingerprint, content, model_fingerprint(model_path))


def prompt_content_fingerprint(ids: Iterable[int], prompts: Iterable[Any]) -> str:
    """SHA-1 of every row's (tracker id, prompt), in id order; ``prompts`` as JSON (text or messages).

    Changes when data re-prepared with the same ids put other problems under them.
    """
    rows = sorted(zip((int(i) for i in ids), prompts, strict=True), key=lambda row: row[0])
    digest = hashlib.sha1()
    for tracker_id, prompt in rows:
        digest.update(f"{tracker_id}\0".encode())
        digest.update(json.dumps(prompt, sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def local_model_path(path: str) -> Path | None:
    """The local folder ``path`` names, or None for what may be a hub id (``Qwen/Qwen2.5-7B-Instruct``).

    Local-looking: absolute, ``~``, ``./`` or ``../``, or more than one ``/`` (a hub id is
    ``org/name``), or an existing folder. A URL (``hdfs://``, ``s3://``) is not local.
    """
    if "://" in path:
        return None
    local = Path(path).expanduser()
    if path.startswith(("/", "~", "./", "../")) or path.count("/") > 1 or local.is_dir():
        return local
    return None


def model_fingerprint(model_path: str | None) -> dict[str, str] | None:
    """``{"path", "fingerprint"}`` of a model path; None when no path is given.

    For a local folder the fingerprint is the SHA-1 of, file by file in name order, each of
    `MODEL_FILES` present (name and contents) and each top-level weight file (`WEIGHT_SUFFIXES`:
    name, size and the `WEIGHT_SAMPLE` bytes at its middle): what the model is, not where it lies,
    so a folder moved, copied or mounted elsewhere keeps its fingerprint. A hub id (or a folder
    holding none of those files) is fingerprinted by its name. ``path`` is the resolved folder or
    the hub id, kept for messages only.
    """
    if model_path is None:
        return None
    local = local_model_path(str(model_path))
    path = str(local.resolve()) if local is not None else str(model_path)
    digest = hashlib.sha1()
    found = False
    if local is not None and local.is_dir():
        for file in sorted(local.iterdir(), key=lambda f: f.name):
            if file.name in MODEL_FILES and file.is_file():
                digest.update(f"{file.name}\0".encode() + file.read_bytes() + b"\0")
            elif file.suffix in WEIGHT_SUFFIXES and file.is_file():
                size = file.stat().st_size
                with open(file, "rb") as f:
                    f.seek(max(0, size // 2 - WEIGHT_SAMPLE // 2))
                    sample = f.read(WEIGHT_SAMPLE)
                digest.update(f"{file.name}\0{size}\0".encode() + sample + b"\0")
            else:
                continue
            found = True
    if not found:
        digest.update(path.encode())
    return {"path": path, "fingerprint": digest.hexdigest()}


def saved_state(
    allocator: BudgetAllocator, identity: RunIdentity, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The record a checkpoint keeps (module docstring): plain dicts, arrays, numbers and strings
    (and whatever ``extra`` holds)."""
    return {
        "format": FORMAT,
        "identity": dataclasses.asdict(identity),
        "allocator": allocator.state_dict(),
        "extra": dict(extra or {}),
    }


def restore_state(
    saved: Mapping[str, Any],
    allocator: BudgetAllocator,
    identity: RunIdentity,
    *,
    ids_name: str,
    start_fresh: str,
) -> dict[str, Any]:
    """Check that ``saved`` (`saved_state`) belongs to this run, load it into ``allocator``; its extra.

    Args:
        ids_name: how this framework calls the prompt ids, for messages (``extra_info.index``,
            TRL's ``'prompt_id' column``).
        start_fresh: the end of every refusal: how to resume right, or to start fresh.

    Raises:
        ResumeMismatch: (a ValueError) ``saved`` was written for a training set with other ids,
            other prompts under the same ids, or another model; or in another format.
        ValueError: the tracker's own checks (window, id space).
    """
    if saved.get("format") != FORMAT:
        raise ResumeMismatch(
            f"the checkpoint's allocator state is not of format {FORMAT} (its format: "
            f"{saved.get('format')!r}): it was written by another version of coba-verl. {start_fresh}"
        )
    theirs = saved["identity"]
    if theirs["prompt_ids"] != identity.prompt_ids:
        raise ResumeMismatch(
            f"the checkpoint's tracker was keyed by a different set of {ids_name} values than this run's "
            f"training set (other data or filtering options). {start_fresh}"
        )
    if _differs(theirs["prompt_content"], identity.prompt_content, "prompt_content"):
        raise ResumeMismatch(
            "the checkpoint's pass rates belong to other prompts: this run's training set has the same "
            f"{ids_name} values but different prompt text under them (data re-prepared?), so each pass "
            f"rate would be attached to another problem. {start_fresh}"
        )
    saved_model, model = theirs["model"], identity.model
    if _differs(
        None if saved_model is None else saved_model["fingerprint"],
        None if model is None else model["fingerprint"],
        "model",
    ):
        raise ResumeMismatch(
            f"the checkpoint was written for the model {saved_model['path']!r}, but this run's model "
            f"{model['path']!r} holds another model (its config.json, tokenizer files or weights differ). "
            f"{start_fresh}"
        )
    allocator.load_state_dict(saved["allocator"])
    return dict(saved["extra"])


def _differs(theirs: str | None, mine: str | None, what: str) -> bool:
    """Whether two fingerprints disagree; a side without one (None) cannot, with a warning when the
    checkpoint lacks what this run has."""
    if theirs is None:
        if mine is not None:
            logger.warning(
                "the checkpoint has no %s fingerprint (its run had no prompt text or no model path to take "
                "it from): resuming without checking that it belongs to this run's %s.",
                what,
                "prompts" if what == "prompt_content" else "model",
            )
        return False
    return mine is not None and theirs != mine


def encode(record: Mapping[str, Any]) -> bytes:
    """``record`` as ``.npz`` bytes without pickle: its structure as JSON (arrays replaced by their
    key), each array beside it; `decode` restores it exactly (dtypes included).

    A tuple comes back as a list.

    Raises:
        TypeError: a value that is none of dict, list, tuple, str, number, bool, None, numpy array of
            plain values (an object array would need pickle); a key that is not a string, holds
            ``/`` or is ``__array__`` (it would collide with the arrays' names); the message names
            where.
    """
    arrays: dict[str, np.ndarray] = {}

    def plain(value: Any, path: str) -> Any:
        where = path or "/"
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"cannot save an array of Python objects at {where} in the allocator state")
            arrays[path] = value
            return {"__array__": path}
        if isinstance(value, Mapping):
            for key in value:
                if not isinstance(key, str) or "/" in key or key == "__array__":
                    raise TypeError(f"cannot save the key {key!r} at {where} in the allocator state")
            return {k: plain(v, f"{path}/{k}" if path else k) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(value)]
        if isinstance(value, np.generic):
            return value.item()
        if value is None or isinstance(value, str | int | float | bool):
            return value
        raise TypeError(f"cannot save {type(value).__name__} at {where} in the allocator state")

    structure = plain(record, "")
    buffer = io.BytesIO()
    np.savez(buffer, __structure__=np.asarray(json.dumps(structure)), **arrays)
    return buffer.getvalue()


def decode(data: bytes) -> dict[str, Any]:
    """The record `encode` wrote.

    Raises:
        ResumeMismatch: ``data`` is not what `encode` writes (an older allocator state, or no
            ``.npz``); the message says which.
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (TypeError, ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise ResumeMismatch(
            f"the checkpoint's allocator state is not of format {FORMAT} ({type(err).__name__}: {err})."
        ) from None
    if "__structure__" not in arrays:
        raise ResumeMismatch(
            f"the checkpoint's allocator state is not of format {FORMAT} (arrays {sorted(arrays)[:4]} "
            "without its structure): it was written by another version of coba-verl."
        )

    def rebuilt(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"__array__"}:
                return arrays[value["__array__"]]
            return {k: rebuilt(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rebuilt(v) for v in value]
        return value

    return rebuilt(json.loads(str(arrays.pop("__structure__"))))
