"""What coba-verl's OpenRLHF trainer extends, what it refuses, and the coba flags it adds.

`check_openrlhf_api` runs when `coba_verl.openrlhf` is imported: a renamed or re-signed OpenRLHF
method would otherwise be silently never called (budgets would stop reaching the rollout engines, or
the tracker would stop learning). `check_args` runs on OpenRLHF's parsed arguments before Ray
starts. Rules the core already checks are not repeated: ``min_rollouts >= 2`` and the knob ranges
are `CobaConfig`'s, budget feasibility is `coba_verl.core.check_budget`'s and the id rules are
`PromptIdMap`'s; this module only words them in OpenRLHF's flags.
"""

from __future__ import annotations

import importlib
from typing import Any

from coba_verl.core import CobaConfig, check_budget
from coba_verl.core.config import require_no_sync_dapo_options, require_rollout_budget
from coba_verl.core.group_weight import AggregationModes, check_aggregation
from coba_verl.framework_api import FrameworkMismatch, actor_python_class, check_api, mismatch
from coba_verl.records.priors import read_prior_file
from coba_verl.refusal import CobaRefusal

__all__ = [
    "COBA_FLAG_PREFIX",
    "openrlhf_mismatch",
    "DEFAULT_ID_KEY",
    "EXTENDED",
    "check_args",
    "check_openrlhf_api",
]

#: OpenRLHF 0.11's flags are dotted (``--rollout.n_samples_per_prompt``); coba's follow suit.
COBA_FLAG_PREFIX = "--coba."
#: Default prompt-dataset column holding each prompt's stable id (``--coba.id_key``).
DEFAULT_ID_KEY = "prompt_id"
TESTED_VERSION = "0.11.2"
#: OpenRLHF 0.11.2's ``--actor.loss_agg_mode`` values by what ``--coba.group_weight equal`` does
#: under them: exact under ``seq-mean-token-mean`` (every sample weighs 1 / N, so a group's factors
#: (N / M) / B_g sum to 1 / M of the loss); under ``token-mean`` (the default) a group weighs by its
#: mean response length, said at INFO. OpenRLHF 0.11.2's parser accepts no other mode; one a later
#: release adds is refused (`check_aggregation`).
GROUP_WEIGHT_MODES = AggregationModes(
    setting="--actor.loss_agg_mode",
    exact=("seq-mean-token-mean",),
    by_length=("token-mean",),
    key="--coba.group_weight",
)


#: (module, class or None for the module itself, method) -> the parameters coba-verl relies on, in
#: order. ``hierarchize`` is what the entry point stands in for, right after OpenRLHF's parser.
EXTENDED: dict[tuple[str, str | None, str], tuple[str, ...]] = {
    ("openrlhf.utils.config", None, "hierarchize"): ("args",),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator", "__init__"): (
        "self",
        "strategy",
        "prompts_dataloader",
        "eval_dataloader",
        "tokenizer",
        "vllm_engines",
    ),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator", "generate_samples"): (
        "self",
        "generate_kwargs",
    ),
    ("openrlhf.trainer.ppo_utils.samples_generator", "SamplesGenerator", "_dispatch_prompts_to_vllm"): (
        "self",
        "prompts",
        "labels",
        "images",
        "generate_kwargs",
    ),
    (
        "openrlhf.trainer.ppo_utils.samples_generator",
        "SamplesGenerator",
        "_process_response_into_experience",
    ): (
        "self",
        "response",
        "generate_kwargs",
    ),
    ("openrlhf.trainer.ppo_utils.experience_maker", "RemoteExperienceMaker", "__init__"): (
        "self",
        "actor_model_group",
        "critic_model_group",
        "reward_model_group",
        "initial_model_group",
        "kl_controller",
        "strategy",
        "tokenizer",
        "kwargs",
    ),
    ("openrlhf.trainer.ppo_utils.experience_maker", "RemoteExperienceMaker", "make_experience"): (
        "self",
        "samples_list",
    ),
    (
        "openrlhf.trainer.ppo_utils.experience_maker",
        "RemoteExperienceMaker",
        "compute_advantages_and_returns",
    ): (
        "self",
        "experiences",
    ),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer", "train_step"): (
        "self",
        "rollout_samples",
        "global_step",
    ),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer", "save_logs_and_checkpoints"): (
        "self",
        "global_step",
        "logs_dict",
        "client_states",
    ),
    ("openrlhf.trainer.ppo_trainer", "BasePPOTrainer", "init_checkpoint_states"): ("self",),
    ("openrlhf.trainer.ppo_trainer", "PPOTrainer", "get_max_steps"): ("self",),
}


def check_openrlhf_api() -> None:
    """Refuse to load against an OpenRLHF whose API differs from what coba-verl extends (`EXTENDED`,
    `coba_verl.framework_api.check_api`), or whose `PPOTrainer` is no Ray actor class with a
    Python class to subclass (Ray refuses a direct subclass of the actor class).

    Whether OpenRLHF's CLI still builds its trainer through the names the entry point stands in
    for is checked by what the CLI does when it runs (`coba_verl.openrlhf.train`).

    Raises:
        FrameworkMismatch: (an ImportError) naming the method, the signature found and the one expected.
    """
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    expected = {}
    for (module_name, owner, name), params in EXTENDED.items():
        module = importlib.import_module(module_name)
        found = getattr(module, owner) if owner else module
        expected[(actor_python_class(found) or found, name)] = params  # an actor class: its Python class
    check_api("OpenRLHF", "openrlhf", TESTED_VERSION, expected)
    if actor_python_class(ppo_trainer.PPOTrainer) is None:
        raise openrlhf_mismatch(
            "PPOTrainer is no longer a Ray actor class whose Python class coba-verl can subclass"
        )


def openrlhf_mismatch(problem: str) -> FrameworkMismatch:
    """The refusal of an OpenRLHF that is not the one tested (`coba_verl.framework_api.mismatch`)."""
    return mismatch("OpenRLHF", "openrlhf", TESTED_VERSION, problem)


def round_size(args: Any) -> int:
    """M, the prompts of one training round: what OpenRLHF draws per generation call."""
    return int(args.rollout.vllm_generate_batch_size or args.rollout.batch_size)


def async_refusal(async_enable: bool, partial_rollout: bool) -> str:
    """Why ``--train.async_enable`` and ``--train.partial_rollout_enable`` are refused, naming the ones set.

    OpenRLHF 0.11.2 allows partial rollout only as a mode of async (``cli/train_ppo_ray.py:717-718``):
    both are refused for async's decisive reason, with partial rollout's own consequence added.
    """
    flags = " with ".join(
        flag
        for flag, given in (
            ("--train.async_enable", async_enable),
            ("--train.partial_rollout_enable", partial_rollout),
        )
        if given
    )
    partial = (
        " Partial rollout (a mode of async, cli/train_ppo_ray.py:717-718) pauses vLLM with mode='keep' "
        "around each weight sync instead of locking (ppo_trainer_async.py:255-265, vllm_engine.py:130-131), "
        "so a sample's tokens may come from two policy versions."
        if partial_rollout
        else ""
    )
    return (
        f"{flags} is not supported with CoBA budgets: OpenRLHF's CLI then runs PPOTrainerAsync "
        "(cli/train_ppo_ray.py:145-146), whose GenerateSamplesActor builds OpenRLHF's own SamplesGenerator "
        "(trainer/ppo_trainer_async.py:58-64), so the budgets would be silently ignored. Beyond that, the "
        "generator runs up to --train.async_queue_size rounds ahead of training (ppo_trainer_async.py:110, "
        "229-230, 292-297), while coba-verl's tracker learns a round's pass rates in the trainer's "
        "train_step, so a round's budgets would be chosen without the previous rounds' scores; and async "
        "admits over-sampling (--rollout.vllm_generate_batch_size > --rollout.batch_size, "
        f"cli/train_ppo_ray.py:740-744), which cuts a round's samples into several training chunks.{partial} "
        "Drop --train.async_enable and --train.partial_rollout_enable."
    )


def check_args(args: Any, coba: CobaConfig) -> None:
    """Refuse OpenRLHF settings under which per-prompt budgets cannot work (on the parsed arguments).

    Raises:
        ValueError: ``--coba.budget_unit tokens`` (`require_rollout_budget`: a round is M x n
            samples); ``--coba.skip_spread_below`` > 0 and ``--coba.size_refills true``
            (`require_no_sync_dapo_options`); ``--train.async_enable`` or
            ``--train.partial_rollout_enable`` (`async_refusal`); ``--algo.dynamic_filtering_enable``; a
            ``--coba.prior_file`` that does not exist or that the trainer's reader
            (`read_prior_file`) refuses; ``--coba.group_weight equal`` with a
            ``--actor.loss_agg_mode`` `GROUP_WEIGHT_MODES` does not know (`check_aggregation`); no
            rollout engine (``--vllm.num_engines`` unset or 0); a round of M prompts whose M * n samples no
            budgets in [min_rollouts, max_rollouts] can spend (`check_budget`).
    """
    require_rollout_budget(coba, "OpenRLHF", "--coba.budget_unit")
    require_no_sync_dapo_options(coba, "OpenRLHF", "--coba.")
    if args.train.async_enable or args.train.partial_rollout_enable:
        raise CobaRefusal(
            async_refusal(bool(args.train.async_enable), bool(args.train.partial_rollout_enable))
        )
    if args.algo.dynamic_filtering_enable:
        raise CobaRefusal(
            "--algo.dynamic_filtering_enable is not supported with CoBA budgets: OpenRLHF drops a prompt "
            "whose mean score is not strictly inside --algo.dynamic_filtering_range and dispatches a "
            "replacement prompt with --rollout.n_samples_per_prompt samples, outside the round's "
            "allocation (samples_generator.py:168-191); the dropped group's scores never reach the "
            "tracker; and the training chunk is then cut at --rollout.batch_size x n samples of what was "
            "kept (samples_generator.py:100, 131-133), which would split groups of B_i samples across "
            "steps. coba-verl's generator does not run that filter loop, so the flag would be ignored. "
            "CoBA already moves budget away from prompts whose groups would carry no signal; drop "
            "--algo.dynamic_filtering_enable."
        )
    check_aggregation(coba.group_weight, str(args.actor.loss_agg_mode), GROUP_WEIGHT_MODES)
    if coba.prior_file is not None:  # the trainer's reader, before Ray
        read_prior_file(coba.prior_file, coba.prior_weight, f"{COBA_FLAG_PREFIX}prior_file")
    if not args.vllm.num_engines:
        raise CobaRefusal(
            f"--vllm.num_engines={args.vllm.num_engines!r}: CoBA budgets are sent to OpenRLHF's rollout "
            "engines, one request per prompt with its budget; OpenRLHF cannot generate without one "
            "(samples_generator.py indexes the engine list). Set --vllm.num_engines 1 or more."
        )
    n, m = int(args.rollout.n_samples_per_prompt), round_size(args)
    check_budget(
        m,
        m * n,
        coba.min_rollouts,
        coba.max_rollouts,
        total_name="--rollout.n_samples_per_prompt * prompts",
        low_name="--coba.min_rollouts",
        up_name="--coba.max_rollouts",
        fix=(
            f" --rollout.n_samples_per_prompt={n} is the mean budget per prompt of a round of {m} prompts; "
            "set it between --coba.min_rollouts and --coba.max_rollouts, or move the bounds."
        ),
    )
