"""`CobaReplayBufferAsync`: veRL's asynchronous `ReplayBufferAsync` (``colocate_async``,
``separate_async``) with the CoBA hooks of `coba_verl.verl_plugin.hooks.replay_buffer`.

With budgets each update trains exactly ``batch_size`` x n rollouts of the oldest ready groups
(`core.trained_budget.select_by_age`), and a failed group with at least ``min_group_size``
finished sessions trains them; the module docstring of `replay_buffer` says why and how.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from typing import Any

import numpy as np
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync, _accumulate_eviction_metrics
from verl.utils.skip import SkipManager

from coba_verl.verl_plugin.hooks.refill_sizing import EmptyGroupWatch, submitted_count
from coba_verl.verl_plugin.hooks.replay_buffer import CobaBufferHooks
from coba_verl.verl_plugin.hooks.sessions import sessions_of, uid_of

logger = logging.getLogger(__name__)


class CobaReplayBufferAsync(CobaBufferHooks, ReplayBufferAsync):
    """veRL's `ReplayBufferAsync` with the CoBA hooks; with budgets, each update trains exactly
    ``batch_size`` x n rollouts, and a failed group with ``min_group_size`` finished sessions trains
    them (module docstring)."""

    VERL_REIMPLEMENTED = (
        "ReplayBuffer._select_prompt_uids",
        "ReplayBufferAsync.sample",
        "ReplayBufferAsync.wait_for_sampleable",
        "ReplayBufferAsync._has_enough_samples",
        "ReplayBufferAsync._terminal_eviction_reasons",
        "ReplayBufferAsync._stale_terminal_keys",
        "ReplayBuffer._dapo_filtered_keys",  # the DAPO rule _failed_without_spread applies
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # kept failed groups are immutable once terminal: their DAPO value (None: a spread) is cached,
        # as veRL caches its finished groups' (``_dapo_classification_cache``)
        self._failed_dapo_cache: dict[str, dict[str, float | None]] = {}

    def counts_rollouts(self, partition_id: str) -> bool:
        """True where `sample` counts rollouts: training, with budgets, against veRL 0.9.1's sampling."""
        return partition_id != "val" and self.rollouts_per_prompt is not None and not self.verl_changed

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """veRL's `sample`, or, where `counts_rollouts`, a batch of exactly ``batch_size`` x n sessions."""
        if not self.counts_rollouts(partition_id):
            return super().sample(global_steps, partition_id, batch_size)
        assert self.rollouts_per_prompt is not None
        return self._sample_rollouts(global_steps, partition_id, batch_size * self.rollouts_per_prompt)

    def _terminal_eviction_reasons(
        self, global_steps: int, partition_id: str
    ) -> tuple[set[str], set[str], set[str], Counter]:
        """veRL's reasons (stale, DAPO-filtered, failed), except that, where `counts_rollouts`, a failed
        group with at least ``min_group_size`` finished sessions is not evicted for its failed ones:
        it is stale under veRL's rule for finished groups (``max_off_policy_strategy=drop``,
        ``replay_buffer.py:520-529``), DAPO-filtered when its finished sessions have no spread
        (``:261-315``'s rule), or else sampleable."""
        stale, dapo, failed, counts = super()._terminal_eviction_reasons(global_steps, partition_id)
        if not failed or not self.counts_rollouts(partition_id):
            return stale, dapo, failed, counts
        finished = sessions_of([k for k in self.partitions[partition_id] if uid_of(k) in failed])
        kept = {uid for uid in failed if len(finished.get(uid, {})) >= self.min_group_size}
        if not kept:
            return stale, dapo, failed, counts
        steps = self.prompt_global_steps[partition_id]
        threshold = self.max_off_policy_threshold
        if threshold is not None and self.max_off_policy_strategy == "drop":
            stale = stale | {
                uid for uid in kept if global_steps - steps.get(uid, global_steps) + 1 > threshold
            }
        no_spread = self._failed_without_spread(partition_id, kept - stale, finished)
        counts = counts + Counter(no_spread.values())
        return stale, dapo | set(no_spread), failed - kept, counts

    def _failed_without_spread(
        self, partition_id: str, uids: set[str], finished: dict[str, dict[int, list[str]]]
    ) -> dict[str, float]:
        """The kept failed groups of ``uids`` whose finished sessions share one DAPO metric value (with
        more than one session, veRL's rule), and that value; none without DAPO."""
        if self.filter_groups_metric is None:
            return {}
        cache = self._failed_dapo_cache.setdefault(partition_id, {})
        for uid in cache.keys() - self.failure_keys[partition_id]:  # cleared or trained since
            del cache[uid]
        for uid in uids - cache.keys():
            values = list(
                self._session_values(partition_id, [k for ks in finished[uid].values() for k in ks]).values()
            )
            cache[uid] = float(values[0]) if len(values) > 1 and float(np.std(values)) == 0.0 else None
        return {uid: value for uid in uids if (value := cache[uid]) is not None}

    @SkipManager.annotate_tq(role="rollout_tq", phase="sample")
    def _sample_rollouts(self, global_steps: int, partition_id: str, target: int) -> tuple[KVBatchMeta, dict]:
        """veRL's `wait_for_sampleable`, counting sessions: evict (and refill one prompt per evicted
        group) until nothing is left to evict, then take ``target`` sessions once the sampleable groups
        hold that many and no in-flight prompt has reached the staleness threshold under
        ``max_off_policy_strategy=wait``. When nothing is in flight and the sampleable sessions fall
        short, ceil(missing / n) prompts are refilled (veRL, counting groups, would wait forever).

        Raises:
            RuntimeError: `EmptyGroupWatch`'s count of groups in a row without a finished session
                (every session failing) was reached: the refills would never end.
        """
        assert self.rollouts_per_prompt is not None
        last_debug_time = time.time()
        eviction_metrics: dict = {}
        watch = EmptyGroupWatch(self.prompts_per_step)
        while True:
            self._sync_metadata_from_transfer_queue()
            watch.check(self, partition_id)
            reasons = self._terminal_eviction_reasons(global_steps, partition_id)
            evicted, stale_count, _, metrics = self._evict_terminal_groups(
                global_steps, partition_id, reasons
            )
            if evicted:
                _accumulate_eviction_metrics(eviction_metrics, metrics, stale_count)
                if self.refill_fn is not None:
                    watch.refilled += submitted_count(self.refill_fn(len(evicted)), len(evicted))
                continue
            ready = self._sampleable_terminal_keys(partition_id, reasons)
            groups, ready_sessions = self._ready_sessions(partition_id, ready)
            unblocked = self._has_enough_samples(global_steps, partition_id, 0, ready)  # staleness wait
            if ready_sessions >= target and unblocked:
                batch, _ = self._take(partition_id, ready, groups, target, clear_surplus=False)
                return batch, eviction_metrics
            inflight = len(self.pending_keys[partition_id]) + len(self.running_keys[partition_id])
            if inflight == 0 and ready_sessions < target and self.refill_fn is not None:
                missing = math.ceil((target - ready_sessions) / self.rollouts_per_prompt)
                watch.refilled += submitted_count(self.refill_fn(missing), missing)
                continue
            last_debug_time = self._wait_for_next_poll(partition_id, last_debug_time)
