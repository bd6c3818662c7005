"""`CobaBudgets`: CoBA-RL budgets per prompt in veRL 0.9's V1 trainers, mixed into its synchronous
trainer (`CobaTrainer`, ``trainer_mode=sync``), its ``colocate_async`` one (`CobaColocateAsyncTrainer`)
and its ``separate_async`` one (`CobaSeparateAsyncTrainer`).

Methods of veRL's trainer (verl 0.9.1, ``verl/trainer/ppo/v1/``) are extended; each calls the
original, and ``fit()`` is veRL's own (`check_verl_api` checks them at import, for both bases):

``_init_dataloader``         veRL's loaders, then the training loader rebuilt as `CobaDataLoader`
                             (same sampler, plus the allocator and the buffer's cut count in data.pt).
``_build_replay_buffer``     veRL's sync buffer rebuilt as `CobaReplayBuffer`, which shows the
                             groups DAPO evicts or discards to the tracker before clearing them and,
                             under DAPO with budgets, trains exactly M * rollout.n rollouts a step
                             (`core.trained_budget`; the sessions it cuts go to the tracker too).
``_next_train_batch``        prompts in sampler order, allocated a round of M = train_batch_size
                             at a time: B = allocate(ids, M * rollout.n), ``batch["__rollout_n__"]
                             = B`` (int64), which veRL's ``AgentLoopWorkerTQ._run_prompt`` reads as
                             n per prompt. A submission (one per step, plus DAPO's refills of any
                             size) takes the next prompts of the current round, so every round
                             spends exactly M * rollout.n rollouts however it is submitted (with
                             ``coba.size_refills``, less what `refill_sizing` trims).
``_submit_batch_to_rollout`` remembers each submitted group's (tracker id, B_i), then submits.
``_compute_advantage``       veRL's GRPO advantage over the variable groups (grouped by uid); with
                             ``coba.group_weight=equal`` each session's advantage times
                             (R / G) / B_g (`group_weight_of_keys`), applied inside veRL's pass
                             before its one write (`advantage`); then the trained groups'
                             scores and response lengths go to the tracker (`sessions`' rule for
                             failed sessions and for an engine that ignores budgets), and what the
                             step trains is counted (`trained_cost`).
``step``                     veRL's step, then the step's ledger closed (`RolloutLedger.close_step`:
                             in the sync trainer a group still open failed), the versions of the
                             groups still in flight held open in the tracker (`CapabilityTracker.
                             hold_open`, at most the staleness bound: `held_open_from`),
                             ``allocator.end_step()`` (windows, F_bar, alpha/beta for
                             the next step) and the ``coba/`` metrics. ``fit()`` writes the
                             checkpoint after ``step`` returns, so data.pt holds the updated
                             tracker and the unsubmitted rest of the round.
``_load_checkpoint``         veRL's resume; in ``colocate_async`` the prompt groups restored from
                             TransferQueue reopen in the ledger, in flight, counted once.
``_reissue_inflight_prompts`` veRL's re-issue; the ledger dates the re-issued groups to this step.

Each trainer class also mixes in two things that are not about budgets, each from its home: the
step's readable line and a validation progress bar (`progress.ProgressLines`: ``_compute_metrics``,
``on_validate_begin/_end``), and the CPU backend's gloo workers (`coba_verl.cpu.workers.GlooWorkers`:
``_init_resource_pool_mgr``, a no-op unless ``coba_cpu.enable``).

Each scored session is dated to the weights that finished it (`session_versions`): under partial
rollout an answer aborted at a weight update is resumed, with its tokens, under the new weights.

Every session's fate is written once, in the ledger (`coba_verl.records.ledger`): trained
(``_compute_advantage``), cut (the buffer's ``on_trim``), evicted (the buffer's ``on_clear``, before
TransferQueue forgets the group) or failed (a group closed without it); the ``coba/`` rollout
counters are the step's tally.

One step, M = 3 prompts, rollout.n = 4::

    batch index        [17, 3, 42]           (extra_info.index)
    tracker ids        [ 2, 0,  3]
    __rollout_n__      [ 2, 7,  3]           int64, sum 12 = M * n
    trajectory keys    uid0_0_0 uid0_1_0 | uid1_0_0 ... uid1_6_0 | uid2_0_0 ... uid2_2_0
    observe            ids [2, 2, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3], one score each
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from coba_verl.core import Allocation, BudgetAllocator
from coba_verl.core.metrics import PREFIX, merge_allocations, step_metrics
from coba_verl.cpu.workers import GlooWorkers
from coba_verl.records.ledger import Fate, RolloutLedger
from coba_verl.verl_plugin.hooks.advantage import (
    advantage_route,
    group_weight_of_keys,
    weight_written_advantages,
    weighted_advantage_pass,
)
from coba_verl.verl_plugin.hooks.async_replay_buffer import CobaReplayBufferAsync
from coba_verl.verl_plugin.hooks.dataloader import CobaDataLoader
from coba_verl.verl_plugin.hooks.progress import ProgressLines
from coba_verl.verl_plugin.hooks.refill_sizing import RefillSizer
from coba_verl.verl_plugin.hooks.replay_buffer import CobaBufferHooks, CobaReplayBuffer
from coba_verl.verl_plugin.hooks.session_fates import SessionFates
from coba_verl.verl_plugin.hooks.sessions import final_outputs
from coba_verl.verl_plugin.hooks.step_counts import (
    COST_COUNTS,
    ledger_metrics,
    trained_cost,
)
from coba_verl.verl_plugin.hooks.verl_guards import check_verl_api
from coba_verl.verl_plugin.launch.config_bridge import check_config
from coba_verl.verl_plugin.launch.mandatory_values import check_mandatory_values
from coba_verl.verl_plugin.verl_names import COBA_MODES

logger = logging.getLogger(__name__)

#: How veRL's engine reads a group's budget, for the ledger's error on a session beyond it.
BUDGET_HINT = (
    "A custom agent_loop_manager_class must generate batch['__rollout_n__'][i] sessions for prompt i "
    "(it did not honour __rollout_n__), as veRL's AgentLoopWorkerTQ does."
)

check_verl_api(PPOTrainerSync)
check_verl_api(PPOTrainerColocateAsync)
check_verl_api(PPOTrainerSeparateAsync)


#: Policy versions F_bar waits for a group in flight at most, where veRL's
#: ``trainer.v1.sampler.max_off_policy_threshold`` is null (its default is 8 too).
HELD_OPEN_LIMIT = 8

#: veRL's own replay buffer classes and the CoBA one each is rebuilt as (same constructor arguments).
COBA_BUFFERS: dict[type, type] = {ReplayBuffer: CobaReplayBuffer, ReplayBufferAsync: CobaReplayBufferAsync}


class CobaBudgets(SessionFates):
    """CoBA-RL rollout budgets for a veRL V1 trainer: the methods of the module docstring, mixed in
    before veRL's trainer class (`CobaTrainer`, `CobaColocateAsyncTrainer`).

    Args:
        config: veRL's composed config with an optional ``coba`` node (`CobaConfig` fields).

    Raises:
        ValueError: for a mandatory value of veRL's config left unset (`check_mandatory_values`),
            the configurations `check_config` refuses, and ``coba.size_refills=true``
            with a custom sampler (`check_size_refills`; ``auto`` is off there).
        LedgerError: when the rollout engine generates more sessions than a group's budget.
    """

    #: veRL's name of the mode this trainer runs (``trainer.v1.trainer_mode`` as veRL reads it).
    VERL_MODE: str = "sync"

    def __init__(self, config: DictConfig) -> None:
        # The first check of ours under veRL's own launcher (main_ppo): name ??? values before a worker.
        check_mandatory_values(config)
        self.coba_config = check_config(config)
        # veRL's trainer base branches on the mode's own name ("sync", "colocate_async"); the
        # registered name has done its job (selecting this class) once we are constructed.
        with open_dict(config):
            config.trainer.v1.trainer_mode = self.VERL_MODE
        # Every submitted group and each session's fate (trained, cut, evicted, failed, in flight).
        # veRL's sync buffer trains, evicts or discards every group of a step within the step; in
        # the async modes groups stay in flight across steps.
        self.ledger = RolloutLedger(overrun_hint=BUDGET_HINT)
        self._allocations: list[Allocation] = []  # rounds allocated this step
        self._cost: Counter = Counter()  # this step's `trained_cost`
        self._plugin_time_s = 0.0  # wall time spent in coba-verl's code this step
        self._settled_below = 0  # versions below it were settled while groups of theirs were in flight
        super().__init__(config)  # builds the replay buffer, which needs the fields above
        # where coba.group_weight's factor meets veRL's advantages (`advantage`'s module docstring)
        self._advantage_route = advantage_route(super()._compute_advantage)
        if self.coba_config.group_weight != "proportional":
            logger.info(
                "coba.group_weight=%s: the factor is applied %s",
                self.coba_config.group_weight,
                "inside veRL's advantage pass (one write to TransferQueue)"
                if self._advantage_route == "inside"
                else "after veRL's advantage pass (the advantages are read back and written again): "
                "its _compute_advantage is not veRL 0.9.1's",
            )

    @property
    def allocator(self) -> BudgetAllocator:
        """The run's allocator; it lives in the training dataloader so that data.pt carries it."""
        return self.train_dataloader.allocator

    # ------------------------------------------------------------------ veRL extension points
    def _init_dataloader(self) -> None:
        super()._init_dataloader()
        self.train_dataloader = CobaDataLoader.wrap(
            self.train_dataloader,
            self.coba_config,
            model_path=self.config.actor_rollout_ref.model.path,
        )
        if isinstance(self.replay_buffer, CobaBufferHooks):  # its cut count travels in data.pt
            self.train_dataloader.carry("replay_buffer", self.replay_buffer)

    def _build_replay_buffer(self) -> ReplayBuffer:
        """veRL's buffer; its own classes rebuilt as `CobaReplayBuffer` / `CobaReplayBufferAsync`."""
        buffer = super()._build_replay_buffer()
        coba_class = COBA_BUFFERS.get(type(buffer))
        if coba_class is None:
            logger.warning(
                "trainer.v1.sampler.custom_sampler=%s: groups it clears without training them do not "
                "feed the CoBA-RL tracker (subclass "
                "coba_verl.verl_plugin.hooks.replay_buffer.CobaReplayBuffer)",
                type(buffer).__name__,
            )
            return buffer
        # uniform keeps veRL's own selection, unless its refills are sized (coba.size_refills)
        counted = self.coba_config.strategy != "uniform" or self.coba_config.size_refills
        rollout_n = int(self.config.actor_rollout_ref.rollout.n)
        options: dict[str, object] = {"prompts_per_step": int(self.config.data.train_batch_size)}
        if self.coba_config.size_refills and coba_class is CobaReplayBuffer:
            options["sizer"] = RefillSizer(self.coba_config.min_rollouts, self.ledger.budget_of, rollout_n)
        poll = OmegaConf.select(self.config, "coba_cpu.poll_interval_s")
        if poll is not None and OmegaConf.select(self.config, "coba_cpu.enable"):
            options["poll_interval"] = float(poll)  # veRL's constructor argument, 2.0 s by default
        return coba_class.like(
            buffer,
            on_clear=self._observe_cleared,
            rollouts_per_prompt=rollout_n if counted else None,
            min_group_size=self.coba_config.min_rollouts,
            on_trim=self._observe_trimmed,
            cut_sessions=self.coba_config.cut_sessions,
            cut_seed=int(self.config.data.get("seed", 0) or 0),
            **options,
        )

    def _next_train_batch(self, num_prompts: int | None = None) -> TensorDict:
        """The next ``num_prompts`` prompts (default M) in sampler order, each with its ``__rollout_n__``.

        Prompts are drawn and allocated a round of M = ``data.train_batch_size`` at a time; the
        round's unsubmitted rest waits in the dataloader (and in its checkpoint state) for the
        next submission, which is how DAPO's refills of k prompts belong to the round they are
        drawn in. With ``coba.size_refills`` the prompts are sized to the session slots the step
        has left (`RefillSizer.size`), the ones not submitted going back to the round's rest.
        """
        m = int(self.config.data.train_batch_size)
        wanted = m if num_prompts is None else int(num_prompts)
        loader = self.train_dataloader
        parts = []
        while wanted > 0:
            if loader.round_rest is None:
                loader.round_rest = self._allocate_round(super()._next_train_batch(m))
            drawn = loader.round_rest
            take = min(wanted, len(drawn))
            parts.append(tu.index_select_tensor_dict(drawn, list(range(take))))
            rest = list(range(take, len(drawn)))
            loader.round_rest = tu.index_select_tensor_dict(drawn, rest) if rest else None
            wanted -= take
        batch = parts[0] if len(parts) == 1 else tu.concat_tensordict(parts)
        sizer = getattr(self.replay_buffer, "sizer", None)
        if sizer is not None:
            batch = sizer.size(batch, loader, m * int(self.config.actor_rollout_ref.rollout.n))
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        return batch

    def _submit_batch_to_rollout(self, batch: TensorDict) -> int:
        """Open each group in the ledger (uid, tracker id, B_i, this step's version), then submit."""
        ids = self.train_dataloader.prompt_ids.ids(list(batch["index"])).tolist()
        budgets = batch["__rollout_n__"].tolist()
        for uid, prompt_id, budget in zip(map(str, batch["uid"]), ids, budgets, strict=True):
            self.ledger.open_group(uid, prompt_id, budget, version=self.global_steps)
        return super()._submit_batch_to_rollout(batch)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """veRL's advantage (GRPO groups by uid, any group size), weighted per group; feed the tracker."""
        start = time.perf_counter()
        factors = group_weight_of_keys(list(batch.keys), list(batch.tags), self.coba_config.group_weight)
        self._plugin_time_s += time.perf_counter() - start
        if bool(np.all(factors == 1.0)):  # proportional, or groups of one size (uniform): veRL's pass
            batch = super()._compute_advantage(batch, metrics)
        elif self._advantage_route == "inside":
            batch = weighted_advantage_pass(self, batch, metrics, factors)
        else:
            batch = super()._compute_advantage(batch, metrics)
            start = time.perf_counter()
            batch = weight_written_advantages(batch, factors)
            self._plugin_time_s += time.perf_counter() - start
        start = time.perf_counter()
        groups = final_outputs(batch.keys, batch.tags)
        self._count_cost(list(batch.tags))
        unknown = sorted(uid for uid in groups if not self.ledger.knows(uid))
        if unknown:
            logger.warning(
                "ignoring %d trajectory groups that were not submitted through the allocator (e.g. "
                "replayed by skip.rollout_tq): %s",
                len(unknown),
                unknown[:3],
            )
        tags = dict(zip(batch.keys, batch.tags, strict=True))
        known = {uid: groups[uid] for uid in self.ledger.open_uids(groups)}
        self._settle(known, batch.partition_id, tags, Fate.TRAINED, close=True)
        self._plugin_time_s += time.perf_counter() - start
        return batch

    def step(self, metrics: dict, timing_raw: dict) -> KVBatchMeta:
        """veRL's step, then commit the tracker (before fit() may checkpoint) and add ``coba/`` metrics."""
        batch = super().step(metrics, timing_raw)
        start = time.perf_counter()
        # sync: a group still open came back without a trajectory, every session failed; async:
        # open groups are in flight, and a group whose sessions all failed is evicted by veRL
        if self.trainer_mode == "sync" and self.ledger.groups:
            logger.warning(
                "%d prompt groups came back without a single finished session (first uids %s); their "
                "rollouts are counted in coba/failed_rollouts",
                len(self.ledger.groups),
                list(self.ledger.groups)[:3],
            )
            self.ledger.fail_open()
        tally = self.ledger.close_step()
        # F_bar waits for every version a group still in flight may add sessions to (its own on),
        # but not for longer than the staleness bound (`held_open_from`)
        open_from = self.held_open_from()
        self.allocator.tracker.hold_open(open_from)
        tracker_metrics = self.allocator.end_step()
        # the versions F_bar waits for, this step's included (0: none; at most the bound + 1)
        held = 0 if open_from is None else self.global_steps - open_from + 1
        tracker_metrics[PREFIX + "versions_held_open"] = float(held)
        averaged = self.allocator.tracker.f_bar_versions
        if averaged:
            tracker_metrics[PREFIX + "F_bar_newest_version"] = float(averaged[-1])
        if self._allocations:
            metrics.update(step_metrics(merge_allocations(self._allocations), tracker_metrics))
        else:  # a DAPO step that only submitted the rest of an earlier round
            metrics.update(tracker_metrics)
        metrics[PREFIX + "rounds"] = float(len(self._allocations))
        sizer = getattr(self.replay_buffer, "sizer", None)
        if sizer is not None:  # allocated rollouts of this step's submissions never generated
            metrics[PREFIX + "trimmed_rollouts"] = float(sizer.pop_trimmed())
        metrics.update(ledger_metrics(tally))
        for name in COST_COUNTS:
            metrics[PREFIX + name] = float(self._cost[name])
        self._allocations.clear()
        self._cost.clear()
        # allocate + observe (with its TransferQueue reads of the scores) + end_step + metrics
        metrics[PREFIX + "plugin_time_s"] = self._plugin_time_s + time.perf_counter() - start
        self._plugin_time_s = 0.0
        return batch

    def _load_checkpoint(self) -> None:
        """veRL's resume; in the async modes, the restored prompt groups reopen in the ledger.

        veRL restores TransferQueue's prompts (each with its ``__rollout_n__``) and later re-issues
        those that were in flight; each is a group the interrupted run counted as generated, so it is
        reopened as in flight, not generated again (`RolloutLedger.reopen`).
        """
        super()._load_checkpoint()
        if self.trainer_mode == "sync":
            return
        items = (tq.kv_list("train") or {}).get("train", {})
        uids = [key for key, tag in items.items() if tag.get("is_prompt", False)]
        if not uids:
            return
        data = tq.kv_batch_get(keys=uids, partition_id="train", select_fields=["index", "__rollout_n__"])
        ids = self.train_dataloader.prompt_ids.ids(list(data["index"])).tolist()
        for uid, prompt_id, budget in zip(uids, ids, data["__rollout_n__"].tolist(), strict=True):
            self.ledger.reopen(uid, prompt_id, budget, version=int(items[uid].get("global_steps", 0)))
        logger.info("reopened %d prompt groups restored from TransferQueue in the rollout ledger", len(uids))

    def _reissue_inflight_prompts(self, partition_id: str = "train") -> int:
        """veRL's re-issue of the restored in-flight prompts; the ledger dates them to this step."""
        reissued = super()._reissue_inflight_prompts(partition_id)
        if reissued:
            items = (tq.kv_list(partition_id) or {}).get(partition_id, {})
            for uid, tag in items.items():
                if tag.get("is_prompt", False) and tag.get("status") == "pending" and self.ledger.knows(uid):
                    self.ledger.restart(uid, self.global_steps)
        return reissued

    # ------------------------------------------------------------------ helpers
    def held_open_from(self) -> int | None:
        """The oldest policy version F_bar still waits for: that of the oldest group in flight, or, once
        it is more than the staleness bound behind this step, the step minus the bound (its versions
        settled with what was observed, a WARNING naming them; None: none in flight).

        The bound is veRL's ``trainer.v1.sampler.max_off_policy_threshold`` (past it veRL drops or
        waits for a group), or `HELD_OPEN_LIMIT` where it is null: one request that never finishes
        would otherwise keep its version out of F_bar, and F_bar frozen, for the rest of the run.
        """
        oldest = self.ledger.oldest_open_version
        threshold = self.config.trainer.v1.get("sampler", {}).get("max_off_policy_threshold", None)
        limit = int(threshold) if threshold is not None else HELD_OPEN_LIMIT
        if oldest is None or self.global_steps - oldest <= limit:
            return oldest
        settled = self.global_steps - limit
        if settled > self._settled_below:
            logger.warning(
                "F_bar stops waiting for policy versions %d-%d: groups submitted then are still in flight "
                "%d steps later (over the staleness bound %d); those versions count with what was observed",
                max(oldest, self._settled_below), settled - 1, self.global_steps - oldest, limit,
            )  # fmt: skip
            self._settled_below = settled
        return settled

    def _allocate_round(self, prompts: TensorDict) -> TensorDict:
        """Set ``prompts["__rollout_n__"]`` (int64 [M]) to the allocation of M * rollout.n rollouts.

        Prompts the allocation skipped (B_i = 0, ``coba.skip_spread_below``; V1 sync with DAPO only,
        `check_skip`) leave the round here: they are never submitted, so no group, session or
        outcome exists for them; ``coba/skipped_prompts`` counts them.
        """
        start = time.perf_counter()
        ids = self.train_dataloader.prompt_ids.ids(list(prompts["index"]))  # (M,) tracker ids
        rollout_n = int(self.config.actor_rollout_ref.rollout.n)
        allocation = self.allocator.allocate(ids, len(prompts) * rollout_n)
        budgets = np.asarray(allocation.budgets, dtype=np.int64)
        prompts["__rollout_n__"] = torch.as_tensor(budgets, dtype=torch.int64)  # (M,)
        if np.any(budgets == 0):
            prompts = tu.index_select_tensor_dict(prompts, np.flatnonzero(budgets).tolist())
        self._allocations.append(allocation)
        self._plugin_time_s += time.perf_counter() - start
        return prompts

    def _count_cost(self, tags: list[Mapping]) -> None:
        """Add one update's `trained_cost` to the step's counters."""
        rollout_n = int(self.config.actor_rollout_ref.rollout.n)
        actor = self.config.actor_rollout_ref.actor
        updates = int(self.config.trainer.critic_warmup) <= self.global_steps
        cost = trained_cost(tags, int(actor.ppo_mini_batch_size) * rollout_n, int(actor.ppo_epochs))
        if not updates:
            cost["optimizer_steps"] = 0
        self._cost.update(cost)


@register_trainer(COBA_MODES["sync"])
class CobaTrainer(CobaBudgets, ProgressLines, GlooWorkers, PPOTrainerSync):
    """veRL's synchronous V1 trainer with CoBA-RL budgets (``trainer.v1.trainer_mode=sync``).

    Works with and without DAPO dynamic sampling (``algorithm.filter_groups``) and failed-group
    refill (``trainer.v1.sampler.sync_refill_failed_groups``); every step trains M x n rollouts.
    """

    VERL_MODE = "sync"


@register_trainer(COBA_MODES["colocate_async"])
class CobaColocateAsyncTrainer(CobaBudgets, ProgressLines, GlooWorkers, PPOTrainerColocateAsync):
    """veRL's ``colocate_async`` V1 trainer with CoBA-RL budgets: generation runs ahead of the update
    (warm-up batches, partial rollout), every update trains M x n rollouts, oldest groups first
    (`CobaReplayBufferAsync`), and what it trains is reported in policy versions behind."""

    VERL_MODE = "colocate_async"


@register_trainer(COBA_MODES["separate_async"])
class CobaSeparateAsyncTrainer(CobaBudgets, ProgressLines, GlooWorkers, PPOTrainerSeparateAsync):
    """veRL's ``separate_async`` V1 trainer with CoBA-RL budgets: a standalone rollout pool generates
    ahead, and each of the ``parameter_sync_step`` local updates between two weight syncs trains
    exactly (M / parameter_sync_step) x n rollouts (`CobaReplayBufferAsync`). The hybrid rollout
    switch, when on, still decides *when* to lend the training devices by finished groups; what each
    update trains is counted in rollouts."""

    VERL_MODE = "separate_async"
