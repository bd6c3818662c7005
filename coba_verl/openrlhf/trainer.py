"""`CobaPPOTrainer`: OpenRLHF 0.11.2's `PPOTrainer` Ray actor with CoBA per-prompt budgets.

`PPOTrainer` is declared with ``@ray.remote``, and Ray refuses a direct subclass of an actor class
(``ray/actor.py``), so the Python class behind it is subclassed
(`coba_verl.framework_api.actor_python_class`) and wrapped in ``ray.remote``
again. After upstream's ``__init__`` it installs:

    samples_generator  `CobaSamplesGenerator` (one request per prompt with n = B_i)
    experience_maker   `CobaExperienceMaker` (group baselines over the round's groups)
    allocator          the core `BudgetAllocator`, keyed by the prompt dataset's ``--coba.id_key``

and extends three `BasePPOTrainer` methods: `train_step` (feeds the tracker with the round's raw
scores and adds the ``coba/...`` metrics to the step's status, which OpenRLHF logs to wandb /
tensorboard and its step line), `save_logs_and_checkpoints` (the allocator's saved state, in the
format every glue keeps, `coba_verl.records.saved_state`, goes into the actor checkpoint's
``client_states`` as bytes) and `init_checkpoint_states` (restores it on
``--ckpt.load_enable``, so a resumed run allocates as the uninterrupted one would), and
`PPOTrainer.get_max_steps` (the driver's first call: it raises a refusal of the constructor, which
Ray would otherwise report only as the text of an ActorDiedError).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray
from openrlhf.datasets.utils import blending_datasets
from openrlhf.trainer.ppo_trainer import PPOTrainer
from openrlhf.utils.logging_utils import init_logger

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.core.metrics import step_metrics
from coba_verl.framework_api import actor_python_class
from coba_verl.openrlhf.checks import COBA_FLAG_PREFIX
from coba_verl.openrlhf.generator import CobaSamplesGenerator, IdentifiedPrompt
from coba_verl.openrlhf.groups import CobaExperienceMaker
from coba_verl.records.priors import seed_from_table
from coba_verl.records.prompt_ids import PromptIdMap
from coba_verl.records.saved_state import ResumeMismatch, decode, encode, identify, restore_state, saved_state
from coba_verl.refusal import CobaRefusal

__all__ = ["STATE_KEY", "CobaPPOTrainer", "CobaPPOTrainerClass", "prompt_id_map"]

logger = init_logger(__name__)

#: Key of the allocator's state in OpenRLHF's checkpoint ``client_states``.
STATE_KEY = "coba_allocator"

_UpstreamPPOTrainer = actor_python_class(PPOTrainer)  # checked by check_openrlhf_api


def prompt_rows(strategy: Any) -> Any:
    """The prompt dataset's raw rows (a HuggingFace ``Dataset``), loaded as OpenRLHF's
    `prepare_datasets` loads them, so that row i is row i of its `PromptDataset`."""
    args = strategy.args
    data = blending_datasets(
        args.data.prompt_dataset,
        args.data.prompt_probs,
        strategy,
        args.train.seed,
        max_count=args.data.max_samples,
        dataset_split=args.data.prompt_split,
    )
    return data.select(range(min(args.data.max_samples, len(data))))  # as prepare_datasets


def prompt_id_map(
    strategy: Any, num_rows: int, id_key: str, data: Any = None
) -> tuple[PromptIdMap, np.ndarray]:
    """The prompt dataset's ``id_key`` column (of ``data``, default `prompt_rows`).

    Returns:
        (map, ids): the checked id map, and (num_rows,) int64 tracker ids of the rows of OpenRLHF's
        `PromptDataset`, in its order.

    Raises:
        ValueError: the column is missing, the row counts differ, and `PromptIdMap`'s refusals
            (two rows with one id: their pass rates would be merged).
    """
    data = prompt_rows(strategy) if data is None else data
    if id_key not in data.column_names:
        raise CobaRefusal(
            f"--data.prompt_dataset has no column {id_key!r} (columns: {data.column_names}). CoBA keys each "
            f"prompt's pass rate by a stable id, not by its text (identical prompts must stay apart): add a "
            f"column of unique ids, e.g. the row number, or name yours with --coba.id_key."
        )
    if len(data) != num_rows:
        raise ValueError(f"the prompt dataset read {len(data)} rows for ids but OpenRLHF's has {num_rows}.")
    values = list(data[id_key])
    id_map = PromptIdMap(
        values,
        name=id_key,
        repeated_hint=(
            f"(--data.prompt_dataset column {id_key!r}; their pass rates would be merged). Give every row a "
            "unique id, e.g. its row number."
        ),
    )
    return id_map, id_map.ids(values)


class CobaPPOTrainerClass(_UpstreamPPOTrainer):
    """The Python class of `CobaPPOTrainer` (see the module docstring)."""

    def __init__(
        self,
        pretrain,
        strategy,
        actor_model_group,
        critic_model_group,
        reward_model_group,
        reference_model_group,
        vllm_engines,
        **generate_kwargs,
    ) -> None:
        super().__init__(
            pretrain,
            strategy,
            actor_model_group,
            critic_model_group,
            reward_model_group,
            reference_model_group,
            vllm_engines,
            **generate_kwargs,
        )
        # Ray reports an error of an actor's constructor as ActorDiedError, the error itself only as
        # text; a refusal is kept and raised by the driver's first call instead (`get_max_steps`),
        # whose task error carries it whole to the entry point's one-line report.
        self.coba_refusal: CobaRefusal | None = None
        try:
            self._install_coba(pretrain, strategy, vllm_engines)
        except CobaRefusal as refusal:
            self.coba_refusal = refusal

    def _install_coba(self, pretrain: Any, strategy: Any, vllm_engines: Any) -> None:
        coba = strategy.args.coba  # set by coba_verl.openrlhf.train
        self.coba_config = CobaConfig(**coba["config"])
        dataset, rows = self.prompts_dataloader.dataset, prompt_rows(strategy)
        id_map, ids = prompt_id_map(strategy, len(dataset), coba["id_key"], rows)
        # What a resume checks its checkpoint against: the ids, each row's prompt, the model
        # (--actor.model_name_or_path, which OpenRLHF hands over as ``pretrain``).
        self.coba_identity = identify(id_map, ids, list(dataset.prompts), pretrain)
        self.coba_id_key = coba["id_key"]
        dataset.prompts = [IdentifiedPrompt(p, i) for p, i in zip(dataset.prompts, ids.tolist(), strict=True)]
        self.allocator = BudgetAllocator(self.coba_config, id_map.num_prompts)
        cfg = self.coba_config  # priors before any checkpoint: a resume's tracker replaces them
        seed_from_table(
            self.allocator.tracker, id_map, cfg.prior_field, cfg.prior_file, cfg.prior_weight, rows,
            coba["id_key"], COBA_FLAG_PREFIX,
        )  # fmt: skip
        self.samples_generator = CobaSamplesGenerator(
            strategy=strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=self.tokenizer,
            vllm_engines=vllm_engines,
            allocator=self.allocator,
        )
        self.experience_maker = CobaExperienceMaker(
            self.actor_model_group,
            self.critic_model_group,
            self.reward_model_group,
            self.reference_model_group,
            self.kl_ctl,
            self.strategy,
            self.tokenizer,
        )
        self.experience_maker.group_weight = self.coba_config.group_weight

    def get_max_steps(self):
        """OpenRLHF's, after raising the refusal the constructor kept (the driver calls it first)."""
        if self.coba_refusal is not None:
            raise self.coba_refusal
        return super().get_max_steps()

    def train_step(self, rollout_samples, global_step):
        current = self.samples_generator.last_round
        self.experience_maker.round = current
        status, next_step = super().train_step(rollout_samples, global_step)
        self.allocator.observe(current.rollout_ids, self.experience_maker.raw_scores)
        status.update(step_metrics(current.allocation, self.allocator.end_step()))
        logger.info(
            "coba step %d: tracker ids %s budgets %s",
            next_step,
            current.ids.tolist(),
            current.budgets.tolist(),
        )
        return status, next_step

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        client_states = dict(client_states or {})
        client_states[STATE_KEY] = encode(saved_state(self.allocator, self.coba_identity))
        return super().save_logs_and_checkpoints(global_step, logs_dict, client_states)

    def init_checkpoint_states(self):
        states = super().init_checkpoint_states()
        saved = states.get(STATE_KEY)
        if saved is None:
            if states.get("global_step", 0) > 0:
                logger.warning("the checkpoint has no %s: the tracker starts empty", STATE_KEY)
            return states
        start_fresh = (
            "Resume with the --data.prompt_dataset, --coba.id_key and --actor.model_name_or_path the "
            "checkpoint was written with, or start without --ckpt.load_enable."
        )
        try:
            record = decode(saved)
        except ResumeMismatch as err:
            raise ResumeMismatch(f"{err} {start_fresh}") from None
        restore_state(
            record,
            self.allocator,
            self.coba_identity,
            ids_name=f"--data.prompt_dataset column {self.coba_id_key!r}",
            start_fresh=start_fresh,
        )
        return states


CobaPPOTrainer = ray.remote(CobaPPOTrainerClass)
