"""`CobaReplayBuffer`: veRL's sync `ReplayBuffer` that shows every group it clears untrained and,
under per-prompt budgets with DAPO, trains exactly M x n rollouts a step.

Under DAPO dynamic sampling (``algorithm.filter_groups.enable=true``) veRL's sync buffer evicts
all-pass / all-fail groups, discards the surplus groups drained at the end of a step, and (with
``trainer.v1.sampler.sync_refill_failed_groups``) evicts failed groups; all of them go through
``ReplayBuffer._clear_groups`` (``verl/trainer/ppo/v1/replay_buffer.py``), which deletes their
trajectories from TransferQueue. The tracker needs them first: an all-fail group is the most
informative observation CoBA-RL gets about a hard prompt. This subclass calls ``on_clear`` with
the groups' trajectory keys before veRL's own clear.

Under DAPO (or ``sync_refill_failed_groups``), veRL's `ReplayBuffer.sample` waits for M groups
with a reward spread and trains them whole: with budgets B_i that is sum_i B_i rollouts over the
surviving groups, not M x n. With ``rollouts_per_prompt`` set, `sample` counts rollouts instead:
it waits (refilling as veRL does, plus a refill for the rollouts still missing when nothing is in
flight) until the ready groups hold M x n sessions, then trains the groups `select_to_budget`
picks, one or two of them cut; the sessions cut away go to ``on_trim`` before they are cleared.
Validation, and runs without DAPO or failed-group refill, use veRL's `sample` unchanged.

`CobaReplayBufferAsync` does the same for veRL's asynchronous buffer (``colocate_async``), whose
`ReplayBufferAsync.sample` takes the oldest ``batch_size`` finished **groups** of any submission:
with budgets it waits instead until the sampleable groups hold ``batch_size`` x n sessions (and
veRL's ``max_off_policy_strategy=wait`` lets it), and trains exactly that many, oldest groups first,
by the same `select_to_budget` rule. The ready groups it does not take stay in the buffer for the
next update (veRL's async policy: no surplus is discarded). Stale, DAPO-filtered and failed groups
are evicted and refilled as veRL does, through ``_clear_groups``, so they reach the tracker too.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import (
    FILTER_GROUPS_REWARD_METRIC,
    ReplayBuffer,
    ReplayBufferAsync,
    _accumulate_eviction_metrics,
)

from coba_verl.framework_api import constructor_arguments
from coba_verl.verl_plugin.sessions import final_outputs, sessions_of, uid_of
from coba_verl.verl_plugin.trained_budget import select_to_budget, sessions_to_keep

logger = logging.getLogger(__name__)

#: ``on_clear(partition_id, uids, trajectory tags {key: tag} of the partition)``.
ClearObserver = Callable[[str, set[str], dict[str, dict]], None]
#: ``on_trim(partition_id, {key: tag} of the sessions cut from a trained group)``.
TrimObserver = Callable[[str, dict[str, dict]], None]


class _CobaBufferHooks:
    """What both CoBA buffers add to veRL's: ``on_clear`` before each group clear, ``on_trim`` for the
    sessions cut from a trained group, and a batch of exactly a rollout target (`_take`).

    Args:
        *args, **kwargs: as for veRL's `ReplayBuffer`.
        on_clear: called with the partition, the uids about to be cleared and the partition's
            trajectory tags, while their data is still in TransferQueue.
        rollouts_per_prompt: n, when budgets differ (rollouts are counted); None keeps veRL's
            sampling by groups (uniform).
        min_group_size: fewest sessions a cut group keeps (``coba.min_rollouts``).
        on_trim: called with the partition and the tags of the sessions cut from a trained group.
    """

    def __init__(
        self,
        *args: Any,
        on_clear: ClearObserver,
        rollouts_per_prompt: int | None = None,
        min_group_size: int = 2,
        on_trim: TrimObserver | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.on_clear = on_clear
        self.rollouts_per_prompt = rollouts_per_prompt
        self.min_group_size = min_group_size
        self.on_trim = on_trim

    @classmethod
    def like(cls, buffer: ReplayBuffer, on_clear: ClearObserver, **options: Any) -> _CobaBufferHooks:
        """A `CobaReplayBuffer` built with every constructor argument of veRL's ``buffer``.

        The argument names come from `ReplayBuffer`'s signature (veRL stores each under its own
        name), so a veRL release that adds one is carried over or stops here, naming it.

        Raises:
            FrameworkMismatch: ``buffer`` does not expose a constructor argument
                (`coba_verl.framework_api.constructor_arguments`).
        """
        arguments = constructor_arguments(buffer, ReplayBuffer, "veRL", "verl", "0.9.1")
        return cls(**arguments, on_clear=on_clear, **options)

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        if uids:
            self.on_clear(partition_id, set(uids), self.partitions[partition_id])
        super()._clear_groups(partition_id, uids)

    def _take(
        self,
        partition_id: str,
        ready: set[str],
        groups: dict[str, dict[int, list[str]]],
        target: int,
        *,
        clear_surplus: bool,
    ) -> tuple[KVBatchMeta, int]:
        """Train `select_to_budget`'s groups, oldest first; cut sessions go to ``on_trim``, and with
        ``clear_surplus`` the ready groups not taken go to ``on_clear`` (the sync buffer's surplus).
        Without it (the async buffer) the groups not taken stay, so whole groups that make the target
        exactly are preferred to a cut (``whole_first``).

        Returns:
            The batch, and the number of ready groups cleared untrained.
        """
        steps = self.prompt_global_steps[partition_id]
        order = sorted(ready, key=lambda uid: steps.get(uid, 0))  # oldest first, as veRL's selection
        order = [uid for uid in order if groups.get(uid)]
        sizes = [len(groups[uid]) for uid in order]
        choice = select_to_budget(sizes, target, self.min_group_size, whole_first=not clear_surplus)
        if choice.shortfall:
            logger.warning(
                "the ready groups could not make exactly %d rollouts; this update trains %d",
                target,
                target - choice.shortfall,
            )
        selected = [order[i] for i in choice.whole]
        snapshot = dict(self.partitions[partition_id])
        for position, keep in choice.cuts:
            uid = order[position]
            kept = self._sessions_to_keep(partition_id, groups[uid], keep)
            cut_keys = [key for s, keys in groups[uid].items() if s not in kept for key in keys]
            if self.on_trim is not None:
                self.on_trim(partition_id, {key: snapshot[key] for key in cut_keys})
            tq.kv_clear(partition_id=partition_id, keys=cut_keys)
            for key in cut_keys:
                del snapshot[key]
                del self.partitions[partition_id][key]
            selected.append(uid)
        surplus = ready - set(selected) if clear_surplus else set()
        if surplus:
            self._clear_groups(partition_id, surplus)
        return self._materialize_batch(partition_id, selected, snapshot), len(surplus)

    def _ready_sessions(
        self, partition_id: str, ready: set[str]
    ) -> tuple[dict[str, dict[int, list[str]]], int]:
        """The sessions of the ``ready`` groups (``uid -> {session: keys}``) and how many there are."""
        groups = sessions_of([k for k in self.partitions[partition_id] if uid_of(k) in ready])
        return groups, sum(len(groups.get(uid, {})) for uid in ready)

    def _sessions_to_keep(self, partition_id: str, sessions: dict[int, list[str]], keep: int) -> set[int]:
        """``keep`` sessions of a group to cut, by `sessions_to_keep` on the filter metric's values."""
        values = self._session_values(partition_id, [key for keys in sessions.values() for key in keys])
        return sessions_to_keep(values, keep)

    def _session_values(self, partition_id: str, keys: list[str]) -> dict[int, float]:
        """Each session's value of the DAPO metric (``reward``: its last output's summed rm_scores),
        for the trajectory ``keys`` of one group."""
        (last,) = final_outputs(keys).values()  # {session: key of its last output}
        keys = list(last.values())
        metric = self.filter_groups_metric or FILTER_GROUPS_REWARD_METRIC
        if metric == FILTER_GROUPS_REWARD_METRIC:
            data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["rm_scores"])
            values = [float(v.sum().item()) for v in list(data["rm_scores"])]
        else:
            data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
            values = []
            for field in list(data["extra_fields"]):
                extra = getattr(field, "data", field)
                values.append(float(extra.get("reward_extra_info", {}).get(metric, float("nan"))))
        return dict(zip(last, values, strict=True))


class CobaReplayBuffer(_CobaBufferHooks, ReplayBuffer):
    """veRL's sync `ReplayBuffer` with the CoBA hooks; under DAPO with budgets, M x n rollouts a step."""

    # ------------------------------------------------------------------ rollout-counted sampling
    def counts_rollouts(self, partition_id: str) -> bool:
        """True where `sample` counts rollouts: training, with budgets, under DAPO or failed-group refill."""
        return (
            partition_id != "val"
            and self.rollouts_per_prompt is not None
            and (self.filter_groups_metric is not None or self.sync_refill_failed_groups)
        )

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """veRL's `sample`, or, where `counts_rollouts`, a batch of exactly ``batch_size`` x n sessions."""
        if not self.counts_rollouts(partition_id):
            return super().sample(global_steps, partition_id, batch_size)
        return self._sample_rollouts(global_steps, partition_id, batch_size * self.rollouts_per_prompt)

    def _sample_rollouts(self, global_steps: int, partition_id: str, target: int) -> tuple[KVBatchMeta, dict]:
        """Wait until the ready groups hold ``target`` sessions, then train exactly that many.

        The waiting follows veRL's sync DAPO policy: k groups evicted add 2k prompts of refill
        credit, dispatched within ``max_inflight_gen_batches`` x M prompts in flight; once enough is
        ready, nothing more is dispatched and what is in flight is drained. One addition: when nothing
        is in flight, no credit is left and the ready groups still hold fewer than ``target``
        sessions (they survived the filter but are small), ceil(missing / n) prompts are refilled,
        where veRL, counting groups, would already be done.
        """
        last_debug_time = time.time()
        eviction_metrics: dict = {}
        credit, draining = 0, False
        max_inflight = self.max_inflight_gen_batches * (self.train_batch_size or 1)
        while True:
            self._sync_metadata_from_transfer_queue()
            reasons = self._terminal_eviction_reasons(global_steps, partition_id)
            failed_count = len(reasons[2])
            evicted, stale_count, dapo_count, metrics = self._evict_terminal_groups(
                global_steps, partition_id, reasons
            )
            if evicted:
                _accumulate_eviction_metrics(eviction_metrics, metrics, stale_count)
            ready = self._sampleable_terminal_keys(partition_id, reasons)
            groups, ready_sessions = self._ready_sessions(partition_id, ready)
            inflight = len(self.pending_keys[partition_id]) + len(self.running_keys[partition_id])
            enough = ready_sessions >= target
            if enough:
                draining, credit = True, 0
            elif not draining:
                credit += 2 * dapo_count + failed_count
                if credit == 0 and inflight == 0:
                    credit = math.ceil((target - ready_sessions) / self.rollouts_per_prompt)
                dispatch = min(credit, max(0, max_inflight - inflight))
                if dispatch > 0:
                    self.refill_fn(dispatch)
                    credit -= dispatch
                    continue
            if enough and inflight == 0:
                batch, surplus = self._take(partition_id, ready, groups, target, clear_surplus=True)
                if surplus:
                    key = f"{self._metrics_prefix(partition_id)}/filter_groups/discarded_surplus_samples"
                    eviction_metrics[key] = eviction_metrics.get(key, 0) + surplus
                return batch, eviction_metrics
            last_debug_time = self._wait_for_next_poll(partition_id, last_debug_time)


class CobaReplayBufferAsync(_CobaBufferHooks, ReplayBufferAsync):
    """veRL's `ReplayBufferAsync` with the CoBA hooks; with budgets, each update trains exactly
    ``batch_size`` x n rollouts (module docstring)."""

    def counts_rollouts(self, partition_id: str) -> bool:
        """True where `sample` counts rollouts: training, with budgets."""
        return partition_id != "val" and self.rollouts_per_prompt is not None

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """veRL's `sample`, or, where `counts_rollouts`, a batch of exactly ``batch_size`` x n sessions."""
        if not self.counts_rollouts(partition_id):
            return super().sample(global_steps, partition_id, batch_size)
        return self._sample_rollouts(global_steps, partition_id, batch_size * self.rollouts_per_prompt)

    def _sample_rollouts(self, global_steps: int, partition_id: str, target: int) -> tuple[KVBatchMeta, dict]:
        """veRL's `wait_for_sampleable`, counting sessions: evict (and refill one prompt per evicted
        group) until nothing is left to evict, then take ``target`` sessions once the sampleable groups
        hold that many and no in-flight prompt has reached the staleness threshold under
        ``max_off_policy_strategy=wait``. When nothing is in flight and the sampleable sessions fall
        short, ceil(missing / n) prompts are refilled (veRL, counting groups, would wait forever)."""
        last_debug_time = time.time()
        eviction_metrics: dict = {}
        while True:
            self._sync_metadata_from_transfer_queue()
            reasons = self._terminal_eviction_reasons(global_steps, partition_id)
            evicted, stale_count, _, metrics = self._evict_terminal_groups(
                global_steps, partition_id, reasons
            )
            if evicted:
                _accumulate_eviction_metrics(eviction_metrics, metrics, stale_count)
                if self.refill_fn is not None:
                    self.refill_fn(len(evicted))
                continue
            ready = self._sampleable_terminal_keys(partition_id, reasons)
            groups, ready_sessions = self._ready_sessions(partition_id, ready)
            unblocked = self._has_enough_samples(global_steps, partition_id, 0, ready)  # staleness wait
            if ready_sessions >= target and unblocked:
                batch, _ = self._take(partition_id, ready, groups, target, clear_surplus=False)
                return batch, eviction_metrics
            inflight = len(self.pending_keys[partition_id]) + len(self.running_keys[partition_id])
            if inflight == 0 and ready_sessions < target and self.refill_fn is not None:
                self.refill_fn(math.ceil((target - ready_sessions) / self.rollouts_per_prompt))
                continue
            last_debug_time = self._wait_for_next_poll(partition_id, last_debug_time)
