"""`CobaReplayBuffer`: veRL's sync `ReplayBuffer` that shows every group it clears untrained.

Under DAPO dynamic sampling (``algorithm.filter_groups.enable=true``) veRL's sync buffer evicts
all-pass / all-fail groups, discards the surplus groups drained at the end of a step, and (with
``trainer.v1.sampler.sync_refill_failed_groups``) evicts failed groups; all of them go through
``ReplayBuffer._clear_groups`` (``verl/trainer/ppo/v1/replay_buffer.py``), which deletes their
trajectories from TransferQueue. The tracker needs them first: an all-fail group is the most
informative observation CoBA-RL gets about a hard prompt. This subclass calls ``on_clear`` with
the groups' trajectory keys before veRL's own clear; nothing else changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

#: ``on_clear(partition_id, uids, trajectory tags {key: tag} of the partition)``.
ClearObserver = Callable[[str, set[str], dict[str, dict]], None]


class CobaReplayBuffer(ReplayBuffer):
    """veRL's `ReplayBuffer`, with ``on_clear`` called before each group clear.

    Args:
        *args, **kwargs: as for `ReplayBuffer`.
        on_clear: called with the partition, the uids about to be cleared and the partition's
            trajectory tags, while their data is still in TransferQueue.
    """

    def __init__(self, *args: Any, on_clear: ClearObserver, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_clear = on_clear

    @classmethod
    def like(cls, buffer: ReplayBuffer, on_clear: ClearObserver) -> CobaReplayBuffer:
        """A `CobaReplayBuffer` built with every constructor argument of veRL's ``buffer``.

        The argument names come from `ReplayBuffer`'s signature (veRL stores each under its own
        name), so a veRL release that adds one is carried over or stops here, naming it.

        Raises:
            RuntimeError: ``buffer`` does not expose a constructor argument.
        """
        names = [n for n in inspect.signature(ReplayBuffer.__init__).parameters if n != "self"]
        missing = [n for n in names if not hasattr(buffer, n)]
        if missing:
            raise RuntimeError(
                f"cannot rebuild veRL's replay buffer: ReplayBuffer takes {missing} but the buffer does not "
                "expose them. This veRL version is not supported by coba-verl (tested with 0.9.1)."
            )
        return cls(**{n: getattr(buffer, n) for n in names}, on_clear=on_clear)

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        if uids:
            self.on_clear(partition_id, set(uids), self.partitions[partition_id])
        super()._clear_groups(partition_id, uids)
