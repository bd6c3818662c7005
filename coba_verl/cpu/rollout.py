"""The ``hf`` rollout for veRL's V1 trainer: a transformers model behind veRL's LLM router.

veRL's agent loop reaches an inference engine through one call, ``server.generate(request_id,
prompt_ids, sampling_params, ...) -> TokenOutput`` (``verl/workers/rollout/llm_server.py``), made
on a Ray actor that a `RolloutReplica` launched. vLLM and SGLang do not install beside veRL 0.9
on a CPU-only machine, so the ``hf`` rollout provides the three pieces veRL asks of a rollout
engine, registered under the name ``hf`` (``actor_rollout_ref.rollout.name=hf``, see
`registration`); this module holds the two veRL places by name (``coba_verl.cpu.rollout.HFReplica``,
``coba_verl.cpu.rollout.HFServerAdapter``); the server and its sampling have modules of their own:

`HFReplica`        ``RolloutReplica``: launches one `HFServer` actor per replica (hybrid mode:
                   the replica's trainer workers hold the weights, the server holds a copy;
                   standalone mode, ``separate_async``'s rollout pool: veRL's checkpoint-engine
                   worker holds the adapter and `checkpoint_engine` brings the weights).
`HFServer`         the Ray actor veRL's router calls (`coba_verl.cpu.hf_server`: vLLM's server
                   contract, sleep and wake-up, partial rollout), sampling with
                   `coba_verl.cpu.hf_sampling` (seeds, top-k / top-p, the batched decode).
`HFServerAdapter`  ``BaseRollout`` inside each trainer worker (or checkpoint-engine worker):
                   veRL's checkpoint engine pushes the actor's full weights through
                   ``update_weights`` (a generator, sync or async); the replica's first rank
                   forwards them to its server (every rank consumes the generator, whose FSDP
                   all-gathers are collective).

The environment knobs for tests and benches (request log, decode pace, injected failures) are
`coba_verl.cpu.hf_env`'s.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica
from verl.workers.rollout.utils import ensure_async_iterator

from coba_verl.cpu.hf_server import HFServer


def server_name(replica_rank: int) -> str:
    """Ray actor name of the `HFServer` of replica ``replica_rank``."""
    return f"coba_hf_server_{replica_rank}"


class HFReplica(RolloutReplica):
    """One `HFServer` per replica; the replica's trainer workers (hybrid mode) push its weights."""

    async def launch_servers(self) -> None:
        if self.world_size != 1 or self.nnodes != 1:
            raise ValueError(
                "the hf rollout serves one process per replica: set actor_rollout_ref.rollout."
                f"tensor_model_parallel_size=1 (and data/pipeline parallel 1); got world size "
                f"{self.world_size}"
            )
        # On the node of the replica's worker, as veRL's vLLM replica places its servers
        # (verl/workers/rollout/vllm_rollout/vllm_async_server.py:1342-1380): in a multi-node run
        # each trainer rank's weights then stay on its node.
        placement: Any = "DEFAULT"
        if self.workers:
            worker = self.workers[0]
            node_id = await worker.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
            placement = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        server = (
            ray.remote(HFServer)
            .options(
                name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency,
                scheduling_strategy=placement,
            )
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )  # fmt: skip
        await server.stats.remote()  # surfaces a failed model load here, not at the first request
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-replica-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """The rollout engine object inside a trainer worker: forwards weights to its `HFServer`."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank = rank if replica_rank == -1 else replica_rank  # one rank per replica
        self.is_leader_rank = True
        self._server: ray.actor.ActorHandle | None = None

    def _server_handle(self) -> ray.actor.ActorHandle:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        """Wake the server's ``tags`` (weights, kv_cache), as veRL's vLLM adapter does."""
        if self.is_leader_rank and bool(getattr(self.config, "free_cache_engine", True)):
            await self._server_handle().wake_up.remote(tags=tags)

    async def release(self) -> None:
        """Put the server to sleep, as veRL's vLLM adapter does."""
        if self.is_leader_rank and bool(getattr(self.config, "free_cache_engine", True)):
            await self._server_handle().sleep.remote()

    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout takes full named tensors, got wire_format={wire_format!r}")
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            state[name] = tensor.detach().to("cpu", torch.float32).clone()
        await self._server_handle().update_weights.remote(state, global_steps)
