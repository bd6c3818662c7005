"""The CPU backend's weight sync for ``separate_async``: the object-store checkpoint engine, driven as
veRL's ``CheckpointEngineManager.update_weights`` drives it, and the old-policy snapshot that owns
its memory. (The whole trainer runs it end to end in ``test_verl_e2e.py``.)"""

from __future__ import annotations

import asyncio
import sys
import time

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


def test_the_old_policy_snapshot_owns_its_memory_where_veRLs_aliases_the_live_parameters(fsdp2_linear):
    """veRL's FSDP2 snapshot (``fsdp2_sharded_save_to_cpu``) takes ``.detach().cpu()`` of each local
    shard, the live tensor itself on CPU: an optimizer step would change the "saved" old policy. The
    CPU backend's worker clones it (`GlooDetachActorWorker.save_model_to_cpu`)."""
    from verl.utils.fsdp_utils import fsdp2_sharded_save_to_cpu

    from coba_verl.cpu.workers import _owned

    model = fsdp2_linear
    before = model.weight.full_tensor().clone()
    verls = fsdp2_sharded_save_to_cpu(model)
    owned = _owned(verls)
    with torch.no_grad():
        model.weight.add_(1.0)  # an optimizer step
    (aliased, _), (kept, spec) = verls[0]["weight"], owned[0]["weight"]
    assert torch.equal(aliased, before + 1.0)  # veRL's snapshot moved with the parameters
    assert torch.equal(kept, before) and spec is model.weight._spec  # ours kept the old policy
    assert owned[1] is verls[1]  # the global spec passes through
