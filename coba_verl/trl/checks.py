"""What `CobaGRPOTrainer` refuses, and the stable prompt ids it reads from the training set.

Each refusal names the value, says why per-prompt budgets cannot work with it, and what to set.
They run before TRL loads anything heavy where the arguments allow it. Rules the core already
checks are not repeated here: ``min_rollouts >= 2`` is `CobaConfig`'s, budget feasibility is
`coba_verl.core.check_budget`'s and the id rules are `PromptIdMap`'s; this module only words them
in TRL's terms.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset, IterableDataset

from coba_verl.core import BudgetAllocator, CobaConfig, check_budget
from coba_verl.core.config import require_no_sync_dapo_options, require_rollout_budget
from coba_verl.core.group_weight import AggregationModes, check_aggregation
from coba_verl.framework_api import check_api
from coba_verl.records.priors import seed_from_table
from coba_verl.records.prompt_ids import PromptIdMap
from coba_verl.refusal import CobaRefusal, CobaTypeRefusal

__all__ = [
    "DEFAULT_ID_COLUMN",
    "check_args",
    "check_generation",
    "check_trl_api",
    "prompt_id_map",
    "seed_priors",
]


#: TRL 1.16's ``loss_type`` values by what ``coba.group_weight=equal`` does under them. Exact under
#: ``grpo`` and ``sapo``: each completion's token mean weighs alike. The others (``dapo``, the
#: default, ``bnpo``, ``dr_grpo``, ``cispo``, ``luspo``) weigh each completion by its token count:
#: ``equal`` removes the factor B_g, but a group still weighs in proportion to its mean completion
#: length. Accepted, said at INFO. Any other loss type (e.g. ``vespo``, whose weights depend on the
#: advantage itself) is refused with ``equal`` (`check_aggregation`).
GROUP_WEIGHT_MODES = AggregationModes(
    setting="loss_type",
    exact=("grpo", "sapo"),
    by_length=("dapo", "bnpo", "dr_grpo", "cispo", "luspo"),
)

#: Default name of the training-set column holding each prompt's stable id.
DEFAULT_ID_COLUMN = "prompt_id"

TESTED_VERSION = "1.16.0"
#: The ``GRPOTrainer`` methods `CobaGRPOTrainer` extends and the parameters it calls them with.
EXTENDED_METHODS: dict[str, tuple[str, ...]] = {
    "_generate_and_score_completions": ("self", "inputs"),
    "_generate_single_turn": (
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_save_checkpoint": ("self", "model", "trial"),
    "_load_optimizer_and_scheduler": ("self", "checkpoint"),
}


def check_trl_api(base: type) -> None:
    """Refuse to load against a TRL whose ``GRPOTrainer`` (``base``) lacks a method `CobaGRPOTrainer`
    extends or changed its parameters (`coba_verl.framework_api.check_api`): the override would
    silently never be called, and the rounds would train on TRL's own groups.

    Raises:
        FrameworkMismatch: (an ImportError) naming the method, the signature found and the one expected.
    """
    check_api(
        "TRL", "trl", TESTED_VERSION, {(base, name): params for name, params in EXTENDED_METHODS.items()}
    )


def check_args(args: Any, coba: CobaConfig) -> None:
    """Refuse ``GRPOConfig`` settings under which per-prompt budgets cannot work.

    Raises:
        ValueError: ``CobaConfig.budget_unit='tokens'`` (`require_rollout_budget`: a generation
            round is generation_batch_size completions); ``CobaConfig.skip_spread_below`` > 0 and
            ``CobaConfig.size_refills`` (`require_no_sync_dapo_options`: a round is
            generated whole); ``coba.group_weight=equal`` with a
            ``loss_type`` `GROUP_WEIGHT_MODES` does not know; a round of M =
            generation_batch_size / num_generations prompts whose M * num_generations
            completions no budgets in [min_rollouts, max_rollouts] can spend (`check_budget`);
            ``remove_unused_columns=True`` (it drops the id column).
        TypeError: ``args`` is not a ``GRPOConfig`` (an ``AsyncGRPOConfig`` of TRL's experimental
            ``AsyncGRPOTrainer``, which is not a ``GRPOTrainer``).
    """
    from trl import GRPOConfig

    if not isinstance(args, GRPOConfig):
        raise CobaTypeRefusal(
            f"CobaGRPOTrainer takes a trl.GRPOConfig, got {type(args).__name__}. TRL's experimental "
            "AsyncGRPOTrainer is not a GRPOTrainer (trl/experimental/async_grpo/async_grpo_trainer.py:910) "
            "and has no generation round to allocate per-prompt budgets over: a spawned rollout process "
            "(async_rollout_worker.py:1168, 1218) repeats each prompt num_generations times (:886) and "
            "scores a group once num_generations completions are in (:614, :696), inside one loop "
            "(_generate_loop, :536) that takes no per-prompt count; the trainer reads a stream of scored "
            "samples and drops, untrained, those more than max_staleness weight versions old "
            "(async_grpo_trainer.py:351-371). Use GRPOConfig with CobaGRPOTrainer."
        )
    require_rollout_budget(coba, "TRL's GRPOTrainer", "CobaConfig.budget_unit")
    require_no_sync_dapo_options(coba, "TRL's GRPOTrainer", "CobaConfig.")
    check_aggregation(coba.group_weight, str(args.loss_type), GROUP_WEIGHT_MODES)
    # GRPOConfig.__post_init__ has made generation_batch_size = per_device_train_batch_size *
    # processes * steps_per_generation, a multiple of num_generations (TRL 1.16).
    g, total = int(args.num_generations), int(args.generation_batch_size)
    low, up = coba.min_rollouts, coba.max_rollouts
    try:
        check_budget(total // g, total, low, up)
    except ValueError as err:
        raise CobaRefusal(
            f"num_generations={g} is the mean budget per prompt, but no budgets can spend the round "
            f"(generation_batch_size={total} completions): {err} Set num_generations between "
            f"coba.min_rollouts={low} and coba.max_rollouts={up}, or move the bounds."
        ) from None
    if args.remove_unused_columns:
        raise CobaRefusal(
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
        raise CobaRefusal(
            "rollout_func is not supported by CobaGRPOTrainer: TRL makes the rollout function "
            "responsible for num_generations completions per prompt, which per-prompt budgets replace. "
            "Generate with TRL's built-in generation instead (transformers, or vLLM in server or colocate "
            "mode)."
        )


def prompt_id_map(train_dataset: Any, id_column: str) -> PromptIdMap:
    """The training set's ``id_column`` values, checked and ranked into the tracker's ids [0, N).

    Raises:
        ValueError: no map-style dataset; the column is missing; and `PromptIdMap`'s refusals,
            naming the column: values that are not integers or strings, or mix the two; two rows
            with one id (their pass rates would be merged).
    """
    if train_dataset is None or isinstance(train_dataset, IterableDataset):
        kind = "no train_dataset" if train_dataset is None else "an IterableDataset"
        raise CobaRefusal(
            f"CobaGRPOTrainer got {kind}: it keys pass rates by a prompt id column and checks that the ids "
            "are unique, which needs a map-style datasets.Dataset. Pass a Dataset (e.g. "
            "iterable.take(n) materialised with Dataset.from_generator)."
        )
    columns = train_dataset.column_names if isinstance(train_dataset, Dataset) else None
    if columns is None or id_column not in columns:
        raise CobaRefusal(
            f"train_dataset has no column {id_column!r} (columns: {columns}). CobaGRPOTrainer keys each "
            "prompt's pass rate by a stable id; add one with "
            f"dataset.map(lambda row, i: {{{id_column!r}: i}}, with_indices=True), or pass "
            "prompt_id_column=<your id column>."
        )
    return PromptIdMap(
        list(train_dataset[id_column]),
        name=id_column,
        repeated_hint=(
            f"(train_dataset column {id_column!r}; their pass rates would be merged). Give every row a "
            f"unique id, e.g. its row number: dataset.map(lambda row, i: {{{id_column!r}: i}}, "
            "with_indices=True)."
        ),
    )


def seed_priors(
    allocator: BudgetAllocator, id_map: PromptIdMap, coba: CobaConfig, train_dataset: Dataset, id_column: str
) -> None:
    """Seed the tracker with ``coba.prior_field`` (columns of ``train_dataset``; dotted names read
    nested fields) and ``coba.prior_file`` (records keyed by ``id_column``), if set
    (`coba_verl.records.priors.seed_from_table`). A checkpoint loaded later replaces the tracker,
    priors included."""
    seed_from_table(
        allocator.tracker, id_map, coba.prior_field, coba.prior_file, coba.prior_weight, train_dataset,
        id_column,
    )  # fmt: skip
