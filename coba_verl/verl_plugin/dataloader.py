"""`CobaDataLoader`: veRL's training dataloader, carrying the allocator through ``data.pt``.

veRL saves ``train_dataloader.state_dict()`` as ``global_step_<t>/data.pt`` and restores it with
``load_state_dict`` on resume. `CobaDataLoader` is that same `StatefulDataLoader`, built with the
very sampler veRL made (``create_rl_sampler``: a seeded torchdata ``RandomSampler``, or a
``SequentialSampler``), so batches come in exactly veRL's order, and it adds one entry to the
state: the `BudgetAllocator`'s tracker. Kill-and-resume therefore restores the data position and
the pass-rate history together, and reproduces the allocations of an uninterrupted run.

Why the loader and not the sampler carries the tracker: with ``data.dataloader_num_workers > 0``
torchdata snapshots the sampler's state when it prefetches indices, several batches ahead of
training; a tracker stored there would be saved as it was steps earlier. The loader's own
``state_dict`` is called when veRL writes the checkpoint, after the step's tracker update.

The entry also fingerprints what the pass rates belong to, so that a resume on other prompts or
another model stops instead of attaching pass rates to the wrong problems::

    prompt_ids       SHA-1 of the sorted extra_info.index values (which ids exist)
    prompt_content   SHA-1 of (id, prompt messages) in id order (what each id asks)
    model            {"path": as resolved (for messages), "fingerprint": `model_fingerprint`}

The model's fingerprint hashes what the folder holds, not where it is, so a model folder that was
moved, copied or mounted elsewhere resumes; another model, a changed config.json or tokenizer, or
other weights are refused. A fingerprint the writing run could not take (no dataframe, no model
path) is None, and the resume goes on unchecked, with a warning.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.records.priors import PriorRecords, apply_priors, column_rows, configured_priors
from coba_verl.records.prompt_ids import INDEX_REPEATED_HINT, PromptIdMap
from coba_verl.verl_plugin.preflight import CobaRefusal, local_model_path

logger = logging.getLogger(__name__)

#: Key of the CoBA-RL entry in the dataloader state dict (and hence in veRL's data.pt).
STATE_KEY = "coba_allocator"

# StatefulDataLoader constructor parameters that `CobaDataLoader.wrap` does not copy: the dataset
# is passed positionally, ``shuffle`` is already expressed by the sampler, and the batch sampler
# is rebuilt by the DataLoader from batch_size, sampler and drop_last.
_NOT_COPIED = ("self", "dataset", "shuffle", "batch_sampler")

#: How a resume refusal ends: the two ways out.
_START_FRESH = (
    "Resume with the data.train_files and actor_rollout_ref.model.path the checkpoint was written with, "
    "or start fresh: trainer.resume_mode=disable (or another trainer.experiment_name / "
    "trainer.default_local_dir)."
)

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


#: The repeated-index message's hint for veRL's training set, where a row without an index reads as 0.
REPEATED_INDEX_HINT = f"(a missing index reads as 0). {INDEX_REPEATED_HINT}"


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


def prompt_id_map(dataset: Any) -> PromptIdMap:
    """The `PromptIdMap` of a (filtered) veRL training dataset, read with `dataset_index_values`."""
    return PromptIdMap(dataset_index_values(dataset), repeated_hint=REPEATED_INDEX_HINT)


def prompt_content_fingerprint(dataset: Any, prompt_ids: PromptIdMap) -> str | None:
    """SHA-1 of every row's (tracker id, prompt messages), in id order; None without a ``dataframe``.

    Changes when data re-prepared with the same indices put other problems under them.
    """
    frame = getattr(dataset, "dataframe", None)
    key = getattr(dataset, "prompt_key", "prompt")
    if frame is None or not hasattr(frame, "column_names") or key not in frame.column_names:
        return None
    ids = prompt_ids.ids(dataset_index_values(dataset))  # (N,) int64, row order
    prompts = list(frame[key])
    digest = hashlib.sha1()
    for row in sorted(range(len(prompts)), key=lambda r: int(ids[r])):
        digest.update(f"{int(ids[row])}\0".encode())
        digest.update(json.dumps(prompts[row], sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def model_fingerprint(model_path: str | None) -> dict[str, str] | None:
    """``{"path", "fingerprint"}`` of ``actor_rollout_ref.model.path``; None when no path is given.

    For a local folder the fingerprint is the SHA-1 of, file by file in name order, each of
    `MODEL_FILES` present (name and contents) and each top-level weight file (`WEIGHT_SUFFIXES`:
    name, size and the `WEIGHT_SAMPLE` bytes at its middle): what the model is, not where it lies.
    A hub id (or a folder holding none of those files) is fingerprinted by its name. ``path`` is
    the resolved folder or the hub id, kept for messages only.
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


def loader_arguments(loader: StatefulDataLoader) -> dict[str, Any]:
    """Every constructor argument of ``loader``, read back from the loader itself.

    The names come from `StatefulDataLoader`'s signature, so a torchdata release that adds a
    parameter is either carried over or stops here, naming it; nothing is dropped silently.

    Raises:
        RuntimeError: the loader does not expose a constructor parameter, or uses a custom batch sampler.
    """
    names = [n for n in inspect.signature(StatefulDataLoader.__init__).parameters if n not in _NOT_COPIED]
    missing = [n for n in names if not hasattr(loader, n)]
    if missing:
        raise RuntimeError(
            f"cannot rebuild veRL's training dataloader: StatefulDataLoader takes {missing} but the "
            "loader does not expose them, so they would be lost. This torchdata version is not supported "
            "by coba-verl; install the one veRL 0.9.1 pins."
        )
    if loader.batch_size is None:
        raise RuntimeError(
            "veRL's training dataloader uses a custom batch_sampler (batch_size=None); CobaDataLoader "
            "rebuilds batches from batch_size and sampler and cannot carry it over."
        )
    return {name: getattr(loader, name) for name in names}


def load_priors(dataset: Any, config: CobaConfig) -> PriorRecords | None:
    """The prior records ``coba.prior_field`` and ``coba.prior_file`` name, or None when neither is set.

    ``prior_field`` is read from the training set's rows as veRL's RLHFDataset holds them (its
    HuggingFace ``dataframe``, after veRL's filters), keyed by each row's ``extra_info.index``.

    Raises:
        CobaRefusal: ``prior_field`` is set but the dataset has no ``dataframe`` to read it from,
            or a record is bad (the message names it).
    """

    def rows(tops: tuple[str, ...]) -> list[dict[str, Any]]:
        frame = getattr(dataset, "dataframe", None)
        if frame is None or not hasattr(frame, "column_names"):
            raise ValueError(
                f"coba.prior_field={config.prior_field!r}: the training dataset "
                f"{type(dataset).__name__} has no dataframe to read it from; use coba.prior_file."
            )
        return column_rows(frame, tops)

    try:
        return configured_priors(
            config.prior_field,
            config.prior_file,
            config.prior_weight,
            rows,
            lambda: dataset_index_values(dataset),
        )
    except (ValueError, FileNotFoundError) as err:
        raise CobaRefusal(f"coba.prior_*: {err}") from err


class CobaDataLoader(StatefulDataLoader):
    """A `StatefulDataLoader` that owns the `BudgetAllocator` and checkpoints it with the data position.

    Args:
        *args, **kwargs: as for `StatefulDataLoader`.
        allocator: The run's allocator; its tracker state travels in :meth:`state_dict`.
        prompt_ids: Map from ``extra_info.index`` to the allocator's prompt ids.
        model_path: ``actor_rollout_ref.model.path``, fingerprinted so that a resume with another
            model is refused; None leaves the model unchecked.
    """

    def __init__(
        self,
        *args: Any,
        allocator: BudgetAllocator,
        prompt_ids: PromptIdMap,
        model_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.allocator = allocator
        self.prompt_ids = prompt_ids
        self.prompt_content = prompt_content_fingerprint(self.dataset, prompt_ids)
        self.model = model_fingerprint(model_path)
        #: Prompts already drawn and allocated (``__rollout_n__`` set) but not yet submitted: the
        #: rest of the current window of M prompts (`CobaTrainer._next_train_batch`), or None.
        self.window_rest: Any = None

    @classmethod
    def wrap(
        cls, loader: StatefulDataLoader, config: CobaConfig, model_path: str | None = None
    ) -> CobaDataLoader:
        """veRL's ``loader`` (not yet iterated) rebuilt with its sampler and settings, plus an allocator.

        ``model_path`` (``actor_rollout_ref.model.path``) lets a resume check the model too.
        """
        prompt_ids = prompt_id_map(loader.dataset)
        allocator = BudgetAllocator(config, num_prompts=prompt_ids.num_prompts)
        priors = load_priors(loader.dataset, config)
        if priors is not None:  # a resume's load_state_dict then replaces the tracker, priors included
            try:
                apply_priors(allocator.tracker, prompt_ids, priors)
            except ValueError as err:
                raise CobaRefusal(f"coba.prior_*: {err}") from err
        kwargs = loader_arguments(loader)
        logger.info(
            "CoBA-RL dataloader: %d prompts, strategy=%s, B in [%d, %d]",
            prompt_ids.num_prompts,
            config.strategy,
            config.min_rollouts,
            config.max_rollouts,
        )
        return cls(
            loader.dataset, allocator=allocator, prompt_ids=prompt_ids, model_path=model_path, **kwargs
        )

    def state_dict(self) -> dict[str, Any]:
        """veRL's dataloader state plus ``{STATE_KEY: {"allocator", "prompt_ids", "prompt_content",
        "model", "window_rest"}}``.

        ``window_rest`` keeps the prompts the data position has already passed but no submission
        has taken yet (DAPO refills), so that a resume neither drops nor redraws them.
        """
        state = super().state_dict()
        state[STATE_KEY] = {
            "allocator": self.allocator.state_dict(),
            "prompt_ids": self.prompt_ids.fingerprint,
            "prompt_content": self.prompt_content,
            "model": self.model,
            "window_rest": self.window_rest,
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the allocator and the window's rest now, the data position lazily (as torchdata does).

        A ``data.pt`` written by stock veRL (no CoBA-RL entry) restores the data position and
        starts the tracker empty, with a warning.
        """
        state = dict(state_dict)
        self.load_coba_state(state.pop(STATE_KEY, None))
        super().load_state_dict(state)

    def load_coba_state(self, coba: dict[str, Any] | None) -> None:
        """Restore the ``STATE_KEY`` entry of a data.pt (None: stock veRL's, the tracker starts empty).

        Raises:
            CobaRefusal: (a ValueError) the entry was written for a training set with other
                ``extra_info.index`` values, other prompts under the same values, or another model.
        """
        if coba is None:
            logger.warning(
                "dataloader checkpoint has no %s entry: the CoBA-RL tracker starts empty",
                STATE_KEY,
            )
            return
        if coba["prompt_ids"] != self.prompt_ids.fingerprint:
            raise CobaRefusal(
                "the checkpoint's tracker was keyed by a different set of extra_info.index values than "
                f"this run's training set (other data or filtering options). {_START_FRESH}"
            )
        self._check_fingerprint(
            coba, "prompt_content", self.prompt_content,
            "the checkpoint's pass rates belong to other prompts: this run's training set has the same "
            "extra_info.index values but different prompt text under them (data re-prepared?), so each "
            "pass rate would be attached to another problem.",
        )  # fmt: skip
        saved, mine = (coba["model"] or {}).get("path"), (self.model or {}).get("path")
        self._check_fingerprint(
            coba, "model", self.model,
            f"the checkpoint was written for the model {saved!r}, but this run's "
            f"actor_rollout_ref.model.path {mine!r} holds another model (its config.json, tokenizer "
            "files or weights differ).",
        )  # fmt: skip
        self.allocator.load_state_dict(coba["allocator"])
        self.window_rest = coba["window_rest"]

    def _check_fingerprint(self, coba: dict[str, Any], key: str, mine: Any, mismatch: str) -> None:
        """Refuse when the checkpoint's ``key`` differs from this run's; warn when the checkpoint has none."""
        if coba[key] is None:
            if mine is not None:
                logger.warning(
                    "the dataloader checkpoint has no %s fingerprint (its run had no dataframe or no model "
                    "path to take it from): resuming without checking that it belongs to this run's %s.",
                    key,
                    "prompts" if key == "prompt_content" else "model",
                )
            return
        if mine is None:
            return  # this run cannot say (no dataframe, no model path): nothing to compare
        theirs = coba[key]["fingerprint"] if key == "model" else coba[key]
        ours = mine["fingerprint"] if key == "model" else mine
        if theirs != ours:
            raise CobaRefusal(f"{mismatch} {_START_FRESH}")
