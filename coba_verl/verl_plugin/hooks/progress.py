"""What a V1 run shows while it runs: one readable line a step, and a progress bar over veRL's
validation loop in generations (prompts x samples each).

veRL's ``_validate`` iterates ``self.val_dataloader`` and shows no progress; a validation-only
run (``trainer.val_only=true``, which ``coba-verl estimate`` is) can take hours on a large
training set. `ProgressLines`, mixed into each CoBA trainer class, swaps the loader for a
`CountingLoader` for the validation pass of such a run and puts it back after, and logs the step's
line (`core.step_line`) after veRL's step metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from tqdm import tqdm

from coba_verl.core.step_line import step_line
from coba_verl.verl_plugin.verl_names import HELD_OUT_PREFIX

__all__ = ["CountingLoader", "ProgressLines", "generations_of"]

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


class ProgressLines:
    """A mixin for veRL's V1 trainer (before it in the bases): the step's line and the validation bar.

    ``_compute_metrics``        veRL's step metrics (validation's included, when this step validated),
                                then one readable line (`core.step_line`): budget range,
                                alpha/beta, prompt mean score, tokens generated (× uniform's),
                                rollouts and tokens trained, held-out when measured.
    ``on_validate_begin/_end``  for a validation-only run, a bar in generations over veRL's
                                validation loader (`CountingLoader`), and veRL's loader put back after.
    """

    def on_validate_begin(self) -> None:
        """veRL's hook; in a validation-only run, count the generations as they finish."""
        super().on_validate_begin()
        if self.config.trainer.get("val_only", False) and not isinstance(self.val_dataloader, CountingLoader):
            samples = int(self.config.actor_rollout_ref.rollout.val_kwargs.n)
            self.val_dataloader = CountingLoader(self.val_dataloader, len(self.val_dataset), samples)

    def on_validate_end(self) -> None:
        """veRL's hook; veRL's own validation loader back in place."""
        if isinstance(self.val_dataloader, CountingLoader):
            self.val_dataloader = self.val_dataloader.loader
        super().on_validate_end()

    def _compute_metrics(
        self, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int
    ) -> None:
        """veRL's step metrics, then the step's line."""
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        logger.info(step_line(global_steps, metrics, HELD_OUT_PREFIX))
