"""veRL's trainer worker with a gloo-only process group, for the CPU backend.

veRL's workers create their process group as ``"cpu:gloo,{device}:{backend}"``
(``verl/utils/distributed.py``), which on the ``cpu`` platform reads ``"cpu:gloo,cpu:gloo"``:
torch refuses a device listed twice. veRL skips its own call when a group already exists, so
`GlooActorRolloutRefWorker` creates a plain gloo group first and is otherwise veRL's
``ActorRolloutRefWorker``. `use_gloo_workers` swaps it into a trainer's role -> worker map
(``CobaTrainer._init_resource_pool_mgr`` calls it when the CPU backend is on).
"""

from __future__ import annotations

import os
from typing import Any

import ray
import torch.distributed as dist
from verl.workers.engine_workers import ActorRolloutRefWorker

from coba_verl.framework_api import actor_python_class


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


def use_gloo_workers(role_worker_mapping: dict) -> None:
    """Replace every ``ActorRolloutRefWorker`` in veRL's role -> Ray actor class map, in place."""
    for role, actor_cls in list(role_worker_mapping.items()):
        if actor_python_class(actor_cls) is ActorRolloutRefWorker:
            role_worker_mapping[role] = ray.remote(GlooActorRolloutRefWorker)
