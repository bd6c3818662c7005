"""The ``hf`` rollout for veRL's V1 trainer: a transformers model behind veRL's LLM router.

veRL's agent loop reaches an inference engine through one call, ``server.generate(request_id,
prompt_ids, sampling_params, ...) -> TokenOutput`` (``verl/workers/rollout/llm_server.py``), made
on a Ray actor that a `RolloutReplica` launched. vLLM and SGLang do not install beside veRL 0.9
on a CPU-only machine, so this module provides the three pieces veRL asks of a rollout engine,
registered under the name ``hf`` (``actor_rollout_ref.rollout.name=hf``, see `registration`):

`HFReplica`        ``RolloutReplica``: launches one `HFServer` actor per replica (hybrid mode:
                   the replica's trainer workers hold the weights, the server holds a copy;
                   standalone mode, ``separate_async``'s rollout pool: veRL's checkpoint-engine
                   worker holds the adapter and `checkpoint_engine` brings the weights).
`HFServer`         the Ray actor veRL's router calls. Concurrent ``generate`` calls are batched
                   into one forward pass per token (KV cache, left padding); sampling honours
                   temperature (0 = greedy), top-k, top-p, ``max_tokens`` and stop tokens.
`HFServerAdapter`  ``BaseRollout`` inside each trainer worker (or checkpoint-engine worker):
                   veRL's checkpoint engine pushes the actor's full weights through
                   ``update_weights`` (a generator, sync or async); the replica's first rank
                   forwards them to its server (every rank consumes the generator, whose FSDP
                   all-gathers are collective).

Sampling is reproducible for a given model: the draws of a request come from a generator
seeded by ``(replica seed, global step of the weights, prompt token ids, k)`` where k counts
identical requests this server took since the last weight update (the global step, unlike a count
of updates, is the same in a run resumed from a checkpoint), so the ``B_i`` sessions of one prompt
get ``B_i`` distinct, repeatable samples whatever order the agent loop sends them in. The replica
seed is vLLM's engine seed, ``rollout.seed + replica rank`` (`replica_seed`): veRL's router sends
each session of a group to any replica, and two replicas counting k from 0 under one seed would
draw the same samples, a zero-variance group where the engine would give a spread. A one-replica
run draws what it drew with ``rollout.seed`` alone.

Log-probs are ``log_softmax(logits / temperature)`` of the sampled token, the quantity veRL's
actor recomputes (its ``compute_log_prob`` divides the logits by the same temperature).

The server keeps vLLM's contract where a GPU run would notice a difference: ``generate`` has the
exact parameters of veRL 0.9.1's ``vLLMHttpServer.generate`` (``vllm_async_server.py:558-569``) and
nothing else; with ``rollout.free_cache_engine`` (veRL's default) ``sleep`` releases weights and KV
cache and ``wake_up(tags)`` restores them, as the worker-side adapter asks (``vllm_rollout.py:195-207``),
and a ``generate`` or a weight load that arrives while the part it needs is asleep is an error.
Every request is recorded (replica, request id, prompt, weight version, sampling parameters,
priority): `HFServer.requests`, and, with ``COBA_HF_REQUEST_LOG=<dir>`` in the environment, one
JSON line per request in ``<dir>/requests-<replica>.jsonl``, between lines for the ``sleep``,
``wake_up`` and ``update_weights`` events, so that a test can read each replica's timeline.

Decode pacing: with ``COBA_HF_DECODE_PACE_S=<seconds>`` in the environment, each decoded token of
a batch takes at least that long (an abort cuts the wait short), so that answers are still being
written when veRL aborts generation at a weight update: a slow engine on a tiny model, for tests of
partial rollout. Unset or 0: decoding runs at full speed. Sampling does not depend on it.

Injected failures: with ``COBA_HF_FAIL_RATE=<p>`` in the environment, each request fails with
probability p (a `RuntimeError` from ``generate``, as an engine error reaches veRL's agent loop, which
then marks the session's group ``failure``), drawn from the request's own seed (`injected_failure`),
so a rerun fails the same requests. For tests and benches of what a run does with failed sessions.
Unset or 0: no request fails.

Partial rollout (``trainer.v1.trainer_mode=colocate_async``), as vLLM's server does it
(``vllm_async_server.py:690-745, 931-1060``): ``abort_all_requests`` closes the server to new
requests, stops the batch being decoded after its current token and answers every request in it,
and every queued one, with the tokens drawn so far and ``stop_reason="aborted"``; a request that
arrives while it is closed waits for ``resume_generation`` (or, after an abort with
``reject_request=True``, is answered at once with no token). veRL's ``FullyAsyncLLMServerClient``
sends an aborted request again, with its tokens so far appended to the prompt, once the server
resumes under the new weights.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
import torch.nn.functional as F
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from coba_verl.decoding import kv_decode
from coba_verl.refusal import CobaRefusal

logger = logging.getLogger(__name__)

#: Environment variable naming a folder where every server appends its requests (JSON lines).
REQUEST_LOG_ENV = "COBA_HF_REQUEST_LOG"
#: Environment variable: the least seconds one decoded token of a batch takes (module docstring).
DECODE_PACE_ENV = "COBA_HF_DECODE_PACE_S"
#: Environment variable: the probability that a request fails (module docstring).
FAIL_RATE_ENV = "COBA_HF_FAIL_RATE"
#: What ``sleep`` releases and ``wake_up`` restores (vLLM's tags).
SLEEP_TAGS = frozenset({"weights", "kv_cache"})


def server_name(replica_rank: int) -> str:
    """Ray actor name of the `HFServer` of replica ``replica_rank``."""
    return f"coba_hf_server_{replica_rank}"


def replica_seed(rollout_seed: int, replica_rank: int) -> int:
    """The seed of replica ``replica_rank``'s server: ``rollout.seed + replica_rank``, as veRL 0.9.1
    seeds each vLLM engine (``vllm_async_server.py:343``, and ``:152, :627`` under full determinism),
    so that the replicas sharing a group draw different samples."""
    return int(rollout_seed) + int(replica_rank)


def request_seed(base_seed: int, step: int, prompt_ids: Iterable[int], k: int) -> int:
    """63-bit seed of the k-th request for ``prompt_ids`` under the weights of global step ``step``,
    on a server whose seed is ``base_seed`` (`replica_seed`)."""
    text = f"{base_seed}|{step}|{k}|{','.join(map(str, prompt_ids))}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def decode_pace(value: str | None) -> float:
    """Seconds per decoded token from ``COBA_HF_DECODE_PACE_S`` (unset or empty: 0).

    Raises:
        CobaRefusal: a value that is not a finite number >= 0, named.
    """
    if value is None or not value.strip():
        return 0.0
    try:
        pace = float(value)
    except ValueError:
        pace = float("nan")
    if not math.isfinite(pace) or pace < 0:
        raise CobaRefusal(f"{DECODE_PACE_ENV}={value!r}: the pace is a number of seconds per token >= 0.")
    return pace


def fail_rate(value: str | None) -> float:
    """The probability of an injected failure from ``COBA_HF_FAIL_RATE`` (unset or empty: 0).

    Raises:
        CobaRefusal: a value that is not a number in [0, 1), named.
    """
    if value is None or not value.strip():
        return 0.0
    try:
        rate = float(value)
    except ValueError:
        rate = float("nan")
    if not 0.0 <= rate < 1.0:
        raise CobaRefusal(f"{FAIL_RATE_ENV}={value!r}: the failure rate is a probability in [0, 1).")
    return rate


def injected_failure(seed: int, rate: float) -> bool:
    """Whether the request of sampling seed ``seed`` (`request_seed`) fails at failure rate ``rate``:
    u < rate, u uniform in [0, 1) from a hash of the seed apart from the one sampling uses."""
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(f"fail|{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < rate


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside each row's top-k and nucleus (top-p) with -inf.

    Args:
        logits: (R, V) float, already divided by the temperature.
        top_k: (R,) int64, <= 0 keeps every token.
        top_p: (R,) float in (0, 1]; 1 keeps every token.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (R, V)
    rank = torch.arange(logits.shape[-1]).expand_as(logits)  # (R, V) 0, 1, 2, ...
    drop = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    probs = sorted_logits.softmax(-1)
    mass_before = probs.cumsum(-1) - probs  # probability of the tokens ranked above
    drop |= mass_before >= top_p[:, None]  # the top token is always kept (mass_before = 0)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    want_logprobs: bool
    stop_ids: frozenset[int]
    seed: int
    future: asyncio.Future = field(repr=False)


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    requests: list[_Request],
    pad_id: int,
    abort: threading.Event | None = None,
    pace_s: float = 0.0,
) -> list[TokenOutput]:
    """Sample every request in one batched decode (left padding, KV cache).

    Row r draws its t-th token by inverse-CDF with ``u[r, t]`` from its own seeded generator, so
    a row's sample does not depend on which other requests share the batch. Once ``abort`` is set,
    decoding stops after the current token: unfinished rows answer with their tokens so far and
    ``stop_reason="aborted"``. ``pace_s`` > 0: each token waits that long before the next one
    (an abort ends the wait).
    """
    r = len(requests)
    width = max(len(q.prompt_ids) for q in requests)
    steps = max(q.max_tokens for q in requests)
    ids = torch.full((r, width), pad_id, dtype=torch.long)  # (R, P) left-padded
    mask = torch.zeros((r, width), dtype=torch.long)
    for i, q in enumerate(requests):
        ids[i, width - len(q.prompt_ids) :] = torch.tensor(q.prompt_ids)
        mask[i, width - len(q.prompt_ids) :] = 1
    u = torch.stack([torch.rand(steps, generator=torch.Generator().manual_seed(q.seed)) for q in requests])
    temperature = torch.tensor([q.temperature for q in requests], dtype=torch.float32)  # (R,)
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    top_k = torch.tensor([q.top_k for q in requests], dtype=torch.long)
    top_p = torch.tensor([q.top_p for q in requests], dtype=torch.float32)
    limit = torch.tensor([q.max_tokens for q in requests])

    decoder = kv_decode(model, ids, mask)
    logits = next(decoder)
    done = torch.zeros(r, dtype=torch.bool)
    tokens: list[list[int]] = [[] for _ in range(r)]
    logprobs: list[list[float]] = [[] for _ in range(r)]
    for t in range(steps):
        if abort is not None and abort.is_set():
            break
        logits = logits / scale  # (R, V)
        logp = F.log_softmax(logits, -1)
        probs = filter_logits(logits, top_k, top_p).softmax(-1)
        cdf = probs.cumsum(-1)
        drawn = torch.searchsorted(cdf, (u[:, t] * cdf[:, -1])[:, None]).squeeze(-1)
        drawn = drawn.clamp(max=logits.shape[-1] - 1)
        nxt = torch.where(greedy, logits.argmax(-1), drawn)  # (R,)
        for i in range(r):
            if done[i]:
                continue
            tok = int(nxt[i])
            tokens[i].append(tok)
            logprobs[i].append(float(logp[i, tok]))
            if tok in requests[i].stop_ids or len(tokens[i]) >= limit[i]:
                done[i] = True
        if bool(done.all()):
            break
        if pace_s > 0:
            if abort is None:
                time.sleep(pace_s)
            else:
                abort.wait(pace_s)
        logits = decoder.send(torch.where(done, torch.full_like(nxt, pad_id), nxt))
    return [
        TokenOutput(
            token_ids=tokens[i],
            log_probs=logprobs[i] if q.want_logprobs else None,
            stop_reason="completed" if done[i] else "aborted",
        )
        for i, q in enumerate(requests)
    ]


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
        self._pending: list[_Request] = []
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

    def _make_request(self, prompt_ids: list[int], params: dict[str, Any]) -> _Request:
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
        return _Request(
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
