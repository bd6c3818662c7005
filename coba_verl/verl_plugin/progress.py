"""A progress bar over veRL's validation loop, in generations (prompts x samples each).

veRL's ``_validate`` iterates ``self.val_dataloader`` and shows no progress; a validation-only
run (``trainer.val_only=true``, which ``coba-verl estimate`` is) can take hours on a large
training set. `CobaTrainer` swaps the loader for a `CountingLoader` for the validation pass of
such a run and puts it back after.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from tqdm import tqdm

__all__ = ["CountingLoader", "generations_of"]

logger = logging.getLogger(__name__)


def generations_of(batch: Mapping[str, Any], samples: int) -> int:
    """Generations veRL's validation draws for ``batch``: prompts x ``samples`` (``val_kwargs.n``).

    Validation rows carry no per-prompt ``__rollout_n__``: coba-verl sets it on training rounds only.
    """
    return len(batch["raw_prompt"]) * samples


class CountingLoader:
    """Iterates ``loader`` as veRL's validation does, advancing a bar by each batch's generations
    once the batch is done (when the loop asks for the next one).

    Args:
        loader: veRL's validation dataloader.
        prompts: rows of its dataset.
        samples: ``actor_rollout_ref.rollout.val_kwargs.n``.
    """

    def __init__(self, loader: Any, prompts: int, samples: int) -> None:
        self.loader = loader
        self.samples = samples
        self.total = prompts * samples
        logger.info(
            "validation: %d prompts x %d samples = %d generations in %d batches",
            prompts, samples, self.total, len(loader),
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        with tqdm(total=self.total, desc="Validation", unit="gen") as bar:
            for batch in self.loader:
                yield batch
                bar.update(generations_of(batch, self.samples))
