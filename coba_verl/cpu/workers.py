"""veRL's trainer worker with a gloo-only process group, for the CPU backend.

veRL's workers create their process group as ``"cpu:gloo,{device}:{backend}"``
(``verl/utils/distributed.py``), which on the ``cpu`` platform reads ``"cpu:gloo,cpu:gloo"``:
torch refuses a device listed twice. veRL skips its own call when a group already exists, so
`GlooActorRolloutRefWorker` creates a plain gloo group first and is otherwise veRL's
``ActorRolloutRefWorker``. `use_gloo_workers` swaps it into a trainer's role -> worker map; the
`GlooWorkers` mixin (in each CoBA V1 trainer class) calls it when the CPU backend is on.

``separate_async`` puts veRL's ``DetachActorWorker`` in that map instead
(``trainer_separate_async.py:114-126``), which snapshots the actor's shards to host memory between
local updates: `GlooDetachActorWorker` is it with the gloo group, and with snapshots that copy.
veRL's FSDP2 snapshot takes ``param.detach().cpu()`` of each shard (``fsdp_utils.py:1167``, and
the DTensor branch below it), which on a CPU tensor is the tensor itself, not a copy: the
"saved" old policy would follow every optimizer step and the restore would restore nothing.

That override is written against veRL 0.9.1's snapshot (`VERL_SNAPSHOT_SHA256`: the source of
``DetachActorWorker.save_model_to_cpu`` and of the FSDP helpers it calls): a veRL that kept its
snapshot where the copy does not reach (in an object of its own, say) would train against a moving
old policy in silence. So `use_gloo_workers` refuses to swap the worker in when the installed
veRL's pieces differ (`check_snapshot_pieces`), before any worker starts.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable
from typing import Any

import ray
import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils import fsdp_utils
from verl.workers.engine_workers import ActorRolloutRefWorker

from coba_verl.framework_api import actor_python_class, mismatch

#: sha256 of the source of veRL 0.9.1's snapshot pieces, whose aliasing `GlooDetachActorWorker` undoes
VERL_SNAPSHOT_SHA256 = {
    "DetachActorWorker.save_model_to_cpu": "ee3493289bb90b59ef00cb1ad037efd2bc02f51453925f4b27992149ba88116c",
    "fsdp1_sharded_save_to_cpu": "02d0ec58e2f6a1aff229de65f9c491cc4590e2653797dda2a030540f998815d8",
    "fsdp2_sharded_save_to_cpu": "ecdb335bb1d3948f27c96dc6be0edc2c93bcc94d7c19c2f52fbfca489edaab7e",
}


def verl_snapshot_pieces() -> dict[str, Callable[..., Any]]:
    """The installed veRL's snapshot pieces, by the names of `VERL_SNAPSHOT_SHA256`."""
    return {
        "DetachActorWorker.save_model_to_cpu": DetachActorWorker.save_model_to_cpu,
        "fsdp1_sharded_save_to_cpu": fsdp_utils.fsdp1_sharded_save_to_cpu,
        "fsdp2_sharded_save_to_cpu": fsdp_utils.fsdp2_sharded_save_to_cpu,
    }


def check_snapshot_pieces() -> None:
    """Refuse a veRL whose snapshot pieces are not 0.9.1's: `GlooDetachActorWorker`'s copy is known to
    reach every tensor of 0.9.1's snapshot only.

    Raises:
        FrameworkMismatch: naming the changed pieces.
    """
    changed = changed_snapshot_pieces()
    if changed:
        raise mismatch(
            "veRL",
            "verl",
            "0.9.1",
            f"{changed} differ from the source the CPU backend's separate_async worker copies each "
            "old-policy snapshot of (coba_verl.cpu.workers.VERL_SNAPSHOT_SHA256); an uncopied snapshot "
            "would follow every optimizer step",
        )


def changed_snapshot_pieces() -> list[str]:
    """The pieces whose source (unwrapped, as ``inspect`` reads it) is not veRL 0.9.1's, or unreadable."""
    changed = []
    for name, piece in verl_snapshot_pieces().items():
        try:
            digest = hashlib.sha256(inspect.getsource(piece).encode()).hexdigest()
        except (OSError, TypeError):
            digest = None
        if digest != VERL_SNAPSHOT_SHA256[name]:
            changed.append(name)
    return changed


def init_gloo_process_group() -> None:
    """``init_process_group("gloo")`` from the RANK / WORLD_SIZE / MASTER_* that veRL gives each worker."""
    if not dist.is_initialized():
        dist.init_process_group(
            backend="gloo",
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            init_method=os.environ.get("DIST_INIT_METHOD") or None,
        )


class GlooActorRolloutRefWorker(ActorRolloutRefWorker):
    """veRL's hybrid actor/rollout/ref worker whose process group is gloo only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init_gloo_process_group()
        super().__init__(*args, **kwargs)


def _owned(value: Any) -> Any:
    """``value`` with every tensor in it (dicts, tuples, lists) cloned; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {key: _owned(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_owned(item) for item in value)
    return value


class GlooDetachActorWorker(DetachActorWorker):
    """veRL's ``DetachActorWorker`` with a gloo-only process group and snapshots that own their memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init_gloo_process_group()
        super().__init__(*args, **kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_model_to_cpu(self, n: int) -> None:
        """veRL's snapshot of the actor's shards under key ``n``, each shard cloned (module docstring)."""
        super().save_model_to_cpu(n)
        self.cpu_saved_models[n] = _owned(self.cpu_saved_models[n])


#: veRL's worker class -> the CPU backend's
GLOO_WORKERS = {ActorRolloutRefWorker: GlooActorRolloutRefWorker, DetachActorWorker: GlooDetachActorWorker}


class GlooWorkers:
    """A mixin for veRL's V1 trainer (before it in the bases): with the CPU backend on
    (``coba_cpu.enable``), veRL's worker map gets the gloo workers (`use_gloo_workers`)."""

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        if OmegaConf.select(self.config, "coba_cpu.enable"):
            use_gloo_workers(self.role_worker_mapping)


def use_gloo_workers(role_worker_mapping: dict) -> None:
    """Replace every ``ActorRolloutRefWorker`` and ``DetachActorWorker`` in veRL's role -> Ray actor
    class map, in place.

    Raises:
        FrameworkMismatch: a ``DetachActorWorker`` to replace, under a veRL whose snapshot is not
            0.9.1's (`check_snapshot_pieces`).
    """
    for role, actor_cls in list(role_worker_mapping.items()):
        gloo = GLOO_WORKERS.get(actor_python_class(actor_cls))
        if gloo is GlooDetachActorWorker:
            check_snapshot_pieces()
        if gloo is not None:
            role_worker_mapping[role] = ray.remote(gloo)
