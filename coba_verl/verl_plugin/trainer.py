"""`CobaTrainer`: veRL 0.9's synchronous V1 trainer with CoBA-RL budgets per prompt.

Five methods of `PPOTrainerSync` (verl 0.9.1, ``verl/trainer/ppo/v1/``) are extended; each calls
the original, and ``fit()`` is veRL's own (`check_verl_api` checks them at import):

``_init_dataloader``         veRL's loaders, then the training loader rebuilt as `CobaDataLoader`
                             (same sampler, plus the allocator in its checkpoint state).
``_init_resource_pool_mgr``  veRL's worker map; with the CPU backend on (``coba_cpu.enable``), its
                             actor worker swapped for the gloo-only one (`coba_verl.cpu.workers`).
``_submit_batch_to_rollout`` B = allocate(ids, M * rollout.n) for the submitted batch, keyed by
                             ``extra_info.index``; ``batch["__rollout_n__"] = B`` (int64 [M]),
                             which veRL's ``AgentLoopWorkerTQ._run_prompt`` reads as n per prompt.
``_compute_advantage``       veRL's GRPO advantage over the variable groups (grouped by uid), then
                             each group's finished sessions are checked against its B_i (an error
                             if they differ) and their scores go to the tracker.
``step``                     veRL's step, then ``allocator.end_step()`` (windows, F_bar, alpha/beta
                             for the next step) and the ``coba/`` metrics. ``fit()`` writes the
                             checkpoint after ``step`` returns, so data.pt holds the updated tracker.

One step, M = 3 prompts, rollout.n = 4::

    batch index        [17, 3, 42]           (extra_info.index)
    tracker ids        [ 2, 0,  3]
    __rollout_n__      [ 2, 7,  3]           int64, sum 12 = M * n
    trajectory keys    uid0_0_0 uid0_1_0 | uid1_0_0 ... uid1_6_0 | uid2_0_0 ... uid2_2_0
    observe            ids [2, 2, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3], one score each
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import Counter

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from coba_verl.core import Allocation, BudgetAllocator
from coba_verl.core.metrics import merge_allocations, step_metrics
from coba_verl.verl_plugin.config_bridge import COBA_TRAINER_MODE, check_config, check_total
from coba_verl.verl_plugin.dataloader import CobaDataLoader

logger = logging.getLogger(__name__)

#: The veRL methods `CobaTrainer` extends and the parameters it calls them with (veRL 0.9.1).
EXTENDED_METHODS: dict[str, tuple[str, ...]] = {
    "_init_dataloader": ("self",),
    "_init_resource_pool_mgr": ("self",),
    "_submit_batch_to_rollout": ("self", "batch"),
    "_compute_advantage": ("self", "batch", "metrics"),
    "step": ("self", "metrics", "timing_raw"),
}


def check_verl_api(base: type = PPOTrainerSync) -> None:
    """Refuse to load against a veRL whose trainer lacks a method we extend, or changed its parameters.

    A renamed hook would otherwise be silently never called: budgets would stop reaching the
    engine, or the tracker would stop learning, with no error.

    Raises:
        ImportError: naming the method, the signature found and the one expected.
    """
    import verl

    fix = (
        "(tested with veRL 0.9.1). Install a veRL version that coba-verl supports: pip install 'verl==0.9.1'."
    )
    for name, expected in EXTENDED_METHODS.items():
        method = getattr(base, name, None)
        if method is None:
            raise ImportError(
                f"veRL {verl.__version__}: {base.__name__}.{name} does not exist; coba-verl extends it {fix}"
            )
        if tuple(inspect.signature(method).parameters) != expected:
            raise ImportError(
                f"veRL {verl.__version__}: {base.__name__}.{name}{inspect.signature(method)} differs from "
                f"the ({', '.join(expected)}) that coba-verl extends {fix}"
            )


check_verl_api()


@register_trainer(COBA_TRAINER_MODE)
class CobaTrainer(PPOTrainerSync):
    """The synchronous V1 PPO/GRPO trainer of veRL with CoBA-RL rollout budgets.

    Selected by ``trainer.v1.trainer_mode=coba_sync`` (``python -m coba_verl.main`` sets it).

    Args:
        config: veRL's composed config with an optional ``coba`` node (`CobaConfig` fields).

    Raises:
        ValueError: for the configurations `check_config` refuses, and from a step whose
            allocation does not spend exactly M * rollout.n rollouts.
    """

    def __init__(self, config: DictConfig) -> None:
        self.coba_config = check_config(config)
        # veRL's trainer base treats any mode but "sync" as asynchronous; the registered name has
        # done its job (selecting this class) once we are constructed.
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config)
        # uid -> (tracker id, B_i) of every submitted group not yet trained on. A group that
        # arrives in a later step than it was submitted stays here until it does.
        self._pending: dict[str, tuple[int, int]] = {}
        self._allocations: list[Allocation] = []  # this step's allocations, one per submission
        self._plugin_time_s = 0.0  # wall time spent in coba-verl's code this step

    @property
    def allocator(self) -> BudgetAllocator:
        """The run's allocator; it lives in the training dataloader so that data.pt carries it."""
        return self.train_dataloader.allocator

    # ------------------------------------------------------------------ veRL extension points
    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        self.train_dataloader = CobaDataLoader.wrap(self.train_dataloader, self.coba_config)

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        if OmegaConf.select(self.config, "coba_cpu.enable"):
            from coba_verl.cpu.workers import use_gloo_workers

            use_gloo_workers(self.role_worker_mapping)

    def _submit_batch_to_rollout(self, batch: TensorDict) -> int:
        """Set ``__rollout_n__`` (int64 [M]) from the allocator, then submit as veRL does."""
        start = time.perf_counter()
        ids = self.train_dataloader.prompt_ids.ids(list(batch["index"]))  # (M,) tracker ids
        rollout_n = int(self.config.actor_rollout_ref.rollout.n)
        allocation = self.allocator.allocate(ids, len(batch) * rollout_n)
        check_total(int(allocation.budgets.sum()), len(batch), rollout_n)
        batch["__rollout_n__"] = torch.as_tensor(allocation.budgets, dtype=torch.int64)  # (M,)
        groups = zip(ids.tolist(), allocation.budgets.tolist(), strict=True)  # (tracker id, B_i)
        self._pending.update(zip(map(str, batch["uid"]), groups, strict=True))
        self._allocations.append(allocation)
        self._plugin_time_s += time.perf_counter() - start
        return super()._submit_batch_to_rollout(batch)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """veRL's advantage (GRPO groups by uid, any group size), then feed the tracker."""
        batch = super()._compute_advantage(batch, metrics)
        start = time.perf_counter()
        self._observe(batch)
        self._plugin_time_s += time.perf_counter() - start
        return batch

    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        """veRL's step, then commit the tracker (before fit() may checkpoint) and add ``coba/`` metrics."""
        batch = super().step(metrics, timing_raw)
        start = time.perf_counter()
        tracker_metrics = self.allocator.end_step()
        if self._allocations:
            metrics.update(step_metrics(merge_allocations(self._allocations), tracker_metrics))
        self._allocations.clear()
        # allocate + observe (with its TransferQueue read of the scores) + end_step + metrics
        metrics["coba/plugin_time_s"] = self._plugin_time_s + time.perf_counter() - start
        self._plugin_time_s = 0.0
        if self._pending:
            logger.warning(
                "%d submitted prompt groups have not reached training yet (first uids %s); they feed "
                "the tracker in the step that trains on them",
                len(self._pending),
                list(self._pending)[:3],
            )
        return batch

    # ------------------------------------------------------------------ helpers
    def _observe(self, batch: KVBatchMeta) -> None:
        """Check each group's session count against its B_i, then record one score per session.

        Keys are ``{uid}_{session}_{output}``; multi-output agent loops score the final output
        (as veRL's multi-trajectory GRPO does). Padding rows added by veRL's batch balancing are
        skipped. A group whose number of finished sessions differs from its budget means that the
        rollout engine did not honour ``__rollout_n__``: that is an error, not a warning.
        """
        final: dict[str, tuple[int, str]] = {}  # "{uid}_{session}" -> (output index, key)
        for key, tag in zip(batch.keys, batch.tags, strict=True):
            if tag.get("is_padding", False):
                continue
            uid, session, output = key.rsplit("_", 2)
            session_key = f"{uid}_{session}"
            if session_key not in final or final[session_key][0] < int(output):
                final[session_key] = (int(output), key)
        keys = [key for _, key in final.values()]
        uids = [key.rsplit("_", 2)[0] for key in keys]
        sessions = Counter(uids)  # uid -> finished sessions in this batch
        unknown = sorted(uid for uid in sessions if uid not in self._pending)
        if unknown:
            logger.warning(
                "ignoring %d trajectory groups that were not submitted through the allocator (e.g. "
                "replayed by skip.rollout_tq): %s",
                len(unknown),
                unknown[:3],
            )
        for uid in sorted(set(sessions) - set(unknown)):
            expected = self._pending[uid][1]
            if sessions[uid] != expected:
                raise RuntimeError(
                    f"prompt group uid={uid} finished {sessions[uid]} sessions but was allocated "
                    f"B_i={expected} rollouts: the rollout engine did not honour __rollout_n__. A custom "
                    "agent_loop_manager_class must generate batch['__rollout_n__'][i] sessions for prompt i, "
                    "as veRL's AgentLoopWorkerTQ does."
                )
        keep = [i for i, uid in enumerate(uids) if uid in self._pending]
        keys, uids = [keys[i] for i in keep], [uids[i] for i in keep]
        if not keys:
            return
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["rm_scores"])
        scores = data["rm_scores"].sum(dim=1).to(torch.float64).numpy()  # (R,) one per session
        ids = np.asarray([self._pending[uid][0] for uid in uids], dtype=np.int64)  # (R,)
        self.allocator.observe(ids, scores)
        for uid in set(uids):
            del self._pending[uid]
