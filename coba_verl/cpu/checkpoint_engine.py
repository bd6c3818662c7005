"""A veRL checkpoint engine that moves the actor's weights through Ray's object store (CPU backend).

veRL's ``separate_async`` trainer sends weights to its standalone rollout pool with a checkpoint
engine other than ``naive`` (``verl/trainer/ppo/v1/trainer_separate_async.py:68-70``); veRL's own
(nccl, nixl, mooncake, hccl, kimi) all need accelerators. This one needs Ray only, which every veRL
run has. It follows veRL's `CheckpointEngine` contract (``verl/checkpoint_engine/base.py``) as
`CheckpointEngineManager.update_weights` drives it, once per weight sync:

1. ``prepare`` on every actor and rollout worker; the master (actor rank 0) opens a mailbox (a
   named Ray actor, created once per run), draws a fresh token for this sync and asks the mailbox
   for the token's reference: that one call, pending until the master posts, is the only call
   waiting in the mailbox, and its result's reference goes into the master's metadata.
2. ``build_topology``: every worker gets the master's metadata.
3. ``send_weights`` on every actor rank: all ranks walk veRL's weight generator (FSDP gathers each
   full tensor collectively), the master keeps a CPU copy of each and puts the whole state into
   the object store once, then posts its reference to the mailbox under the token;
   ``receive_weights`` on every rollout worker awaits the pending call's result through Ray's
   object store, not through the mailbox, fetches the state and yields ``(name, tensor)`` in the
   actor's order. veRL starts senders and receivers at once (``checkpoint_engine/base.py:539-542``):
   were each receiver's wait a call in the mailbox, as many waiting receivers as the actor runs
   calls at once would keep the post out for ever; here the mailbox holds one waiting call per
   sync, however many rollout workers there are.
4. ``finalize``: the master and the receivers drop their references, the mailbox its entry, so the
   object store frees the state.

Memory: the master holds one full copy of the weights (float as trained) during a sync, as a
bucketed engine would hold a bucket, and the object store one serialized copy (on each node that
fetches it). Ray 2.60 pickles a torch tensor with torch's own reducer, its bytes inside the pickle,
unless ``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1`` (``ray/_private/serialization.py:163-174``,
``ray_constants.py:785``); only numpy arrays get pickle-5 out-of-band buffers that ``ray.get`` maps
read-only from shared memory. So every rollout worker unpickles the state into a full copy of its
own (writable; no zero-copy view), which `coba_verl.cpu.rollout.HFServerAdapter` then sends to its
server. Fine for the CPU backend's models, not meant for GPU runs.

Selected with ``actor_rollout_ref.rollout.checkpoint_engine.backend=ray_object_store``; the
registration module (`coba_verl.cpu.registration`) registers it in every process that imports veRL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Generator
from typing import Any

import ray
import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from coba_verl.cpu import CHECKPOINT_ENGINE_BACKEND
from coba_verl.refusal import CobaTypeRefusal

#: the backend name veRL's config selects it by
BACKEND = CHECKPOINT_ENGINE_BACKEND
#: the named Ray actor through which each sync's object reference reaches the rollout workers
MAILBOX_NAME = "coba_verl_weights_mailbox"


class WeightMailbox:
    """An async Ray actor: the master posts one object reference per sync token; one ``take`` per
    token, the master's own, waits for it and hands it to every receiver through its result.

    The reference is wrapped in a list so that Ray hands it over as a reference, not as the state.
    """

    def __init__(self) -> None:
        self._posted: dict[str, list[ray.ObjectRef]] = {}
        self._ready: dict[str, asyncio.Event] = {}

    def _event(self, token: str) -> asyncio.Event:
        return self._ready.setdefault(token, asyncio.Event())

    async def post(self, token: str, refs: list[ray.ObjectRef]) -> None:
        self._posted[token] = refs
        self._event(token).set()

    async def take(self, token: str) -> list[ray.ObjectRef]:
        await self._event(token).wait()
        return self._posted[token]

    async def drop(self, token: str) -> None:
        self._posted.pop(token, None)
        self._ready.pop(token, None)

    async def tokens(self) -> list[str]:
        """Tokens still held (for tests: each sync's is dropped by ``finalize``)."""
        return sorted(self._posted)


def open_mailbox() -> ray.actor.ActorHandle:
    """The run's mailbox actor, created by the first caller (no CPU reserved: it only relays refs).

    Ray ends a named actor that is not detached once its creator holds no handle to it, so the
    master engine, which creates it, keeps its handle for the run (`ObjectStoreCheckpointEngine`).
    The calls it runs at once (Ray's default for an async actor, 1000) need not grow with the
    rollout workers: one ``take`` waits per sync (module docstring); the others return at once.
    """
    return ray.remote(WeightMailbox).options(name=MAILBOX_NAME, get_if_exists=True, num_cpus=0).remote()


@CheckpointEngineRegistry.register(BACKEND)
class ObjectStoreCheckpointEngine(CheckpointEngine):
    """Weights from the actor's rank 0 to every rollout worker through one object in Ray's store.

    Args:
        bucket_size: veRL's ``update_weights_bucket_megabytes`` in bytes; unused (one object per sync).
        is_master: whether this is the actor's rank 0 (veRL passes it on the actor side only).
    """

    wire_format = "named_tensors"

    def __init__(self, bucket_size: int, is_master: bool = False, **kwargs: Any) -> None:
        if kwargs:
            raise CobaTypeRefusal(
                f"actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.{BACKEND}={sorted(kwargs)}: the "
                f"{BACKEND} checkpoint engine takes none."
            )
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.token: str | None = None
        self._posted: ray.ObjectRef | None = None  # this sync's pending take: [state reference]
        self._state_ref: ray.ObjectRef | None = None
        self._mailbox: ray.actor.ActorHandle | None = None

    def mailbox(self) -> ray.actor.ActorHandle:
        """The mailbox, its handle kept (the master's keeps the actor alive, `open_mailbox`)."""
        if self._mailbox is None:
            self._mailbox = open_mailbox() if self.is_master else ray.get_actor(MAILBOX_NAME)
        return self._mailbox

    def prepare(self) -> dict[str, Any]:
        """Metadata for `build_topology`: the master's carries this sync's token and the reference
        of the mailbox's answer for it (in a list, so that Ray passes it on unresolved)."""
        if not self.is_master:
            return {}
        token = uuid.uuid4().hex
        return {"token": token, "posted": [self.mailbox().take.remote(token)]}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """Every worker gets the master's metadata (``metadata[0]``: actor rank 0 prepares first)."""
        master = metadata[0]
        if "token" not in master or "posted" not in master:
            raise RuntimeError(f"{BACKEND}: the first worker's metadata {master} is not the master's")
        return (
            {"master_metadata": [master] * actor_wg_world_size},
            {"master_metadata": [master] * rollout_world_size},
        )

    def init_process_group(self, master_metadata: dict[str, Any]) -> None:
        """Take this sync's token and the mailbox's pending answer; no process group is needed."""
        self.token = master_metadata["token"]
        (self._posted,) = master_metadata["posted"]

    def finalize(self) -> None:
        """Drop this sync's state: this worker's references and the mailbox's."""
        if self.is_master and self.token is not None:
            self.mailbox().drop.remote(self.token)  # not awaited: finalize is synchronous in veRL's workers
        self._state_ref = None
        self._posted = None
        self.token = None

    async def send_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: int | None = None,
    ) -> dict:
        """Walk ``weights`` (every rank: the generator may gather collectively); the master posts a
        CPU copy of all of them."""
        state: dict[str, torch.Tensor] = {}
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_master:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_master:
            if self.token is None:
                raise RuntimeError(f"{BACKEND}: send_weights before init_process_group")
            self._state_ref = ray.put(state)
            await self.mailbox().post.remote(self.token, [self._state_ref])
        return {}

    async def receive_weights(
        self, global_steps: int | None = None
    ) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        """Wait for the master's state of this sync, then yield its tensors in the actor's order."""
        if self.token is None or self._posted is None:
            raise RuntimeError(f"{BACKEND}: receive_weights before init_process_group")
        refs = await self._posted  # the mailbox's answer, once the master has posted
        state = await refs[0]
        for name, tensor in state.items():
            yield name, tensor
