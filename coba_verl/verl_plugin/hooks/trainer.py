"""`CobaBudgets`: CoBA-RL budgets per prompt in veRL 0.9's V1 trainers, mixed into its synchronous
trainer (`CobaTrainer`, ``trainer_mode=sync``), its ``colocate_async`` one (`CobaColocateAsyncTrainer`)
and its ``separate_async`` one (`CobaSeparateAsyncTrainer`).

Methods of veRL's trainer (verl 0.9.1, ``verl/trainer/ppo/v1/``) are extended; each calls the
original, and ``fit()`` is veRL's own (`check_verl_api` checks them at import, for both bases):

``_init_dataloader``         veRL's loaders, then the training loader rebuilt as `CobaDataLoader`
                             (same sampler, plus the allocator in its checkpoint state).
``_build_replay_buffer``     veRL's sync buffer rebuilt as `CobaReplayBuffer`, which shows the
                             groups DAPO evicts or discards to the tracker before clearing them and,
                             under DAPO with budgets, trains exactly M * rollout.n rollouts a step
                             (`core.trained_budget`; the sessions it cuts go to the tracker too).
``_next_train_batch``        prompts in sampler order, allocated a round of M = train_batch_size
                             at a time: B = allocate(ids, M * rollout.n), ``batch["__rollout_n__"]
                             = B`` (int64), which veRL's ``AgentLoopWorkerTQ._run_prompt`` reads as
                             n per prompt. A submission (one per step, plus DAPO's refills of any
                             size) takes the next prompts of the current round, so every round
                             spends exactly M * rollout.n rollouts however it is submitted.
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
                             hold_open`), ``allocator.end_step()`` (windows, F_bar, alpha/beta for
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
from omegaconf import DictConfig, open_dict
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
from coba_verl.framework_api import check_api
from coba_verl.records.ledger import Fate, RolloutLedger, StepTally
from coba_verl.verl_plugin.hooks.advantage import (
    advantage_route,
    group_weight_of_keys,
    weight_written_advantages,
    weighted_advantage_pass,
)
from coba_verl.verl_plugin.hooks.dataloader import CobaDataLoader
from coba_verl.verl_plugin.hooks.progress import ProgressLines
from coba_verl.verl_plugin.hooks.replay_buffer import CobaReplayBuffer, CobaReplayBufferAsync
from coba_verl.verl_plugin.hooks.sessions import final_outputs, session_tokens, split_key, uid_of
from coba_verl.verl_plugin.launch.config_bridge import COBA_MODES, check_config

logger = logging.getLogger(__name__)

#: How veRL's engine reads a group's budget, for the ledger's error on a session beyond it.
BUDGET_HINT = (
    "A custom agent_loop_manager_class must generate batch['__rollout_n__'][i] sessions for prompt i "
    "(it did not honour __rollout_n__), as veRL's AgentLoopWorkerTQ does."
)

#: The veRL methods `CobaTrainer` extends and the parameters it calls them with (veRL 0.9.1).
EXTENDED_METHODS: dict[str, tuple[str, ...]] = {
    "_init_dataloader": ("self",),
    "_init_resource_pool_mgr": ("self",),
    "_build_replay_buffer": ("self",),
    "_load_checkpoint": ("self",),
    "_reissue_inflight_prompts": ("self", "partition_id"),
    "_next_train_batch": ("self", "num_prompts"),
    "_submit_batch_to_rollout": ("self", "batch"),
    "_compute_advantage": ("self", "batch", "metrics"),
    "step": ("self", "metrics", "timing_raw"),
    "_compute_metrics": ("self", "batch", "metrics", "timing_raw", "global_steps", "epoch"),
    "on_validate_begin": ("self",),
    "on_validate_end": ("self",),
}


def check_verl_api(base: type = PPOTrainerSync) -> None:
    """Refuse to load against a veRL whose trainer lacks a method we extend, or changed its parameters.

    A renamed hook would otherwise be silently never called: budgets would stop reaching the
    engine, or the tracker would stop learning, with no error.

    Raises:
        FrameworkMismatch: (`coba_verl.framework_api.check_api`) naming the method, the signature
            found and the one expected.
    """
    check_api("veRL", "verl", "0.9.1", {(base, name): params for name, params in EXTENDED_METHODS.items()})


check_verl_api(PPOTrainerSync)
check_verl_api(PPOTrainerColocateAsync)
check_verl_api(PPOTrainerSeparateAsync)


#: veRL's own replay buffer classes and the CoBA one each is rebuilt as (same constructor arguments).
COBA_BUFFERS: dict[type, type] = {ReplayBuffer: CobaReplayBuffer, ReplayBufferAsync: CobaReplayBufferAsync}

#: What an update costs, reported as ``coba/<name>`` (`trained_cost`); the rollout counters beside
#: them come from the step's ledger (`ledger_metrics`).
COST_COUNTS = ("trained_rows", "padding_rows", "tokens_trained", "optimizer_steps")


def ledger_metrics(tally: StepTally) -> dict[str, float]:
    """``coba/`` counters of one step's `StepTally`: rollouts generated, trained, cut, evicted,
    failed and in flight (``in flight before + generated = trained + cut + evicted + failed + in
    flight after``), groups trained and evicted, tokens generated, and how far behind the update the
    trained rollouts' policy versions are (0 in the synchronous trainer)."""
    metrics = {PREFIX + name: float(value) for name, value in tally.counts().items()}
    behind = tally.versions_behind
    metrics[PREFIX + "versions_behind_mean"] = float(np.mean(behind)) if behind else 0.0
    metrics[PREFIX + "versions_behind_max"] = float(max(behind)) if behind else 0.0
    if tally.evicted_budgets:
        metrics[PREFIX + "evicted_budget_mean"] = float(np.mean(tally.evicted_budgets))
    return metrics


def session_versions(
    groups: Mapping[str, Mapping[int, str]], tags: Mapping[str, Mapping]
) -> dict[tuple[str, int], int]:
    """The policy version that finished each session of ``groups`` (``uid -> {session: final key}``),
    from its outputs' trajectory tags (``key -> tag``): ``(uid, session) -> max_global_steps + 1``,
    the newest over the session's outputs; sessions whose tags carry no ``max_global_steps`` are left out
    (they are of their group's version).

    Which version: veRL's server keeps, per request, the weight versions it was generated across
    (``min_global_steps`` / ``max_global_steps``, ``verl/workers/rollout/llm_server.py:281-349``): an
    answer aborted at a weight update and resumed with its tokens spans two. It is dated to the
    newest, the weights that wrote its end and so the answer the reward scores: F_v is the failure
    rate of policy v (spec §3, F_t "the step's" failure rate), and the allocation that F_bar drives
    serves the newest policy, so an answer the newer weights finished is evidence about them, not
    about the weights that only began it. It is also veRL's own primary staleness
    (``trajectory_staleness``, ``trainer_base.py:1968-1979``), which counts from ``max_global_steps``.

    Numbering: veRL loads the weights trained at step t as version t (``update_weights(global_steps)``
    at the step's end: ``trainer_sync.py:38``, ``trainer_colocate_async.py:40``,
    ``trainer_separate_async.py:382``), and they serve the prompts submitted at step t + 1, which the
    ledger dates t + 1. So weights w date a session w + 1, and a session generated entirely under its
    submission's weights keeps its group's version; versions behind = the update's step minus this
    is veRL's ``trajectory_staleness = (global_steps - 1) - max_global_steps`` (``trainer_base.py:1979``).

    ``{"a": {0: "a_0_1"}}`` with tags a_0_0 (max_global_steps 2), a_0_1 (3) -> ``{("a", 0): 4}``.
    """
    newest: dict[tuple[str, int], int] = {}
    for key, tag in tags.items():
        weights = tag.get("max_global_steps")
        if weights is None or tag.get("is_padding", False):
            continue
        uid, session, _ = split_key(key)
        if uid in groups and session in groups[uid]:
            newest[uid, session] = max(newest.get((uid, session), int(weights)), int(weights))
    return {pair: weights + 1 for pair, weights in newest.items()}


def trained_cost(tags: list[Mapping], mini_batch_rows: int, epochs: int) -> dict[str, int]:
    """What an update trains: sessions, rows and response tokens of the real rows, padding rows, and
    optimizer steps = ceil(rows with padding / mini-batch rows) x ppo_epochs, as veRL's actor splits
    its batch (``global_batch_size`` = ppo_mini_batch_size x rollout.n rows a mini-batch).

    Rows are trajectory keys ``{uid}_{session}_{output}``; a multi-turn session has several.
    """
    real = [tag for tag in tags if not tag.get("is_padding", False)]
    return {
        "trained_rows": len(real),
        "padding_rows": len(tags) - len(real),
        "tokens_trained": sum(int(tag.get("response_len", 0)) for tag in real),
        "optimizer_steps": -(-len(tags) // mini_batch_rows) * epochs if tags else 0,
    }


class CobaBudgets:
    """CoBA-RL rollout budgets for a veRL V1 trainer: the methods of the module docstring, mixed in
    before veRL's trainer class (`CobaTrainer`, `CobaColocateAsyncTrainer`).

    Args:
        config: veRL's composed config with an optional ``coba`` node (`CobaConfig` fields).

    Raises:
        ValueError: for the configurations `check_config` refuses.
        LedgerError: when the rollout engine generates more sessions than a group's budget.
    """

    #: veRL's name of the mode this trainer runs (``trainer.v1.trainer_mode`` as veRL reads it).
    VERL_MODE: str = "sync"

    def __init__(self, config: DictConfig) -> None:
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
        counted = self.coba_config.strategy != "uniform"  # uniform keeps veRL's own selection
        return coba_class.like(
            buffer,
            on_clear=self._observe_cleared,
            rollouts_per_prompt=int(self.config.actor_rollout_ref.rollout.n) if counted else None,
            min_group_size=self.coba_config.min_rollouts,
            on_trim=self._observe_trimmed,
            cut_sessions=self.coba_config.cut_sessions,
            cut_seed=int(self.config.data.get("seed", 0) or 0),
        )

    def _next_train_batch(self, num_prompts: int | None = None) -> TensorDict:
        """The next ``num_prompts`` prompts (default M) in sampler order, each with its ``__rollout_n__``.

        Prompts are drawn and allocated a round of M = ``data.train_batch_size`` at a time; the
        round's unsubmitted rest waits in the dataloader (and in its checkpoint state) for the
        next submission, which is how DAPO's refills of k prompts belong to the round they are
        drawn in.
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
        # F_bar waits for every version a group still in flight may add sessions to (its own on)
        self.allocator.tracker.hold_open(self.ledger.oldest_open_version)
        tracker_metrics = self.allocator.end_step()
        averaged = self.allocator.tracker.f_bar_versions
        if averaged:
            tracker_metrics[PREFIX + "F_bar_newest_version"] = float(averaged[-1])
        if self._allocations:
            metrics.update(step_metrics(merge_allocations(self._allocations), tracker_metrics))
        else:  # a DAPO step that only submitted the rest of an earlier round
            metrics.update(tracker_metrics)
        metrics[PREFIX + "rounds"] = float(len(self._allocations))
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
    def _allocate_round(self, prompts: TensorDict) -> TensorDict:
        """Set ``prompts["__rollout_n__"]`` (int64 [M]) to the allocation of M * rollout.n rollouts."""
        start = time.perf_counter()
        ids = self.train_dataloader.prompt_ids.ids(list(prompts["index"]))  # (M,) tracker ids
        rollout_n = int(self.config.actor_rollout_ref.rollout.n)
        allocation = self.allocator.allocate(ids, len(prompts) * rollout_n)
        prompts["__rollout_n__"] = torch.as_tensor(allocation.budgets, dtype=torch.int64)  # (M,)
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

    def _observe_trimmed(self, partition_id: str, tags: Mapping[str, Mapping]) -> None:
        """`CobaReplayBuffer`'s hook: sessions cut from a trained group are scored, not trained."""
        start = time.perf_counter()
        groups = final_outputs(list(tags), list(tags.values()))
        known = {uid: groups[uid] for uid in self.ledger.open_uids(groups)}
        self._settle(known, partition_id, tags, Fate.CUT, close=False)
        self._plugin_time_s += time.perf_counter() - start

    def _observe_cleared(self, partition_id: str, uids: set[str], tags: Mapping[str, Mapping]) -> None:
        """`CobaReplayBuffer`'s hook: groups cleared untrained (DAPO, surplus, failed) are scored and
        closed as evicted; their sessions that never finished are failed."""
        start = time.perf_counter()
        if partition_id == "train":
            cleared_uids = self.ledger.open_uids(sorted(uids))
            if cleared_uids:
                cleared = {key: tag for key, tag in tags.items() if uid_of(key) in set(cleared_uids)}
                groups = final_outputs(list(cleared), list(cleared.values()))
                evicted = {uid: groups.get(uid, {}) for uid in cleared_uids}
                self._settle(evicted, partition_id, cleared, Fate.EVICTED, close=True)
        self._plugin_time_s += time.perf_counter() - start

    def _settle(
        self,
        groups: dict[str, dict[int, str]],
        partition_id: str,
        tags: Mapping[str, Mapping],
        fate: Fate,
        close: bool,
    ) -> None:
        """Give ``fate`` to each group's finished sessions in the ledger, and score them into the tracker.

        One score per session (its final output's summed ``rm_scores``), one length (its response
        tokens over its outputs) and the policy version that finished it (`session_versions`; its
        group's where the tags carry none), given to the ledger and the tracker alike, so that F_bar
        follows generating versions in the async trainers. With ``close`` the groups leave the
        ledger, their unfinished sessions failed.

        Args:
            groups: ``uid -> {session: key of its final output}`` of open groups.
            partition_id: TransferQueue partition holding the keys.
            tags: trajectory tags by key, holding every output of these sessions (``response_len``).
            fate: what the sessions became (trained, cut or evicted).
            close: whether nothing more of these groups can arrive.
        """
        keys = [key for sessions in groups.values() for key in sessions.values()]
        ids = [self.ledger.prompt_of(uid) for uid, sessions in groups.items() for _ in sessions]
        lengths = session_tokens(groups, tags)  # (R,) in the order of keys
        finished_by = session_versions(groups, tags)
        versions = []  # (R,) generating version of each session, in the order of keys
        position = 0
        for uid, sessions in groups.items():
            tokens = dict(zip(sessions, lengths[position : position + len(sessions)].tolist(), strict=True))
            dated = {s: finished_by[uid, s] for s in sessions if (uid, s) in finished_by}
            submitted = self.ledger.groups[uid].version
            if dated and min(dated.values()) < submitted:
                logger.warning(
                    "prompt group %s, submitted at step %d, has sessions finished by weights of step %d: "
                    "veRL numbers its weight versions unlike 0.9.1 (session_versions)",
                    uid, submitted, min(dated.values()) - 1,
                )  # fmt: skip
            record = self.ledger.settle(
                uid, tokens, fate, close=close, version=self.global_steps, generated_by=dated
            )
            versions.extend(record.generated_by[s] for s in sessions)
            position += len(sessions)
        if keys:
            data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores"])
            scores = data["rm_scores"].sum(dim=1).to(torch.float64).numpy()  # (R,) one per session
            self.allocator.observe(np.asarray(ids, dtype=np.int64), scores, lengths, versions)


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
