"""veRL's own start-up code, called by the tests of the launch checks: what each refusal must match.

- `verl_trainer`: veRL's trainer class for a V1 mode, built on a config (its constructor makes
  veRL's start-up assertions and needs no Ray, which starts in ``init``);
- `rollout_worker_lays_out`: the rollout part of veRL's ``ActorRolloutRefWorker.init_model``, up to
  the device mesh it lays the training devices out in;
- `route_a_request`: the rollout servers veRL's ``LLMServerManager`` starts on a pool (counted, none
  started) and veRL's request router over them, asked for a server;
- `installed` and `verl_registry_get`: packages not installed here (cupy, nixl, mooncake...) made
  importable, and veRL's checkpoint-engine registry as veRL's own imports fill it in that
  environment.

`installed` puts stand-ins for the named top-level packages on ``sys.meta_path``: ``find_spec`` finds
them as it would the real ones, and importing one (or any module under it) gives a module whose every
attribute is a stand-in class, so veRL's engine modules import under them as they would with the real
packages. On leaving, the finder, the stand-in modules, veRL's engine modules imported under them
and what they registered are gone and veRL's registry holds what it held before (other modules
imported meanwhile stay, with what they registered: ``datasets``, for one, registers types with
pyarrow once a process).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace
from unittest.mock import patch

from omegaconf import DictConfig, OmegaConf


def verl_trainer(config: DictConfig, mode: str) -> object:
    """veRL's own trainer class for ``mode``, built on a copy of ``config``."""
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    config = copy.deepcopy(config)
    OmegaConf.update(config, "trainer.v1.trainer_mode", mode)
    classes = {"sync": PPOTrainerSync, "colocate_async": PPOTrainerColocateAsync,
               "separate_async": PPOTrainerSeparateAsync}  # fmt: skip
    return classes[mode](config)


class LaidOut(Exception):
    """veRL's rollout worker got past its assertions to the device mesh."""


def rollout_worker_lays_out(config: DictConfig, devices: int) -> None:
    """veRL's rollout worker (``ActorRolloutRefWorker.init_model``, its rollout part; the actor's part
    builds the model) on ``devices`` training devices, up to the device mesh it lays them out in.

    Raises:
        AssertionError: veRL's, where the devices do not divide into rollout engines.
    """
    from verl.workers import engine_workers

    def device_mesh(*args: object, **kwargs: object) -> None:
        raise LaidOut(kwargs["mesh_shape"])

    rollout = OmegaConf.to_container(config.actor_rollout_ref.rollout, resolve=True)
    worker = SimpleNamespace(config=OmegaConf.create({"model": {}, "rollout": rollout}), role="rollout")
    worker.world_size = devices
    try:
        with patch.object(engine_workers, "init_device_mesh", device_mesh):
            engine_workers.ActorRolloutRefWorker.init_model(worker)
    except LaidOut:
        return
    raise AssertionError("veRL's rollout worker did not reach its device mesh")


class _Server:
    """veRL's rollout replica, counted and not started."""

    def __init__(self, replica_rank: int, **kwargs: object) -> None:
        self._server_handle, self._server_address = object(), f"server-{replica_rank}"

    async def init_hybrid(self, worker_group: object) -> None:
        pass

    async def init_standalone(self) -> None:
        pass


def route_a_request(config: DictConfig, devices: int | None) -> int:
    """The rollout servers veRL's ``LLMServerManager`` starts on ``devices`` training devices (None:
    ``separate_async``'s standalone pool of ``rollout.nnodes x n_gpus_per_node``), none started, and
    veRL's request router over them asked for one.

    Raises:
        RuntimeError: veRL's router's, where the pool holds no server ("No available servers").
    """
    from verl.workers.rollout.llm_server import LLMServerManager
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    class Manager(LLMServerManager):
        rollout_replica_class = _Server

    group = None if devices is None else SimpleNamespace(world_size=devices)
    manager = Manager(config=config, worker_group=group)
    asyncio.run(manager._initialize_llm_servers())
    servers = dict(zip(manager.server_addresses, manager.server_handles, strict=True))
    GlobalRequestLoadBalancer(servers=servers).acquire_server("a request")
    return len(servers)


class _StandInType(type):
    """A class whose every attribute is another stand-in class (``cupy.cuda.Stream``)."""

    def __getattr__(cls, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(name)


def stand_in(name: str) -> type:
    """A class standing in for anything a stand-in package holds: callable, subclassable, ``|``-able."""
    return _StandInType(name, (), {"__init__": lambda self, *args, **kwargs: None})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(name)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the packages in ``names`` and every module under them."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == "torch_npu":  # torch_npu adds ``torch.npu`` (torch imports it at start)
            import torch

            torch.npu = stand_in("npu")


@contextlib.contextmanager
def installed(*names: str) -> Iterator[None]:
    """Within: the packages ``names`` are found and import (stand-ins); on leaving, all is as before."""
    import torch
    from verl.checkpoint_engine import CheckpointEngineRegistry  # imported before, without them

    registry, errors = dict(CheckpointEngineRegistry._registry), dict(CheckpointEngineRegistry._import_errors)
    modules, had_npu = set(sys.modules), hasattr(torch, "npu")
    finder = _StandInFinder(set(names))
    sys.meta_path.insert(0, finder)
    try:
        if "torch_npu" in names:  # torch imports its device backends as it starts (``torch.backends``)
            importlib.import_module("torch_npu")
        yield
    finally:
        sys.meta_path.remove(finder)
        removed = {
            name
            for name in set(sys.modules) - modules  # the stand-ins, and veRL's engine modules that used them
            if name.split(".")[0] in finder.names or name.startswith("verl.checkpoint_engine.")
        }
        for name in removed:
            del sys.modules[name]
        for name, engine in list(CheckpointEngineRegistry._registry.items()):  # others' registrations stay
            if engine.__module__ in removed:
                del CheckpointEngineRegistry._registry[name]
        CheckpointEngineRegistry._registry.update(registry)
        CheckpointEngineRegistry._import_errors.clear()
        CheckpointEngineRegistry._import_errors.update(errors)
        if hasattr(torch, "npu") and not had_npu:
            del torch.npu


def verl_registry_get(backend: str) -> type:
    """veRL's ``CheckpointEngineRegistry.get(backend)`` after veRL's own import of the engine modules
    that did not import before runs again here (each in ``try``/``except ImportError``, as
    ``verl/checkpoint_engine/__init__.py`` runs it): veRL's registry in this environment."""
    from verl.checkpoint_engine import CheckpointEngineRegistry

    for module in list(CheckpointEngineRegistry._import_errors):
        try:
            importlib.import_module(f"verl.checkpoint_engine.{module}")
        except ImportError as error:
            CheckpointEngineRegistry.record_import_error(module, error)
        else:
            del CheckpointEngineRegistry._import_errors[module]
    return CheckpointEngineRegistry.get(backend)


def refusal_of(config: DictConfig) -> str:
    """The one-line refusal the launch checks (`check_config`) give ``config`` (a copy is checked)."""
    import pytest

    from coba_verl.refusal import CobaRefusal
    from coba_verl.verl_plugin.launch.config_bridge import check_config

    with pytest.raises(CobaRefusal) as refusal:
        check_config(copy.deepcopy(config))
    message = str(refusal.value)
    assert "\n" not in message
    return message
