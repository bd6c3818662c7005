"""What the CPU backend registers with veRL, in every process that imports veRL.

Named in ``VERL_USE_EXTERNAL_MODULES`` by the launcher (`coba_verl.cpu.launcher`), so veRL's own
``import verl`` loads it in the driver, the TaskRunner and every Ray worker, before any code asks
for the platform. No veRL function or class is replaced; each line adds an entry to one of
veRL's registries, all but one through their public ``register``; that one by writing a private
table (veRL 0.9.1 has no function for it), so a veRL release that renames ``_engines`` or
``_ROLLOUT_REGISTRY`` fails here, at import:

- ``PlatformRegistry``: `PlatformCPU` as ``cpu`` (selected by ``VERL_PLATFORM=cpu``);
- ``EngineRegistry``: veRL's FSDP language-model engine for device ``cpu`` (veRL registers it
  for ``cuda`` and ``npu`` only; FSDP2 itself runs on CPU tensors over gloo), unless its private
  ``_engines`` table already holds one. This one waits for veRL's engine package
  (`ENGINE_PACKAGE`, `coba_verl.after_import`): the FSDP actor's worker imports it before it asks
  the registry, the other processes never do and skip importing the engines (FSDP, peft: about
  half a second of CPU each);
- ``RolloutReplicaRegistry``: `HFReplica` as rollout ``hf``;
- the rollout-adapter table of ``verl.workers.rollout.base`` (``_ROLLOUT_REGISTRY``, veRL's
  name -> class table for the worker-side engine): ``("hf", "async")`` -> `HFServerAdapter`;
- ``CheckpointEngineRegistry``: `ObjectStoreCheckpointEngine` as ``ray_object_store`` (the weight
  transfer of ``separate_async``'s standalone rollout pool).
"""

from __future__ import annotations

# The platform first: importing veRL's engines asks for the platform at module level.
from coba_verl.cpu import PLATFORM_NAME, ROLLOUT_NAME  # isort: skip
from coba_verl.cpu.platform import PlatformCPU  # isort: skip

from verl.workers.rollout import base as rollout_base  # noqa: E402
from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: E402

from coba_verl.after_import import after_import  # noqa: E402

__all__ = ["ENGINE_PACKAGE", "PlatformCPU", "register_cpu_engine"]

#: veRL's engine package: its ``__init__`` imports ``EngineRegistry`` and the FSDP engines.
ENGINE_PACKAGE = "verl.workers.engine"


def register_cpu_engine() -> None:
    """veRL's FSDP language-model engine under device ``cpu`` for backends ``fsdp`` and ``fsdp2``,
    where the registry's private ``_engines`` table holds none yet."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    engines = EngineRegistry._engines["language_model"]
    for backend in ("fsdp", "fsdp2"):
        if PLATFORM_NAME not in engines.get(backend, {}):
            EngineRegistry.register(model_type="language_model", backend=backend, device=PLATFORM_NAME)(
                FSDPEngineWithLMHead
            )


after_import(ENGINE_PACKAGE, register_cpu_engine)


def _load_hf_replica() -> type:
    from coba_verl.cpu.rollout import HFReplica

    return HFReplica


RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_hf_replica)
rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "coba_verl.cpu.rollout.HFServerAdapter"

# veRL's CheckpointEngineRegistry: the object-store engine, registered as it imports
import coba_verl.cpu.checkpoint_engine  # noqa: E402,F401
