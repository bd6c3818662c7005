"""`HFServer`: the ``hf`` rollout's Ray actor, a transformers model behind veRL's LLM router.

veRL's agent loop reaches an inference engine through one call, ``server.generate(request_id,
prompt_ids, sampling_params, ...) -> TokenOutput`` (``verl/workers/rollout/llm_server.py``).
Concurrent ``generate`` calls are batched into one forward pass per token (`sample_batch`: KV
cache, left padding); sampling honours temperature (0 = greedy), top-k, top-p, ``max_tokens`` and
stop tokens.

The server keeps vLLM's contract where a GPU run would notice a difference: ``generate`` has the
exact parameters of veRL 0.9.1's ``vLLMHttpServer.generate`` (``vllm_async_server.py:558-569``) and
nothing else; with ``rollout.free_cache_engine`` (veRL's default) ``sleep`` releases weights and KV
cache and ``wake_up(tags)`` restores them, as the worker-side adapter asks (``vllm_rollout.py:195-207``),
and a ``generate`` or a weight load that arrives while the part it needs is asleep is an error.
Every request is recorded (replica, request id, prompt, weight version, sampling parameters,
priority): `HFServer.requests`, and in the request log when ``COBA_HF_REQUEST_LOG`` names a folder.

Partial rollout (``trainer.v1.trainer_mode=colocate_async``), as vLLM's server does it
(``vllm_async_server.py:690-745, 931-1060``): ``abort_all_requests`` closes the server to new
requests, stops the batch being decoded after its current token and answers every request in it,
and every queued one, with the tokens drawn so far and ``stop_reason="aborted"``; a request that
arrives while it is closed waits for ``resume_generation`` (or, after an abort with
``reject_request=True``, is answered at once with no token). veRL's ``FullyAsyncLLMServerClient``
sends an aborted request again, with its tokens so far appended to the prompt, once the server
resumes under the new weights.

The server reads its environment knobs when it starts: the request log, the decode pace and the
injected failures (`coba_verl.cpu.hf_env`).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

from coba_verl.cpu.hf_env import (
    DECODE_PACE_ENV,
    FAIL_RATE_ENV,
    REQUEST_LOG_ENV,
    decode_pace,
    fail_rate,
    injected_failure,
)
from coba_verl.cpu.hf_sampling import SampleRequest, replica_seed, request_seed, sample_batch

#: What ``sleep`` releases and ``wake_up`` restores (vLLM's tags).
SLEEP_TAGS = frozenset({"weights", "kv_cache"})


class HFServer:
    """A transformers causal LM serving veRL's token-in/token-out ``generate`` (a Ray actor).

    Args:
        config: veRL's ``RolloutConfig`` (``prompt_length``, ``response_length``, ``max_num_seqs``,
            ``seed``, ``calculate_log_probs``...).
        model_config: veRL's ``HFModelConfig``; the model is loaded from ``local_path`` in float32.
        replica_rank: the replica this server belongs to.
    """

    def __init__(
        self, config: Any, model_config: Any, replica_rank: int, batch_wait_s: float = 0.005
    ) -> None:
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        torch.set_num_threads(1)
        if not isinstance(model_config, HFModelConfig):  # the replica passes the model's DictConfig
            model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        model = AutoModelForCausalLM.from_pretrained(
            model_config.local_path, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        tokenizer = model_config.tokenizer
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer is not None and tokenizer.eos_token_id is not None:
            eos_ids.add(int(tokenizer.eos_token_id))
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        pad_id = int(pad if pad is not None else next(iter(eos_ids), 0))
        self.start(config, model, replica_rank, eos_ids, pad_id, batch_wait_s)

    def start(
        self,
        config: Any,
        model: torch.nn.Module,
        replica_rank: int,
        eos_ids: Iterable[int],
        pad_id: int,
        batch_wait_s: float = 0.005,
    ) -> None:
        """Serve ``model`` (already loaded): the server's state, awake, with no request yet."""
        self.config = config
        self.model = model
        self.replica_rank = replica_rank
        self.batch_wait_s = batch_wait_s
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.global_steps: int | None = None
        self._version = 0
        self._draws: Counter[tuple[int, ...]] = Counter()
        self._pending: list[SampleRequest] = []
        self._serving: asyncio.Task | None = None
        self.requests_served = 0
        self.batches_served = 0
        self.asleep: set[str] = set()  # parts released by sleep(), of SLEEP_TAGS
        self._open = asyncio.Event()  # closed from abort_all_requests to resume_generation
        self._open.set()
        self._reject = False  # abort_all_requests(reject_request=True): answer, do not wait
        self._abort = threading.Event()  # stops the batch being decoded (sample_batch)
        self.aborted_requests = 0
        self.requests: list[dict[str, Any]] = []  # every generate call, in arrival order
        folder = os.environ.get(REQUEST_LOG_ENV)
        self._log_path = os.path.join(folder, f"requests-{replica_rank}.jsonl") if folder else None
        self.decode_pace_s = decode_pace(os.environ.get(DECODE_PACE_ENV))
        self.fail_rate = fail_rate(os.environ.get(FAIL_RATE_ENV))
        self.failed_requests = 0

    # ------------------------------------------------------------------ generation
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        priority: int = 0,
        kv_transfer_params: dict | None = None,
    ) -> TokenOutput:
        """Sample one continuation of ``prompt_ids``; the parameters of veRL's vLLM server, no others.

        Raises:
            ValueError: image, video or audio data, or KV-transfer parameters (text-only, one stage).
            RuntimeError: a request while the weights or the KV cache are asleep, or a request
                drawn to fail under ``COBA_HF_FAIL_RATE``.
        """
        if any(x is not None for x in (image_data, video_data, audio_data, mm_processor_kwargs)):
            raise ValueError("the hf rollout serves text-only models; got image/video/audio data")
        if kv_transfer_params is not None:
            raise ValueError("the hf rollout has no prefill/decode disaggregation; got kv_transfer_params")
        if not self._open.is_set():
            if self._reject:
                return self._aborted_output(bool(sampling_params.get("logprobs", False)))
            await self._open.wait()  # parked until resume_generation, as vLLM parks it
        if self.asleep:
            raise RuntimeError(
                f"replica {self.replica_rank} got request {request_id} while its {sorted(self.asleep)} "
                "are asleep: veRL must wake the rollout before generating"
            )
        self._record(prompt_ids, sampling_params, request_id, priority)
        request = self._make_request(list(map(int, prompt_ids)), dict(sampling_params))
        if injected_failure(request.seed, self.fail_rate):
            self.failed_requests += 1
            self._log({"event": "failed", "replica": self.replica_rank, "request_id": str(request_id)})
            raise RuntimeError(
                f"replica {self.replica_rank}: request {request_id} failed ({FAIL_RATE_ENV}={self.fail_rate})"
            )
        self._pending.append(request)
        if self._serving is None or self._serving.done():
            self._serving = asyncio.get_running_loop().create_task(self._serve())
        output = await request.future
        output.extra_fields = {"global_steps": self.global_steps}
        return output

    def _record(self, prompt_ids: list[int], params: dict[str, Any], request_id: str, priority: int) -> None:
        """Append the request to `requests` (and to the request log file, when one is set)."""
        entry = {
            "replica": self.replica_rank,
            "request_id": str(request_id),
            "prompt_ids": [int(t) for t in prompt_ids],
            "global_steps": self.global_steps,
            "version": self._version,
            "sampling_params": {k: params[k] for k in sorted(params)},
            "priority": int(priority),
        }
        self.requests.append(entry)
        self._log(entry)

    def _log(self, entry: dict[str, Any]) -> None:
        """One JSON line in the request log file, when one is set."""
        if self._log_path is not None:
            with open(self._log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps(entry, default=str) + "\n")

    def _make_request(self, prompt_ids: list[int], params: dict[str, Any]) -> SampleRequest:
        cfg = self.config
        if float(params.pop("repetition_penalty", 1.0)) != 1.0:
            raise ValueError("the hf rollout does not implement repetition_penalty != 1.0")
        room = cfg.prompt_length + cfg.response_length - len(prompt_ids)
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:
            max_tokens = min(cfg.response_length, room)
        max_tokens = max(1, min(int(max_tokens), max(room, 1)))
        stop = set() if params.pop("ignore_eos", False) else set(self.eos_ids)
        stop |= set(params.pop("stop_token_ids", None) or [])
        key = tuple(prompt_ids)
        k = self._draws[key]
        self._draws[key] += 1
        seed = request_seed(replica_seed(cfg.seed, self.replica_rank), self.global_steps or 0, prompt_ids, k)
        top_k = params.pop("top_k", -1)
        return SampleRequest(
            prompt_ids=prompt_ids,
            max_tokens=max_tokens,
            temperature=float(params.pop("temperature", 1.0)),
            top_k=int(top_k) if top_k is not None else -1,
            top_p=float(params.pop("top_p", 1.0)),
            want_logprobs=bool(params.pop("logprobs", False)),
            stop_ids=frozenset(stop),
            seed=seed,
            future=asyncio.get_running_loop().create_future(),
        )

    async def _serve(self) -> None:
        """Drain the queue: wait a moment for concurrent requests, then decode them together."""
        while self._pending:
            await asyncio.sleep(self.batch_wait_s)
            limit = max(1, int(self.config.max_num_seqs))
            batch, self._pending = self._pending[:limit], self._pending[limit:]
            try:
                outputs = await asyncio.to_thread(
                    sample_batch, self.model, batch, self.pad_id, self._abort, self.decode_pace_s
                )
            except Exception as exc:  # hand the failure to every waiting caller
                for request in batch:
                    request.future.set_exception(exc)
                continue
            self.requests_served += len(batch)
            self.batches_served += 1
            for request, output in zip(batch, outputs, strict=True):
                self.aborted_requests += output.stop_reason == "aborted"
                request.future.set_result(output)

    def _aborted_output(self, want_logprobs: bool) -> TokenOutput:
        """The answer to a request aborted before its first token."""
        self.aborted_requests += 1
        output = TokenOutput(token_ids=[], log_probs=[] if want_logprobs else None, stop_reason="aborted")
        output.extra_fields = {"global_steps": self.global_steps}
        return output

    # ------------------------------------------------------------------ weights
    def update_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> None:
        """Load the actor's full weights (HF parameter names), then count a new weight version.

        Raises:
            RuntimeError: the weights are asleep (veRL wakes them with ``wake_up(["weights"])`` first).
            ValueError: parameter names that do not match the served model.
        """
        if "weights" in self.asleep:
            raise RuntimeError(f"replica {self.replica_rank} got new weights while its weights are asleep")
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - tied:
            raise ValueError(
                f"weights from the actor do not match the rollout model: missing "
                f"{sorted(set(missing) - tied)}, "
                f"unexpected {sorted(unexpected)}"
            )
        self.global_steps = global_steps
        self._version += 1
        self._draws.clear()
        self._log({"replica": self.replica_rank, "event": "update_weights", "global_steps": global_steps})

    def stats(self) -> dict[str, Any]:
        """Requests and batches served, weight version and global step (for tests and logs)."""
        return {
            "requests": self.requests_served,
            "batches": self.batches_served,
            "version": self._version,
            "global_steps": self.global_steps,
            "asleep": sorted(self.asleep),
            "aborted": self.aborted_requests,
            "failed": self.failed_requests,
        }

    # ------------------------------------------------------------------ engine control (no device memory)
    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Restore the parts ``tags`` (default: weights and KV cache)."""
        self.asleep -= set(tags or SLEEP_TAGS)
        self._log({"replica": self.replica_rank, "event": "wake_up", "asleep": sorted(self.asleep)})

    async def sleep(self) -> None:
        """Release weights and KV cache, as vLLM's hybrid sleep does with ``free_cache_engine``."""
        if bool(getattr(self.config, "free_cache_engine", True)):
            self.asleep = set(SLEEP_TAGS)
            self._log({"replica": self.replica_rank, "event": "sleep", "asleep": sorted(self.asleep)})

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> None:
        """Close to new requests and answer every one in the server with its tokens so far
        (``stop_reason="aborted"``); returns once nothing is being decoded."""
        self._open.clear()
        self._reject = bool(reject_request)
        queued, self._pending = self._pending, []
        for request in queued:
            request.future.set_result(self._aborted_output(request.want_logprobs))
        self._abort.set()
        try:
            if self._serving is not None and not self._serving.done():
                await asyncio.shield(self._serving)
        finally:
            self._abort.clear()
        self._log({"replica": self.replica_rank, "event": "abort", "queued": len(queued)})

    async def resume_generation(self) -> None:
        """Open again: parked requests go on (under the weights loaded meanwhile)."""
        self._reject = False
        self._open.set()
        self._log({"replica": self.replica_rank, "event": "resume_generation"})

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None
