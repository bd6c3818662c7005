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
With ``coba.size_refills`` each refill is sized to the sessions still missing (`refill_sizing`).
Validation, and runs without DAPO or failed-group refill, use veRL's `sample` unchanged.

`CobaReplayBufferAsync` does the same for veRL's asynchronous buffer (``colocate_async``), whose
`ReplayBufferAsync.sample` takes the oldest ``batch_size`` finished **groups** of any submission:
with budgets it waits instead until the sampleable groups hold ``batch_size`` x n sessions (and
veRL's ``max_off_policy_strategy=wait`` lets it), and trains exactly that many. The ready groups
it does not take stay in the buffer for the next update (veRL's async policy: no surplus is
discarded). Stale, DAPO-filtered and failed groups are evicted and refilled as veRL does (failed
ones with budgets only below ``min_group_size`` finished sessions, below), through
``_clear_groups``, so they reach the tracker too. Which groups an update takes keeps veRL's
oldest-first order by submission step (`core.trained_budget.select_by_age`): every ready group
submitted before the newest step the update trains from is trained, so no group waits longer than
veRL's selection by groups would let it; ties (groups of one step) go in the order TransferQueue
lists them (submission order), never in a set's hash order.

**Failed sessions under budgets.** veRL's async buffer evicts a group as soon as any one of its
sessions failed (``ReplayBufferAsync._terminal_eviction_reasons``, ``replay_buffer.py:531-539``).
With a per-session failure rate p that evicts 1 - (1 - p)^B_i of the groups, which under CoBA are
mostly the large groups of the hard prompts: a bias uniform does not have. With budgets,
`CobaReplayBufferAsync` keeps a failed group whose finished sessions number at least
``min_group_size`` (``coba.min_rollouts``): those sessions are sampleable, face staleness and
DAPO's filter as a finished group's do, and train; the ledger records the sessions that never
finished as failed when the group is trained. A failed group with fewer finished sessions is
evicted and refilled as veRL does. Uniform keeps veRL's eviction.

**Bounded refill.** When every session fails, the counted sampling's refills would never make
M x n sessions (veRL's sync buffer raises at once: its selection finds no trajectory,
``replay_buffer.py:505-510``; its async one refills an evicted failed group without end). Both CoBA
buffers stop with an error once 2 x M prompt groups in a row came back with no finished session
(`EmptyGroupWatch`), M being ``data.train_batch_size`` in every trainer mode (``prompts_per_step``:
veRL gives its async buffer no ``train_batch_size``).

**Guarded against veRL changes.** The buffers override veRL's ``_clear_groups`` (and the async one
its ``_terminal_eviction_reasons``), re-implement its sampling loops and its oldest-first
selection, call six of its helpers (`VERL_CALLED`: what is sampleable, the eviction and its
metrics, the batch, the metadata refresh, the poll wait) and apply its DAPO rule to the failed
groups the async one keeps. Each such veRL method's source digest is checked when a buffer is built
(`VERL_BUFFER_SHA256`, veRL 0.9.1's): a changed ``_clear_groups``, through which evicted groups
reach the tracker, refuses the run (`FrameworkMismatch`); any other changed method makes the buffer
fall back to veRL's own sampling by groups, with a warning. The
counted sampling keeps veRL's ``@SkipManager.annotate_tq(role="rollout_tq", phase="sample")``, which
veRL puts on both ``sample`` methods (``replay_buffer.py:421, 592``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import (
    FILTER_GROUPS_REWARD_METRIC,
    ReplayBuffer,
    _accumulate_eviction_metrics,
)
from verl.utils.skip import SkipManager

from coba_verl.core.config import CUT_SESSIONS
from coba_verl.core.trained_budget import (
    random_sessions_to_keep,
    select_by_age,
    select_to_budget,
    sessions_to_keep,
)
from coba_verl.framework_api import constructor_arguments, mismatch
from coba_verl.verl_plugin.hooks.refill_sizing import EmptyGroupWatch, RefillSizer, submitted_count
from coba_verl.verl_plugin.hooks.sessions import final_outputs, sessions_of, uid_of
from coba_verl.verl_plugin.hooks.verl_guards import VERL_CALLED, verl_changes

logger = logging.getLogger(__name__)

#: ``on_clear(partition_id, uids, trajectory tags {key: tag} of the partition)``.
ClearObserver = Callable[[str, set[str], dict[str, dict]], None]
#: ``on_trim(partition_id, {key: tag} of the sessions cut from a trained group)``.
TrimObserver = Callable[[str, dict[str, dict]], None]


class CobaBufferHooks:
    """What both CoBA buffers add to veRL's: ``on_clear`` before each group clear, ``on_trim`` for the
    sessions cut from a trained group, and a batch of exactly a rollout target (`_take`).

    Raises:
        FrameworkMismatch: veRL's ``_clear_groups`` is not 0.9.1's (`VERL_BUFFER_SHA256`).

    Args:
        *args, **kwargs: as for veRL's `ReplayBuffer`.
        on_clear: called with the partition, the uids about to be cleared and the partition's
            trajectory tags, while their data is still in TransferQueue.
        rollouts_per_prompt: n, when budgets differ (rollouts are counted); None keeps veRL's
            sampling by groups (uniform).
        min_group_size: fewest sessions a cut group keeps (``coba.min_rollouts``).
        on_trim: called with the partition and the tags of the sessions cut from a trained group.
        cut_sessions: which sessions a cut group keeps (``coba.cut_sessions``): ``random``,
            ``spread``, or ``auto``: ``random`` with a DAPO filter (``filter_groups_metric``),
            ``spread`` without. `cut_mode` holds the resolved one.
        cut_seed: the random cut's seed (``data.seed``); the k-th cut of the buffer's life, of a
            group submitted at step t, draws with ``(cut_seed, t, k)``.
        prompts_per_step: M, ``data.train_batch_size``, which bounds the empty groups in a row
            (`EmptyGroupWatch`); None: veRL's ``train_batch_size``, which veRL sets for its sync
            buffer only (the trainer passes M in every mode).

    Raises:
        ValueError: rollouts counted (``rollouts_per_prompt``) without M known.
    """

    #: veRL methods overridden that must be 0.9.1's, or the buffer refuses to start.
    VERL_REQUIRED: tuple[str, ...] = ("ReplayBuffer._clear_groups",)
    #: veRL methods the counted sampling re-implements; one that changed means veRL's own sampling.
    VERL_REIMPLEMENTED: tuple[str, ...] = ()

    def __init__(
        self,
        *args: Any,
        on_clear: ClearObserver,
        rollouts_per_prompt: int | None = None,
        min_group_size: int = 2,
        on_trim: TrimObserver | None = None,
        cut_sessions: str = "auto",
        cut_seed: int = 0,
        prompts_per_step: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        #: M, prompts a step (`EmptyGroupWatch`'s rounds)
        self.prompts_per_step = prompts_per_step if prompts_per_step is not None else self.train_batch_size
        if rollouts_per_prompt is not None and self.prompts_per_step is None:
            raise ValueError(
                "prompts_per_step (data.train_batch_size) is needed to bound the refills of a buffer that "
                "counts rollouts"
            )
        self.on_clear = on_clear
        self.rollouts_per_prompt = rollouts_per_prompt
        self.min_group_size = min_group_size
        self.on_trim = on_trim
        if cut_sessions not in CUT_SESSIONS:
            raise ValueError(f"cut_sessions={cut_sessions!r} is unknown; choose one of {CUT_SESSIONS}.")
        if cut_sessions == "auto":
            cut_sessions = "random" if self.filter_groups_metric is not None else "spread"
        #: the cut rule in force: ``random`` or ``spread``
        self.cut_mode = cut_sessions
        self.cut_seed = int(cut_seed)
        #: cuts made so far (the random cut's draw number)
        self.cuts_made = 0
        required = verl_changes(self.VERL_REQUIRED)
        if required:
            raise mismatch(
                "veRL",
                "verl",
                "0.9.1",
                f"{', '.join(required)} is not the method coba-verl overrides (source digest differs or "
                "it is gone), so the groups veRL clears untrained would no longer reach the CoBA-RL tracker",
            )
        #: veRL methods the counted sampling re-implements that differ from veRL 0.9.1's (then veRL's own
        #: sampling by groups is used, `counts_rollouts` is False)
        reimplemented = (*self.VERL_REIMPLEMENTED, *VERL_CALLED)
        self.verl_changed = tuple(verl_changes(reimplemented)) if rollouts_per_prompt else ()
        if self.verl_changed:
            logger.warning(
                "%s differ from veRL 0.9.1's, which %s re-implements to train exactly M x n rollouts an "
                "update: falling back to veRL's own sampling by groups (an update trains the budgets of "
                "the groups it takes; coba/trained_rollouts shows it)",
                ", ".join(self.verl_changed),
                type(self).__name__,
            )

    def state_dict(self) -> dict[str, int]:
        """What a resume needs to cut as the run that was not interrupted: the count of cuts made,
        which seeds the random cut's next draw (``(cut_seed, step, cuts_made)``). `CobaDataLoader`
        keeps it in data.pt (`CobaDataLoader.carry`)."""
        return {"cuts_made": self.cuts_made}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore `state_dict`'s count of cuts made."""
        self.cuts_made = int(state["cuts_made"])

    @classmethod
    def like(cls, buffer: ReplayBuffer, on_clear: ClearObserver, **options: Any) -> CobaBufferHooks:
        """A `CobaReplayBuffer` built with every constructor argument of veRL's ``buffer``.

        The argument names come from `ReplayBuffer`'s signature (veRL stores each under its own
        name), so a veRL release that adds one is carried over or stops here, naming it. ``options``
        holding one of those arguments (``poll_interval``: ``coba_cpu.poll_interval_s``) replace it.

        Raises:
            FrameworkMismatch: ``buffer`` does not expose a constructor argument
                (`coba_verl.framework_api.constructor_arguments`).
        """
        arguments = constructor_arguments(buffer, ReplayBuffer, "veRL", "verl", "0.9.1")
        return cls(**{**arguments, **options}, on_clear=on_clear)

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
        """Train `select_to_budget`'s groups, oldest first (`_age_order`); cut sessions go to
        ``on_trim``, and with ``clear_surplus`` the ready groups not taken go to ``on_clear`` (the sync
        buffer's surplus). Without it (the async buffer) the groups not taken stay, so `select_by_age`
        picks them: oldest submission step first, whole groups preferred to a cut within the newest.

        Returns:
            The batch, and the number of ready groups cleared untrained.
        """
        order = [uid for uid in self._age_order(partition_id, ready) if groups.get(uid)]
        sizes = [len(groups[uid]) for uid in order]
        steps = self.prompt_global_steps[partition_id]
        if clear_surplus:
            choice = select_to_budget(sizes, target, self.min_group_size)
        else:
            choice = select_by_age(sizes, [steps.get(uid, 0) for uid in order], target, self.min_group_size)
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
            seed = (self.cut_seed, int(steps.get(uid, 0)), self.cuts_made)
            self.cuts_made += 1
            kept = self._sessions_to_keep(partition_id, groups[uid], keep, seed)
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

    def _age_order(self, partition_id: str, uids: Iterable[str]) -> list[str]:
        """``uids`` oldest first: by submission step (veRL's ``_select_prompt_uids`` key,
        ``replay_buffer.py:388-391``), then in the order TransferQueue lists the prompts (the order
        they were put, kept in ``prompt_global_steps``), then by uid; never in a set's hash order.

            steps {a: 2, b: 1, c: 2}, listed c, b, a  ->  [b, c, a]
        """
        steps = self.prompt_global_steps[partition_id]
        listed = {uid: rank for rank, uid in enumerate(steps)}
        return sorted(uids, key=lambda uid: (steps.get(uid, 0), listed.get(uid, len(listed)), uid))

    def _ready_sessions(
        self, partition_id: str, ready: set[str]
    ) -> tuple[dict[str, dict[int, list[str]]], int]:
        """The sessions of the ``ready`` groups (``uid -> {session: keys}``) and how many there are."""
        groups = sessions_of([k for k in self.partitions[partition_id] if uid_of(k) in ready])
        return groups, sum(len(groups.get(uid, {})) for uid in ready)

    def _sessions_to_keep(
        self, partition_id: str, sessions: dict[int, list[str]], keep: int, seed: tuple[int, ...]
    ) -> set[int]:
        """``keep`` sessions of a group to cut: under `cut_mode` ``random`` by
        `random_sessions_to_keep` with ``seed``, under ``spread`` by `sessions_to_keep` on the
        filter metric's values."""
        if self.cut_mode == "random":
            return random_sessions_to_keep(sessions, keep, seed)
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


class CobaReplayBuffer(CobaBufferHooks, ReplayBuffer):
    """veRL's sync `ReplayBuffer` with the CoBA hooks; under DAPO with budgets, M x n rollouts a step.

    ``sizer`` (``coba.size_refills``, `refill_sizing.RefillSizer`): each refill is sized to the
    session slots left (`_refill`); kept only where `counts_rollouts`, else None (with a warning).
    """

    VERL_REIMPLEMENTED = (
        "ReplayBuffer.sample",
        "ReplayBuffer._terminal_eviction_reasons",
        "ReplayBuffer._select_prompt_uids",
    )

    def __init__(self, *args: Any, sizer: RefillSizer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sizer = sizer if sizer is not None and self.counts_rollouts("train") else None
        if sizer is not None and self.sizer is None:
            logger.warning("coba.size_refills: this buffer samples by groups, so its refills are not sized")

    # ------------------------------------------------------------------ rollout-counted sampling
    def counts_rollouts(self, partition_id: str) -> bool:
        """True where `sample` counts rollouts: training, with budgets, under DAPO or failed-group refill,
        against veRL 0.9.1's sampling (``verl_changed`` empty)."""
        return (
            partition_id != "val"
            and self.rollouts_per_prompt is not None
            and not self.verl_changed
            and (self.filter_groups_metric is not None or self.sync_refill_failed_groups)
        )

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """veRL's `sample`, or, where `counts_rollouts`, a batch of exactly ``batch_size`` x n sessions."""
        if not self.counts_rollouts(partition_id):
            return super().sample(global_steps, partition_id, batch_size)
        assert self.rollouts_per_prompt is not None
        return self._sample_rollouts(global_steps, partition_id, batch_size * self.rollouts_per_prompt)

    @SkipManager.annotate_tq(role="rollout_tq", phase="sample")
    def _sample_rollouts(self, global_steps: int, partition_id: str, target: int) -> tuple[KVBatchMeta, dict]:
        """Wait until the ready groups hold ``target`` sessions, then train exactly that many.

        The waiting follows veRL's sync DAPO policy: k groups evicted add 2k prompts of refill
        credit, dispatched within ``max_inflight_gen_batches`` x M prompts in flight; once enough is
        ready, nothing more is dispatched and what is in flight is drained. One addition: when nothing
        is in flight, no credit is left and the ready groups still hold fewer than ``target``
        sessions (they survived the filter but are small), ceil(missing / n) prompts are refilled,
        where veRL, counting groups, would already be done.

        Raises:
            RuntimeError: `EMPTY_GROUP_ROUNDS` x M prompt groups in a row came back with no finished
                session (every session failed): refilling would never end.
        """
        assert self.rollouts_per_prompt is not None
        last_debug_time = time.time()
        eviction_metrics: dict = {}
        credit, draining = 0, False
        max_inflight = self.max_inflight_gen_batches * (self.train_batch_size or 1)
        watch = EmptyGroupWatch(self.prompts_per_step)
        while True:
            self._sync_metadata_from_transfer_queue()
            watch.check(self, partition_id)
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
                submitted = (
                    self._refill(partition_id, dispatch, target, ready_sessions) if dispatch > 0 else None
                )
                if submitted is not None:
                    credit -= dispatch
                    watch.refilled += submitted
                    continue
            if enough and inflight == 0:
                batch, surplus = self._take(partition_id, ready, groups, target, clear_surplus=True)
                if surplus:
                    key = f"{self._metrics_prefix(partition_id)}/filter_groups/discarded_surplus_samples"
                    eviction_metrics[key] = eviction_metrics.get(key, 0) + surplus
                return batch, eviction_metrics
            last_debug_time = self._wait_for_next_poll(partition_id, last_debug_time)

    def _refill(self, partition_id: str, prompts: int, target: int, ready_sessions: int) -> int | None:
        """Ask for ``prompts`` refill prompts (``refill_fn``); returns the prompts submitted
        (`submitted_count`). With a ``sizer`` (``coba.size_refills``) they are sized to the slots left,
        ``target`` - ready sessions - budgets in flight, so fewer may go out; with no slot left nothing
        is asked for (None: wait for the groups in flight)."""
        if self.sizer is None:
            return submitted_count(self.refill_fn(prompts), prompts)
        in_flight = self.pending_keys[partition_id] | self.running_keys[partition_id]
        slots = self.sizer.slots_left(target, ready_sessions, in_flight)
        if slots <= 0:
            return None
        with self.sizer.submitting(slots):
            return submitted_count(self.refill_fn(prompts), prompts)
