"""`SessionFates`: each scored session's fate, written once in the rollout ledger and scored into
the tracker, mixed into `coba_verl.verl_plugin.hooks.trainer.CobaBudgets`.

A session is trained (``_compute_advantage``), cut from a trained group (the buffer's ``on_trim``,
`_observe_trimmed`), evicted with its group (the buffer's ``on_clear``, `_observe_cleared`, before
TransferQueue forgets it) or failed (a group closed without it). Every such session's score, length
and generating policy version reach the ledger and the tracker together (`_settle`), so that
generated = trained + cut + evicted + failed holds and F_bar follows the generating versions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import transfer_queue as tq

from coba_verl.records.ledger import Fate, RolloutLedger
from coba_verl.verl_plugin.hooks.sessions import final_outputs, session_tokens, uid_of
from coba_verl.verl_plugin.hooks.step_counts import session_versions

logger = logging.getLogger(__name__)


class SessionFates:
    """The buffer's hooks and the one place a session's fate is written (`_settle`).

    Expects of the class it is mixed into: ``ledger`` (`RolloutLedger`), ``allocator`` (with a
    tracker), ``global_steps`` and ``_plugin_time_s`` (the seconds spent in coba-verl's code).
    """

    ledger: RolloutLedger
    allocator: Any
    global_steps: int
    _plugin_time_s: float

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
