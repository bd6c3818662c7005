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

The entry is the allocator's saved state (`coba_verl.records.saved_state`, the format the TRL and
OpenRLHF glues keep too), with the rest of the current round of M prompts and the state of what the
loader carries (`carry`: the replay buffer's count of random cuts, which seeds the next cut's draw)
as its extra. Its identity says what the pass rates belong to (the ids, each id's prompt text as
veRL's ``dataframe`` holds it, and the model of ``actor_rollout_ref.model.path``), so that a resume
on other prompts or another model stops instead of attaching pass rates to the wrong problems; what
the writing run could not fingerprint (no dataframe, no model path) is None, and the resume goes on
unchecked, with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.framework_api import constructor_arguments
from coba_verl.records.priors import PriorRecords, apply_priors, column_rows, configured_priors
from coba_verl.records.prompt_ids import INDEX_REPEATED_HINT, PromptIdMap
from coba_verl.records.saved_state import RunIdentity, identify, restore_state, saved_state
from coba_verl.refusal import CobaRefusal

logger = logging.getLogger(__name__)

#: Key of the CoBA-RL entry in the dataloader state dict (and hence in veRL's data.pt).
STATE_KEY = "coba_allocator"

# StatefulDataLoader constructor parameters that `CobaDataLoader.wrap` does not copy: the dataset
# is passed positionally, ``shuffle`` is already expressed by the sampler, and the batch sampler
# is rebuilt by the DataLoader from batch_size, sampler and drop_last.
_NOT_COPIED = ("dataset", "shuffle", "batch_sampler")
#: The torchdata release whose StatefulDataLoader `CobaDataLoader.wrap` is tested with (veRL 0.9.1's).
TORCHDATA_TESTED = "0.11.0"

#: How a resume refusal ends: the two ways out.
_START_FRESH = (
    "Resume with the data.train_files and actor_rollout_ref.model.path the checkpoint was written with, "
    "or start fresh: trainer.resume_mode=disable (or another trainer.experiment_name / "
    "trainer.default_local_dir)."
)


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


def prompt_texts(dataset: Any) -> list[Any] | None:
    """Every row's prompt (``dataset.prompt_key``, messages or text) from veRL's ``dataframe``; None
    when the dataset has no such column to read."""
    frame = getattr(dataset, "dataframe", None)
    key = getattr(dataset, "prompt_key", "prompt")
    if frame is None or not hasattr(frame, "column_names") or key not in frame.column_names:
        return None
    return list(frame[key])


def run_identity(dataset: Any, prompt_ids: PromptIdMap, model_path: str | None) -> RunIdentity:
    """What this run's pass rates belong to: its ids, each id's prompt, the model (`RunIdentity`)."""
    prompts = prompt_texts(dataset)
    ids = None if prompts is None else prompt_ids.ids(dataset_index_values(dataset))  # (N,) row order
    return identify(prompt_ids, ids, prompts, model_path)


def loader_arguments(loader: StatefulDataLoader) -> dict[str, Any]:
    """Every constructor argument of ``loader``, read back from the loader itself.

    The names come from `StatefulDataLoader`'s signature, so a torchdata release that adds a
    parameter is either carried over or stops here, naming it; nothing is dropped silently.

    Raises:
        FrameworkMismatch: the loader does not expose a constructor parameter
            (`coba_verl.framework_api.constructor_arguments`).
        RuntimeError: the loader uses a custom batch sampler.
    """
    arguments = constructor_arguments(
        loader, StatefulDataLoader, "torchdata", "torchdata", TORCHDATA_TESTED, _NOT_COPIED
    )
    if loader.batch_size is None:
        raise RuntimeError(
            "veRL's training dataloader uses a custom batch_sampler (batch_size=None); CobaDataLoader "
            "rebuilds batches from batch_size and sampler and cannot carry it over."
        )
    return arguments


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
            raise CobaRefusal(
                f"coba.prior_field={config.prior_field!r}: the training dataset "
                f"{type(dataset).__name__} has no dataframe to read it from; use coba.prior_file."
            )
        return column_rows(frame, tops)

    return configured_priors(
        config.prior_field,
        config.prior_file,
        config.prior_weight,
        rows,
        lambda: dataset_index_values(dataset),
        "coba.",
    )


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
        self.identity = run_identity(self.dataset, prompt_ids, model_path)
        #: Prompts already drawn and allocated (``__rollout_n__`` set) but not yet submitted: the
        #: rest of the current round of M prompts (`CobaTrainer._next_train_batch`), or None.
        self.round_rest: Any = None
        #: name -> object whose ``state_dict()`` travels in data.pt beside the allocator (`carry`)
        self.carried: dict[str, Any] = {}

    def carry(self, name: str, obj: Any) -> None:
        """Keep ``obj``'s ``state_dict()`` in this loader's checkpoint entry under ``name``, and give it
        back through ``obj.load_state_dict`` when a checkpoint is loaded; register it before that
        (the trainer does, in ``_init_dataloader``, before veRL's ``_load_checkpoint``)."""
        self.carried[name] = obj

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
            apply_priors(allocator.tracker, prompt_ids, priors)
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
        """veRL's dataloader state plus ``{STATE_KEY: saved_state(...)}`` (`coba_verl.records.saved_state`),
        whose extra is ``{"round_rest": ..., "carried": {name: state}}``.

        ``round_rest`` keeps the prompts the data position has already passed but no submission
        has taken yet (DAPO refills), so that a resume neither drops nor redraws them; ``carried``
        the state of each object given to `carry`.
        """
        state = super().state_dict()
        carried = {name: obj.state_dict() for name, obj in self.carried.items()}
        extra = {"round_rest": self.round_rest, "carried": carried}
        state[STATE_KEY] = saved_state(self.allocator, self.identity, extra)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the allocator and the round's rest now, the data position lazily (as torchdata does).

        A ``data.pt`` written by stock veRL (no CoBA-RL entry) restores the data position and
        starts the tracker empty, with a warning.
        """
        state = dict(state_dict)
        self.load_coba_state(state.pop(STATE_KEY, None))
        super().load_state_dict(state)

    def load_coba_state(self, coba: dict[str, Any] | None) -> None:
        """Restore the ``STATE_KEY`` entry of a data.pt (None: stock veRL's, the tracker starts empty).

        Raises:
            ResumeMismatch: (a `CobaRefusal`) the entry was written for a training set with other
                ``extra_info.index`` values, other prompts under the same values, or another model
                (`restore_state`).
        """
        if coba is None:
            logger.warning(
                "dataloader checkpoint has no %s entry: the CoBA-RL tracker starts empty",
                STATE_KEY,
            )
            return
        extra = restore_state(
            coba, self.allocator, self.identity, ids_name="extra_info.index", start_fresh=_START_FRESH
        )
        self.round_rest = extra["round_rest"]
        restored = extra.get("carried", {})
        missing = sorted(set(self.carried) - set(restored))
        if missing:
            logger.warning(
                "the checkpoint carries no state of %s (written by an earlier coba-verl): they start "
                "afresh, so a random DAPO cut after this resume may keep other sessions than the run "
                "that wrote it",
                missing,
            )
        for name, obj in self.carried.items():
            if name in restored:
                obj.load_state_dict(restored[name])
