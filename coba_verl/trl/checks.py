"""What `CobaGRPOTrainer` refuses, and the stable prompt ids it reads from the training set.

Each refusal names the value, says why per-prompt budgets cannot work with it, and what to set.
They run before TRL loads anything heavy where the arguments allow it.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset, IterableDataset

from coba_verl.core import CobaConfig
from coba_verl.core.prompt_ids import PromptIdMap

__all__ = ["check_args", "check_generation", "prompt_id_map"]


def check_args(args: Any, coba: CobaConfig) -> None:
    """Refuse ``GRPOConfig`` settings under which per-prompt budgets cannot work.

    Raises:
        ValueError: vLLM server mode; ``coba.min_rollouts < 2``; ``num_generations`` (the mean
            budget) outside [min_rollouts, max_rollouts]; a round of generation_batch_size
            rows that does not split over processes and ``steps_per_generation`` as TRL's
            buffering needs; ``remove_unused_columns=True`` (it drops the id column).
    """
    if args.use_vllm and args.vllm_mode == "server":
        raise ValueError(
            "use_vllm=True with vllm_mode='server' is not supported by CobaGRPOTrainer: TRL's server "
            "client sends every num_generations-th prompt with n=num_generations, so every prompt gets "
            "the same group size. Use vllm_mode='colocate' (one completion per row) or transformers "
            "generation."
        )
    low, up = coba.min_rollouts, coba.max_rollouts
    if low < 2:
        raise ValueError(
            f"coba.min_rollouts={low} is below 2: under GRPO a group of one completion has no baseline, "
            "so its advantage would be 0 and its rollout wasted. Set CobaConfig(min_rollouts=2) or more."
        )
    g = int(args.num_generations)
    if not low <= g <= up:
        raise ValueError(
            f"num_generations={g} is the mean budget per prompt, but it lies outside "
            f"[coba.min_rollouts, coba.max_rollouts] = [{low}, {up}], so no allocation can spend "
            f"prompts * {g} completions. Set num_generations between {low} and {up}, or move the bounds."
        )
    total, world, spg = int(args.generation_batch_size), int(args.world_size), int(args.steps_per_generation)
    per_device = int(args.per_device_train_batch_size)
    if total % g or total != per_device * world * spg:
        raise ValueError(
            f"generation_batch_size={total} must equal per_device_train_batch_size * processes * "
            f"steps_per_generation = {per_device} * {world} * {spg} = {per_device * world * spg} and be "
            f"a multiple of num_generations={g}: CobaGRPOTrainer hands every process the same "
            f"{total} / {world} rows of the round and TRL splits them into {spg} buffered batches. "
            "Leave generation_batch_size unset (TRL derives it) or make it satisfy both."
        )
    if args.remove_unused_columns:
        raise ValueError(
            "remove_unused_columns=True drops every dataset column but the prompt before the trainer "
            "sees it, including the prompt id column CobaGRPOTrainer keys pass rates by. Set "
            "remove_unused_columns=False (GRPOConfig's default)."
        )


def check_generation(rollout_func: Any) -> None:
    """Refuse a custom ``rollout_func``: TRL lets it decide the number of completions per prompt.

    Raises:
        ValueError: if ``rollout_func`` is set.
    """
    if rollout_func is not None:
        raise ValueError(
            "rollout_func is not supported by CobaGRPOTrainer: TRL makes the rollout function "
            "responsible for num_generations completions per prompt, which per-prompt budgets replace. "
            "Generate with TRL's built-in transformers or colocated vLLM path instead."
        )


def prompt_id_map(train_dataset: Any, id_column: str) -> PromptIdMap:
    """The training set's ``id_column`` values, checked and ranked into the tracker's ids [0, N).

    Raises:
        ValueError: no map-style dataset; the column is missing; values that are not all integers
            or all strings; two rows with one id (their pass rates would be merged).
    """
    if train_dataset is None or isinstance(train_dataset, IterableDataset):
        kind = "no train_dataset" if train_dataset is None else "an IterableDataset"
        raise ValueError(
            f"CobaGRPOTrainer got {kind}: it keys pass rates by a prompt id column and checks that the ids "
            "are unique, which needs a map-style datasets.Dataset. Pass a Dataset (e.g. "
            "iterable.take(n) materialised with Dataset.from_generator)."
        )
    columns = train_dataset.column_names if isinstance(train_dataset, Dataset) else None
    if columns is None or id_column not in columns:
        raise ValueError(
            f"train_dataset has no column {id_column!r} (columns: {columns}). CobaGRPOTrainer keys each "
            "prompt's pass rate by a stable id; add one with "
            f"dataset.map(lambda row, i: {{{id_column!r}: i}}, with_indices=True), or pass "
            "prompt_id_column=<your id column>."
        )
    values = list(train_dataset[id_column])
    kinds = {type(v).__name__ for v in values}
    if not (kinds <= {"int"} or kinds <= {"str"}):
        raise ValueError(
            f"train_dataset column {id_column!r} holds {sorted(kinds)} values; prompt ids must be all "
            "integers or all strings."
        )
    first_row: dict[Any, int] = {}
    for row, value in enumerate(values):
        if value in first_row:
            raise ValueError(
                f"train_dataset column {id_column!r} must identify each prompt, but rows {first_row[value]} "
                f"and {row} both have id {value!r}. Give every row a unique id, e.g. its row number "
                "(dataset.map(..., with_indices=True))."
            )
        first_row[value] = row
    return PromptIdMap(values)
