"""CoBA-RL in veRL's classic trainer (``trainer.use_v1=false``, ``RayPPOTrainer.fit()``).

The classic ``fit()`` (``verl/trainer/ppo/ray_trainer.py``, veRL 0.9.1) gives every prompt row a
uid (:1482), calls ``_get_gen_batch`` (:1486), repeats the batch ``rollout.n`` times (:1491,
:1540), generates one agent-loop session per row and groups GRPO by uid (:240-245). Nothing in it
reads a per-prompt n, so the budgets are expressed in rows, without a copy of ``fit()``:

1. `translate_config` (before veRL sees the config): ``rollout.n = 1``, so both repeats copy;
   ``data.gen_batch_size = M`` (the loader still yields the user's M prompts, so steps per epoch
   are unchanged); ``data.train_batch_size = M * n`` and ``ppo_mini_batch_size *= n`` for actor
   and critic (``_update_actor`` multiplies the latter by ``rollout.n``, :1352-1353), so every
   mini-batch, ``validate_config`` divisibility and optimizer step count is what it is under the
   user's ``rollout.n = n``. The user's values are kept in ``coba_classic``.
2. `CobaRayPPOTrainer._get_gen_batch`: B = allocate(ids, M * n); the batch's M rows become
   sum(B) = M * n rows in place, prompt i's row B_i times with its uid, before veRL splits off the
   generation batch. Validation (which calls the same method, :626) is left alone.
3. `CobaRayPPOTrainer._update_actor` (:1690, before the checkpoint at :1704): the rows'
   ``token_level_scores`` feed the tracker, ``end_step`` runs and the ``coba/`` metrics join the
   actor's (``reduce_metrics`` of its ``meta_info["metrics"]``). No ``coba/failed_rollouts`` is
   logged here: every row is one agent-loop session, and veRL's ``AgentLoopWorker`` gathers a
   batch's sessions without ``return_exceptions`` (``experimental/agent_loop/agent_loop.py:654``),
   so a session that raises stops the step instead of leaving its group short.
   With ``coba.group_weight=equal``, ``batch["advantages"]`` (computed at :1667) is first
   multiplied row by row by (R / G) / B_g (`weight_advantages`).

Construction: ``main_ppo_v0.TaskRunner.run`` builds ``RayPPOTrainer`` by name (:218) and veRL
has no trainer registry for the classic path, so `CobaTaskRunner.run` makes the same calls to
TaskRunner's own helpers with `CobaRayPPOTrainer` (a Ray actor class cannot be subclassed, so it
extends the Python class behind it, `coba_verl.framework_api.actor_python_class`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import ray
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from verl import DataProto
from verl.trainer.main_ppo_v0 import TaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from coba_verl.core import BudgetAllocator
from coba_verl.core.group_weight import check_group_weight, rollout_weights
from coba_verl.core.metrics import PREFIX, step_metrics
from coba_verl.core.step_line import held_out_score, step_line
from coba_verl.framework_api import actor_python_class
from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.hooks.dataloader import STATE_KEY, CobaDataLoader
from coba_verl.verl_plugin.launch.config_bridge import check_config, user_batch
from coba_verl.verl_plugin.verl_names import HELD_OUT_PREFIX

logger = logging.getLogger(__name__)

#: Config node holding the user's values that `translate_config` replaced.
CLASSIC_NODE = "coba_classic"


def translate_config(config: DictConfig) -> None:
    """Turn the user's (M prompts, rollout.n = n) into the rows the classic ``fit()`` generates.

    Idempotent: a config already translated (``coba_classic.rollout_n`` set) is left alone.

    Raises:
        ValueError: DAPO dynamic sampling (the classic ``fit()`` has none: only V1 runs
            ``algorithm.filter_groups``); ``trainer.critic_warmup > 0`` (``fit()`` skips
            ``_update_actor``, where the tracker is fed, :1684); a ``data.gen_batch_size`` other
            than ``data.train_batch_size`` (the classic loader's batch is one step's prompts).
    """
    if OmegaConf.select(config, f"{CLASSIC_NODE}.rollout_n") is not None:
        return
    if OmegaConf.select(config, "algorithm.filter_groups.enable"):
        raise CobaRefusal(
            "algorithm.filter_groups.enable=true with trainer.use_v1=false: veRL 0.9.1's classic "
            "RayPPOTrainer.fit() has no DAPO dynamic sampling (only the V1 trainer's replay buffer runs it), "
            "so the setting would be ignored. Set trainer.use_v1=true for DAPO with CoBA budgets."
        )
    if int(OmegaConf.select(config, "trainer.critic_warmup", default=0) or 0) > 0:
        raise CobaRefusal(
            f"trainer.critic_warmup={config.trainer.critic_warmup} is not supported with "
            "trainer.use_v1=false: fit() skips _update_actor during the warmup (ray_trainer.py:1684), "
            "which is where the CoBA-RL tracker is fed. Set trainer.critic_warmup=0."
        )
    m, n = int(config.data.train_batch_size), int(config.actor_rollout_ref.rollout.n)
    gen_batch_size = OmegaConf.select(config, "data.gen_batch_size")
    if gen_batch_size not in (None, m):
        raise CobaRefusal(
            f"data.gen_batch_size={gen_batch_size} with trainer.use_v1=false: each loader batch must be one "
            f"step's M=data.train_batch_size={m} prompts, over which CoBA-RL allocates. Unset "
            "data.gen_batch_size."
        )
    actor = config.actor_rollout_ref.actor
    critic = OmegaConf.select(config, "critic")
    # read both before writing either: veRL's critic.ppo_mini_batch_size interpolates the actor's
    actor_mini = int(actor.ppo_mini_batch_size)
    critic_mini = critic.get("ppo_mini_batch_size") if critic is not None else None
    critic_mini = int(critic_mini) if critic_mini is not None else None
    with open_dict(config):
        config[CLASSIC_NODE] = {
            "train_batch_size": m,
            "rollout_n": n,
            "actor_ppo_mini_batch_size": actor_mini,
        }
        config.actor_rollout_ref.rollout.n = 1
        config.data.gen_batch_size = m
        config.data.train_batch_size = m * n
        actor.ppo_mini_batch_size = actor_mini * n
        if critic_mini is not None:
            config[CLASSIC_NODE].critic_ppo_mini_batch_size = critic_mini
            critic.ppo_mini_batch_size = critic_mini * n
    logger.info(
        "classic trainer: rollout.n=%d -> 1 with B_i rows per prompt; data.train_batch_size %d -> %d rows, "
        "data.gen_batch_size=%d prompts, actor.ppo_mini_batch_size %d -> %d rows",
        n, m, m * n, m, config[CLASSIC_NODE].actor_ppo_mini_batch_size, actor.ppo_mini_batch_size,
    )  # fmt: skip


def weight_advantages(batch: DataProto, group_weight: str) -> None:
    """Multiply ``batch.batch["advantages"]`` (R, T) in place by `rollout_weights` of its uids.

    The classic trainer generates one session per row, so R is the batch's rows, G its uids and
    B_g the rows of uid g. ``proportional``, and groups all of one size, leave the tensor untouched.
    """
    if check_group_weight(group_weight) == "proportional":
        return
    uids = np.asarray([str(uid) for uid in batch.non_tensor_batch["uid"]])  # (R,)
    advantages = batch.batch["advantages"]  # (R, T)
    weights = rollout_weights(uids, group_weight)  # (R,)
    if bool(np.all(weights == 1.0)):  # groups of one size (uniform): the tensor stays as veRL made it
        return
    factors = torch.as_tensor(weights, dtype=advantages.dtype)
    batch.batch["advantages"] = advantages * factors.to(advantages.device)[:, None]


class CobaRayPPOTrainer(RayPPOTrainer):
    """veRL's classic `RayPPOTrainer` with CoBA-RL budgets per prompt (module docstring).

    Args:
        config: a config passed through `translate_config`; other arguments as `RayPPOTrainer`.

    Raises:
        ValueError: the config was not translated, or `check_config` refuses it.
    """

    def __init__(self, config: DictConfig, *args: Any, **kwargs: Any) -> None:
        if OmegaConf.select(config, f"{CLASSIC_NODE}.rollout_n") is None:
            raise CobaRefusal(
                "CobaRayPPOTrainer needs the row translation of "
                "coba_verl.verl_plugin.hooks.classic.translate_config (python -m coba_verl.main applies it "
                "when trainer.use_v1=false)."
            )
        self.coba_config = check_config(config)
        self._prompts, self._rollout_n = user_batch(config)
        self._pending: dict[str, tuple[int, int]] = {}  # uid -> (tracker id, B_i) of this step
        self._allocation = None
        self._validating = False
        self._plugin_time_s = 0.0
        super().__init__(config, *args, **kwargs)  # builds the dataloader (_create_dataloader)

    @property
    def allocator(self) -> BudgetAllocator:
        """The run's allocator; it lives in the training dataloader so that data.pt carries it."""
        return self.train_dataloader.allocator

    # ------------------------------------------------------------------ veRL extension points
    def _create_dataloader(self, *args: Any, **kwargs: Any) -> None:
        super()._create_dataloader(*args, **kwargs)
        self.train_dataloader = CobaDataLoader.wrap(
            self.train_dataloader,
            self.coba_config,
            model_path=self.config.actor_rollout_ref.model.path,
        )

    def _validate(self, *args: Any, **kwargs: Any) -> dict:
        """veRL's validation (its `_get_gen_batch` calls are not allocated); logs the held-out score."""
        self._validating = True
        try:
            val_metrics = super()._validate(*args, **kwargs)
        finally:
            self._validating = False
        held_out = held_out_score(val_metrics, HELD_OUT_PREFIX)
        if held_out is not None:
            logger.info("coba-verl step %d: held-out %.3f (%s)", self.global_steps, held_out[1], held_out[0])
        return val_metrics

    def _get_gen_batch(self, batch: DataProto) -> DataProto:
        """Allocate the step's budgets and give prompt i B_i rows (in place), then veRL's split."""
        if not self._validating:
            start = time.perf_counter()
            ids = self.train_dataloader.prompt_ids.ids(list(batch.non_tensor_batch["index"]))  # (M,)
            allocation = self.allocator.allocate(ids, len(ids) * self._rollout_n)
            budgets = allocation.budgets
            uids = [str(uid) for uid in batch.non_tensor_batch["uid"]]
            self._pending = dict(zip(uids, zip(ids.tolist(), budgets.tolist(), strict=True), strict=True))
            self._allocation = allocation
            rows = batch.select_idxs(np.repeat(np.arange(len(ids)), budgets))  # (sum B,) rows
            batch.batch, batch.non_tensor_batch = rows.batch, rows.non_tensor_batch
            self._plugin_time_s += time.perf_counter() - start
        return super()._get_gen_batch(batch)

    def _update_actor(self, batch: DataProto) -> DataProto:
        """Feed the tracker from the step's scores and commit it, then veRL's actor update."""
        start = time.perf_counter()
        uids = [str(uid) for uid in batch.non_tensor_batch["uid"]]
        unknown = set(uids) - set(self._pending)
        if unknown:
            raise RuntimeError(
                f"{len(unknown)} trained prompt groups (e.g. uid={sorted(unknown)[0]}) were not allocated by "
                "CoBA-RL this step; the classic trainer trains only the groups it generated."
            )
        scores = batch.batch["token_level_scores"].sum(dim=-1).to(torch.float64).cpu().numpy()  # (R,)
        ids = np.asarray([self._pending[uid][0] for uid in uids], dtype=np.int64)
        self.allocator.observe(ids, scores)
        metrics = step_metrics(self._allocation, self.allocator.end_step())
        self._pending = {}
        weight_advantages(batch, self.coba_config.group_weight)
        plugin_s = self._plugin_time_s + time.perf_counter() - start
        self._plugin_time_s = 0.0
        output = super()._update_actor(batch)
        metrics[PREFIX + "plugin_time_s"] = plugin_s
        output.meta_info.setdefault("metrics", {}).update(metrics)
        logger.info(step_line(self.global_steps, metrics, HELD_OUT_PREFIX))
        return output

    def _load_checkpoint(self) -> Any:
        """veRL's resume; at an epoch boundary, where veRL skips data.pt (:1104-1112), the allocator still."""
        result = super()._load_checkpoint()
        if self.global_steps > 0 and self.allocator.tracker.steps == 0:
            folder = self._resumed_folder()
            path = os.path.join(folder, "data.pt") if folder else None
            if path and os.path.exists(path):
                state = torch.load(path, weights_only=False)
                self.train_dataloader.load_coba_state(state.get(STATE_KEY))
        return result

    def _resumed_folder(self) -> str | None:
        """The ``global_step_<t>`` folder veRL's ``_load_checkpoint`` resumed from."""
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        trainer = self.config.trainer
        if trainer.resume_mode == "resume_path":
            return os.path.abspath(trainer.resume_from_path)
        return find_latest_ckpt_path(os.path.abspath(trainer.default_local_dir))


@ray.remote
class CobaTaskRunner(actor_python_class(TaskRunner)):
    """veRL's classic ``TaskRunner`` building `CobaRayPPOTrainer` (and the CPU backend's workers)."""

    def add_actor_rollout_worker(self, config: DictConfig) -> tuple:
        classes = super().add_actor_rollout_worker(config)
        if OmegaConf.select(config, "coba_cpu.enable"):
            from coba_verl.cpu.workers import use_gloo_workers

            use_gloo_workers(self.role_worker_mapping)
        return classes

    def run(self, config: DictConfig) -> None:
        """``main_ppo_v0.TaskRunner.run``'s calls (veRL 0.9.1), building `CobaRayPPOTrainer`."""
        from verl.trainer.ppo import utils
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        OmegaConf.resolve(config)
        actor_rollout_cls, ray_worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        use_reference_policy, use_critic = utils.need_reference_policy(config), utils.need_critic(config)
        validate_config(config, use_reference_policy=use_reference_policy, use_critic=use_critic)
        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        data = config.data

        def dataset(files: Any, is_train: bool, max_samples: int) -> Any:
            return utils.create_rl_dataset(
                files, data, model_config.tokenizer, model_config.processor, is_train=is_train,
                max_samples=max_samples,
            )  # fmt: skip

        train_dataset = dataset(data.train_files, True, data.get("train_max_samples", -1))
        trainer = CobaRayPPOTrainer(
            config=config,
            tokenizer=model_config.tokenizer,
            processor=model_config.processor,
            role_worker_mapping=self.role_worker_mapping,
            resource_pool_manager=self.init_resource_pool_mgr(config),
            ray_worker_group_cls=ray_worker_group_cls,
            train_dataset=train_dataset,
            val_dataset=dataset(data.val_files, False, data.get("val_max_samples", -1)),
            collate_fn=collate_fn,
            train_sampler=utils.create_rl_sampler(data, train_dataset),
        )
        trainer.init_workers()
        trainer.fit()
