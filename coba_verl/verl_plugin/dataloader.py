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
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.core.prompt_ids import PromptIdMap

logger = logging.getLogger(__name__)

#: Key of the CoBA-RL entry in the dataloader state dict (and hence in veRL's data.pt).
STATE_KEY = "coba_allocator"

# StatefulDataLoader constructor parameters that `CobaDataLoader.wrap` does not copy: the dataset
# is passed positionally, ``shuffle`` is already expressed by the sampler, and the batch sampler
# is rebuilt by the DataLoader from batch_size, sampler and drop_last.
_NOT_COPIED = ("self", "dataset", "shuffle", "batch_sampler")


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


class CobaDataLoader(StatefulDataLoader):
    """A `StatefulDataLoader` that owns the `BudgetAllocator` and checkpoints it with the data position.

    Args:
        *args, **kwargs: as for `StatefulDataLoader`.
        allocator: The run's allocator; its tracker state travels in :meth:`state_dict`.
        prompt_ids: Map from ``extra_info.index`` to the allocator's prompt ids.
    """

    def __init__(
        self, *args: Any, allocator: BudgetAllocator, prompt_ids: PromptIdMap, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.allocator = allocator
        self.prompt_ids = prompt_ids
        #: Prompts already drawn and allocated (``__rollout_n__`` set) but not yet submitted: the
        #: rest of the current window of M prompts (`CobaTrainer._next_train_batch`), or None.
        self.window_rest: Any = None

    @classmethod
    def wrap(cls, loader: StatefulDataLoader, config: CobaConfig) -> CobaDataLoader:
        """veRL's ``loader`` (not yet iterated) rebuilt with its sampler and settings, plus an allocator."""
        prompt_ids = PromptIdMap.from_dataset(loader.dataset)
        allocator = BudgetAllocator(config, num_prompts=prompt_ids.num_prompts)
        kwargs = loader_arguments(loader)
        logger.info(
            "CoBA-RL dataloader: %d prompts, strategy=%s, B in [%d, %d]",
            prompt_ids.num_prompts,
            config.strategy,
            config.min_rollouts,
            config.max_rollouts,
        )
        return cls(loader.dataset, allocator=allocator, prompt_ids=prompt_ids, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        """veRL's dataloader state plus ``{STATE_KEY: {"allocator", "prompt_ids", "window_rest"}}``.

        ``window_rest`` keeps the prompts the data position has already passed but no submission
        has taken yet (DAPO refills), so that a resume neither drops nor redraws them.
        """
        state = super().state_dict()
        state[STATE_KEY] = {
            "allocator": self.allocator.state_dict(),
            "prompt_ids": self.prompt_ids.fingerprint,
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
            ValueError: the entry was written for a training set with other ``extra_info.index`` values.
        """
        if coba is None:
            logger.warning(
                "dataloader checkpoint has no %s entry: the CoBA-RL tracker starts empty",
                STATE_KEY,
            )
            return
        if coba["prompt_ids"] != self.prompt_ids.fingerprint:
            raise ValueError(
                "the checkpoint's tracker was keyed by a different set of extra_info.index values than "
                "this run's training set; resume with the same data.train_files and filtering options."
            )
        self.allocator.load_state_dict(coba["allocator"])
        self.window_rest = coba.get("window_rest")
