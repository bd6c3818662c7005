"""The CPU backend's weight sync for ``separate_async``: the object-store checkpoint engine, driven as
veRL's ``CheckpointEngineManager.update_weights`` drives it, and the old-policy snapshot that owns
its memory. (The whole trainer runs it end to end in ``test_verl_e2e.py``.)"""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from coba_verl.cpu.checkpoint_engine import BACKEND, ObjectStoreCheckpointEngine


@pytest.fixture(scope="module")
def local_ray():
    import ray

    assert not ray.is_initialized(), "another test left Ray running"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests are not importable in Ray
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def master(local_ray) -> ObjectStoreCheckpointEngine:
    """The actor's rank 0, for the whole module: its mailbox actor starts once."""
    return ObjectStoreCheckpointEngine(1 << 20, is_master=True)


class Receiver:
    """A rollout-side engine in a Ray actor of its own, as veRL's ``CheckpointEngineWorker`` holds one."""

    def __init__(self) -> None:
        self.engine = ObjectStoreCheckpointEngine(bucket_size=1 << 20)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.engine, method)(*args, **kwargs)

    async def receive(self) -> list[tuple[str, list[float]]]:
        return [(name, tensor.tolist()) async for name, tensor in self.engine.receive_weights(global_steps=3)]


def sync_once(ray, actors: list[ObjectStoreCheckpointEngine], receivers, weights_of_rank) -> list:
    """One weight sync in the manager's order: prepare, topology, init, send + receive, finalize."""
    metadata = [engine.prepare() for engine in actors] + ray.get(
        [r.call.remote("prepare") for r in receivers]
    )
    actor_kwargs, rollout_kwargs = ObjectStoreCheckpointEngine.build_topology(
        len(actors), len(receivers), metadata
    )
    for rank, engine in enumerate(actors):
        engine.init_process_group(**{key: values[rank] for key, values in actor_kwargs.items()})
    ray.get([
        r.call.remote("init_process_group", **{key: values[i] for key, values in rollout_kwargs.items()})
        for i, r in enumerate(receivers)
    ])  # fmt: skip
    received = [r.receive.remote() for r in receivers]

    async def send_all():
        await asyncio.gather(
            *(engine.send_weights(weights_of_rank(rank)) for rank, engine in enumerate(actors))
        )

    asyncio.run(send_all())
    out = ray.get(received)
    for engine in actors:
        engine.finalize()
    ray.get([r.call.remote("finalize") for r in receivers])
    return out


def test_every_rollout_worker_gets_the_masters_weights_in_order_and_every_rank_walks_its_generator(
    local_ray, master
):
    ray = local_ray
    actors = [master, ObjectStoreCheckpointEngine(1 << 20)]
    receivers = [ray.remote(Receiver).remote() for _ in range(2)]
    walked: list[int] = []

    def weights_of_rank(rank: int):  # FSDP's generator: every rank must walk it (collective gathers)
        for step, name in enumerate(["embed.weight", "lm_head.weight", "norm.weight"]):
            walked.append(rank)
            yield name, torch.full((2,), float(step) + 10 * rank)

    first = sync_once(ray, actors, receivers, weights_of_rank)
    expected = [("embed.weight", [0.0, 0.0]), ("lm_head.weight", [1.0, 1.0]), ("norm.weight", [2.0, 2.0])]
    assert first == [expected, expected]  # rank 0's tensors, not rank 1's
    assert sorted(walked) == [0, 0, 0, 1, 1, 1]
    second = sync_once(
        ray, actors, receivers, lambda rank: iter([("embed.weight", torch.ones(1) * (5 + rank))])
    )
    assert second == [[("embed.weight", [5.0])]] * 2  # a new token each sync: never the last sync's state
    mailbox = actors[0].mailbox()
    held = ray.get(mailbox.tokens.remote())
    for _ in range(100):  # finalize sends the drop without waiting for it (it runs inside veRL's worker)
        if not held:
            break
        time.sleep(0.1)
        held = ray.get(mailbox.tokens.remote())
    assert held == []  # each sync's reference was dropped
    for receiver in receivers:
        ray.kill(receiver)


RECEIVERS = 80  # more than the 64 calls the mailbox actor once ran at a time


def test_more_rollout_workers_than_an_actor_runs_calls_at_once_all_get_the_weights(local_ray, master):
    """Every rollout worker waits for the master's weights while the master sends them (veRL starts
    both at once, ``checkpoint_engine/base.py:539-542``): however many wait, the weights get through,
    and each receiver unpickles the tensors into memory of its own (the module docstring). The
    receivers share the test's process (what counts is how many wait at once), so no process starts."""
    receivers = [ObjectStoreCheckpointEngine(1 << 20) for _ in range(RECEIVERS)]
    metadata = [master.prepare()] + [engine.prepare() for engine in receivers]
    actor_kwargs, rollout_kwargs = ObjectStoreCheckpointEngine.build_topology(1, RECEIVERS, metadata)
    master.init_process_group(**{key: values[0] for key, values in actor_kwargs.items()})
    for i, engine in enumerate(receivers):
        engine.init_process_group(**{key: values[i] for key, values in rollout_kwargs.items()})
    weights = [("embed.weight", torch.tensor([1.0, 2.0])), ("norm.weight", torch.tensor([3.0]))]

    async def receive(engine) -> list[tuple[str, torch.Tensor]]:
        return [(name, tensor) async for name, tensor in engine.receive_weights(global_steps=1)]

    async def send_after_every_receiver_waits() -> None:
        await asyncio.sleep(1.0)
        await master.send_weights(iter(weights))

    async def sync() -> list:
        return await asyncio.gather(send_after_every_receiver_waits(), *map(receive, receivers))

    _, *got = asyncio.run(asyncio.wait_for(sync(), timeout=60))
    values = [[(name, tensor.tolist()) for name, tensor in engine] for engine in got]
    assert values == [[("embed.weight", [1.0, 2.0]), ("norm.weight", [3.0])]] * RECEIVERS
    addresses = [tensor.data_ptr() for engine in got for _, tensor in engine]  # all alive here
    assert len(set(addresses)) == len(addresses)  # no two receivers share a tensor's memory
    for engine in [master, *receivers]:
        engine.finalize()


def test_a_receiver_without_the_masters_token_is_an_error_not_a_hang():
    engine = ObjectStoreCheckpointEngine(1 << 20)

    async def receive():
        return [item async for item in engine.receive_weights()]

    with pytest.raises(RuntimeError, match=f"{BACKEND}: receive_weights before init_process_group"):
        asyncio.run(receive())
    with pytest.raises(RuntimeError, match="is not the master's"):
        ObjectStoreCheckpointEngine.build_topology(1, 1, [{}, {}])
    with pytest.raises(
        TypeError,
        match=r"engine_kwargs.ray_object_store=\['rebuild_group'\]: the ray_object_store .* takes none",
    ):
        ObjectStoreCheckpointEngine(1 << 20, is_master=True, rebuild_group=True)


@pytest.fixture
def fsdp2_linear():
    """A ``Linear(2, 2)`` sharded by FSDP2 over a one-process gloo group, as the actor's modules are."""
    import socket

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    try:
        model = torch.nn.Linear(2, 2)
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        yield model
    finally:
        dist.destroy_process_group()


def detach_worker(cls: type, module: torch.nn.Module):
    """A ``cls`` (veRL's ``DetachActorWorker`` or the CPU backend's) whose FSDP2 actor module is
    ``module``, without its Ray start-up: what its snapshot methods read, and nothing else."""
    from omegaconf import OmegaConf

    worker = cls.__new__(cls)
    worker.config = OmegaConf.create({"actor": {"strategy": "fsdp2"}})
    worker.actor = SimpleNamespace(engine=SimpleNamespace(module=module))
    worker._strategy_handlers = None
    return worker


@pytest.mark.parametrize("worker_class", ["GlooDetachActorWorker", "DetachActorWorker"])
def test_the_old_policy_snapshot_survives_an_optimizer_step_in_the_cpu_backends_worker_only(
    fsdp2_linear, worker_class
):
    """veRL's separate_async cycle (``trainer_separate_async.py:203-211``): snapshot pi_old, an
    optimizer step, snapshot the current weights, restore pi_old for the old log-probs, restore the
    current weights. veRL's FSDP2 snapshot (``fsdp2_sharded_save_to_cpu``) takes ``.detach().cpu()`` of
    each local shard, on CPU the live tensor itself, so its "pi_old" follows the step; the CPU
    backend's worker (`GlooDetachActorWorker.save_model_to_cpu`) clones each snapshot."""
    from verl.experimental.separation.engine_workers import DetachActorWorker
    from verl.single_controller.base.decorator import MAGIC_ATTR

    from coba_verl.cpu.workers import GlooDetachActorWorker

    cls = {"GlooDetachActorWorker": GlooDetachActorWorker, "DetachActorWorker": DetachActorWorker}[
        worker_class
    ]
    model = fsdp2_linear
    worker = detach_worker(cls, model)
    old_policy = model.weight.full_tensor().clone()
    worker.save_model_to_cpu(0)
    with torch.no_grad():
        model.weight.add_(1.0)  # a local update
    current = model.weight.full_tensor().clone()
    worker.save_model_to_cpu(1)
    worker.restore_model_from_cpu(0)
    restored_old = model.weight.full_tensor().clone()
    worker.restore_model_from_cpu(1)
    assert torch.equal(model.weight.full_tensor(), current)  # back to the trained weights
    if cls is GlooDetachActorWorker:
        assert torch.equal(restored_old, old_policy)
    else:  # veRL's snapshot moved with the parameters: the "old" policy is the trained one
        assert torch.equal(restored_old, current) and not torch.equal(restored_old, old_policy)
    # the override keeps veRL's dispatch, so veRL's worker group binds it as it binds veRL's
    assert getattr(cls.save_model_to_cpu, MAGIC_ATTR) == getattr(
        DetachActorWorker.save_model_to_cpu, MAGIC_ATTR
    )


def test_veRLs_snapshot_pieces_are_those_the_worker_was_written_against():
    from coba_verl.cpu.workers import changed_snapshot_pieces

    assert changed_snapshot_pieces() == []  # veRL 0.9.1: each digest in VERL_SNAPSHOT_SHA256


def test_a_veRL_with_another_snapshot_is_refused_before_the_worker_is_swapped_in(monkeypatch):
    """A veRL whose ``save_model_to_cpu`` keeps the shards inside an object of its own, where the CPU
    backend's copy would not reach them: the worker swap refuses it, naming the changed piece; veRL's
    hybrid worker (no snapshot) is still swapped."""
    import ray
    from verl.experimental.separation.engine_workers import DetachActorWorker
    from verl.utils.fsdp_utils import fsdp2_sharded_save_to_cpu
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from coba_verl.cpu.workers import GlooActorRolloutRefWorker, GlooDetachActorWorker, use_gloo_workers
    from coba_verl.framework_api import FrameworkMismatch, actor_python_class

    roles = {"actor": ray.remote(DetachActorWorker)}
    use_gloo_workers(roles)  # veRL 0.9.1
    assert actor_python_class(roles["actor"]) is GlooDetachActorWorker

    def save_model_to_cpu(self, n):  # a changed veRL: the snapshot in a holder object
        self.cpu_saved_models = getattr(self, "cpu_saved_models", {})
        self.cpu_saved_models[n] = SimpleNamespace(state=fsdp2_sharded_save_to_cpu(self.actor.engine.module))

    monkeypatch.setattr(DetachActorWorker, "save_model_to_cpu", save_model_to_cpu)
    with pytest.raises(FrameworkMismatch, match=r"\['DetachActorWorker.save_model_to_cpu'\] differ from"):
        use_gloo_workers({"actor": ray.remote(DetachActorWorker)})
    hybrid = {"actor_rollout": ray.remote(ActorRolloutRefWorker)}
    use_gloo_workers(hybrid)
    assert actor_python_class(hybrid["actor_rollout"]) is GlooActorRolloutRefWorker
