"""The hf server keeps vLLM's contract where a GPU run would notice: veRL 0.9.1's exact ``generate``
parameters, sleep and wake-up by tags, and a record of every request."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import verl
from transformers import Qwen2Config, Qwen2ForCausalLM

from coba_verl.cpu.hf_env import REQUEST_LOG_ENV
from coba_verl.cpu.hf_sampling import request_seed, sample_batch
from coba_verl.cpu.hf_server import HFServer

VLLM_SERVER = Path(verl.__file__).parent / "workers/rollout/vllm_rollout/vllm_async_server.py"


def vllm_generate_parameters() -> list[tuple[str, str | None]]:
    """(name, default source) of ``vLLMHttpServer.generate`` read from veRL's source (vLLM itself does
    not install on CPU, so the module cannot be imported)."""
    tree = ast.parse(VLLM_SERVER.read_text())
    server = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "vLLMHttpServer")
    method = next(n for n in server.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "generate")
    args = method.args.args
    defaults = [None] * (len(args) - len(method.args.defaults)) + [
        ast.unparse(d) for d in method.args.defaults
    ]
    assert not method.args.kwarg and not method.args.vararg and not method.args.kwonlyargs
    return [(a.arg, d) for a, d in zip(args, defaults, strict=True)]


def test_generate_takes_exactly_the_parameters_of_veRLs_vllm_server():
    ours = [
        (name, None if p.default is inspect.Parameter.empty else repr(p.default))
        for name, p in inspect.signature(HFServer.generate).parameters.items()
    ]
    assert ours == vllm_generate_parameters()


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg).eval()


def serve(model: torch.nn.Module, replica_rank: int, seed: int = 1) -> HFServer:
    """An awake `HFServer` of replica ``replica_rank`` (``rollout.seed = seed``) around ``model``."""
    config = SimpleNamespace(
        prompt_length=8, response_length=4, max_num_seqs=8, seed=seed, free_cache_engine=True
    )
    server = HFServer.__new__(HFServer)
    server.start(config, model, replica_rank=replica_rank, eos_ids=[2], pad_id=0, batch_wait_s=0.0)
    return server


@pytest.fixture
def server(tmp_path, monkeypatch) -> HFServer:
    monkeypatch.setenv(REQUEST_LOG_ENV, str(tmp_path))
    return serve(tiny_model(), replica_rank=3)


def run(coroutine):
    return asyncio.new_event_loop().run_until_complete(coroutine)


def test_an_argument_vllm_does_not_take_is_refused(server):
    with pytest.raises(TypeError, match="n_samples"):
        run(server.generate([5, 6], {"temperature": 1.0}, "r0", n_samples=4))


def test_requests_while_asleep_are_refused_until_both_parts_wake(server):
    params = {"temperature": 1.0, "max_tokens": 2}
    run(server.sleep())
    with pytest.raises(RuntimeError, match=r"\['kv_cache', 'weights'\] are asleep"):
        run(server.generate([5, 6], params, "r0"))
    run(server.wake_up(tags=["weights"]))
    server.update_weights(server.model.state_dict(), global_steps=4)  # weights awake: allowed
    with pytest.raises(RuntimeError, match=r"\['kv_cache'\] are asleep"):
        run(server.generate([5, 6], params, "r1"))
    run(server.wake_up(tags=["kv_cache"]))
    assert len(run(server.generate([5, 6], params, "r2", priority=3)).token_ids) >= 1


def test_new_weights_while_the_weights_sleep_are_refused(server):
    run(server.sleep())
    with pytest.raises(RuntimeError, match="new weights while its weights are asleep"):
        server.update_weights(server.model.state_dict(), global_steps=1)


def test_every_request_and_engine_event_is_recorded_in_order(server, tmp_path):
    server.update_weights(server.model.state_dict(), global_steps=7)
    run(server.generate([5, 6], {"temperature": 0.5, "max_tokens": 2}, "r9", priority=2))
    run(server.sleep())
    lines = [json.loads(line) for line in (tmp_path / "requests-3.jsonl").read_text().splitlines()]
    assert [line.get("event", "request") for line in lines] == ["update_weights", "request", "sleep"]
    request = lines[1]
    assert request == server.requests[0]
    assert request["replica"] == 3 and request["request_id"] == "r9" and request["prompt_ids"] == [5, 6]
    assert request["global_steps"] == 7 and request["priority"] == 2
    assert request["sampling_params"] == {"max_tokens": 2, "temperature": 0.5}


class Tripwire(torch.nn.Module):
    """The served model, setting ``abort`` on its ``after``-th forward pass (the first is the prompt)."""

    def __init__(self, model, abort, after: int) -> None:
        super().__init__()
        self.model, self.abort, self.after, self.calls = model, abort, after, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.after:
            self.abort.set()
        return self.model(*args, **kwargs)


def test_an_abort_stops_the_decode_and_answers_with_the_tokens_drawn_so_far(server):
    import threading

    abort = threading.Event()
    params = {"temperature": 1.0, "max_tokens": 4, "ignore_eos": True, "logprobs": True}

    async def requests():  # a request holds its caller's future
        return [server._make_request([5, 6], dict(params)) for _ in range(2)]

    first, second = run(requests())
    (full,) = sample_batch(server.model, [first], 0)
    (cut,) = sample_batch(Tripwire(server.model, abort, after=3), [second], 0, abort)
    assert full.stop_reason == "completed" and len(full.token_ids) == 4
    assert cut.stop_reason == "aborted" and len(cut.token_ids) == 2 == len(cut.log_probs)


def test_requests_after_an_abort_wait_for_resume_generation_or_are_rejected(server):
    params = {"temperature": 1.0, "max_tokens": 2}

    async def parked() -> None:
        await server.abort_all_requests()
        task = asyncio.create_task(server.generate([5, 6], params, "p0"))
        await asyncio.sleep(0.05)
        assert not task.done()  # parked, as vLLM parks it, not refused
        await server.resume_generation()
        assert (await task).stop_reason == "completed"

    async def rejected() -> None:
        server.update_weights(server.model.state_dict(), global_steps=3)
        await server.abort_all_requests(reject_request=True)
        output = await server.generate([5, 6], params, "p1")
        assert output.stop_reason == "aborted" and output.token_ids == []
        assert output.extra_fields == {"global_steps": 3}
        await server.resume_generation()
        assert (await server.generate([5, 6], params, "p2")).stop_reason == "completed"

    run(parked())
    run(rejected())
    assert server.stats()["aborted"] == 1


def group_samples(server: HFServer, sessions: int, prompt: list[int]) -> list[list[int]]:
    """The tokens of ``sessions`` concurrent requests for ``prompt`` (sessions of one group)."""
    params = {"temperature": 1.0, "max_tokens": 4, "ignore_eos": True}

    async def group() -> list:
        return await asyncio.gather(*(server.generate(prompt, params, f"s{i}") for i in range(sessions)))

    return [output.token_ids for output in run(group())]


def test_a_group_split_over_two_replicas_gets_distinct_samples():
    """veRL's router sends each session of a group to any replica: replica 1's sessions must not
    repeat replica 0's, as two vLLM engines seeded ``rollout.seed + replica`` would not."""
    model = tiny_model()
    prompt = [5, 6, 7]
    first, second = (group_samples(serve(model, replica_rank=rank), 4, prompt) for rank in (0, 1))
    assert first != second
    assert len({tuple(tokens) for tokens in first + second}) > len({tuple(tokens) for tokens in first})


def test_a_replica_draws_the_same_samples_in_a_rerun_with_the_seed_plus_its_rank():
    """One replica is reproducible: a rerun draws the same samples, and replica r under rollout.seed
    s draws with the seeds of a server seeded s + r (vLLM's engine seed, ``vllm_async_server.py:343``),
    so a one-replica run (r = 0) draws what it drew before the rank entered the seed."""
    model = tiny_model()
    prompt = [5, 6, 7]
    rerun = [group_samples(serve(model, replica_rank=1, seed=4), 4, prompt) for _ in range(2)]
    assert rerun[0] == rerun[1]

    async def drawn(rank: int, seed: int) -> list[list[int]]:  # the seeds alone, one batch each
        server = serve(model, replica_rank=rank, seed=seed)
        params = {"temperature": 1.0, "max_tokens": 4, "ignore_eos": True}
        requests = [server._make_request(prompt, dict(params)) for _ in range(4)]
        return [out.token_ids for out in sample_batch(model, requests, 0)]

    assert run(drawn(1, 4)) == run(drawn(0, 5)) == rerun[0]
    assert run(drawn(0, 4)) != rerun[0]

    async def seeds(rank: int, seed: int) -> list[int]:
        server = serve(model, replica_rank=rank, seed=seed)
        return [server._make_request(prompt, {"max_tokens": 4}).seed for _ in range(4)]

    assert run(seeds(0, 4)) == [request_seed(4, 0, prompt, k) for k in range(4)]  # rollout.seed alone


def test_injected_failures_fail_the_requests_their_seeds_draw_and_a_rerun_fails_the_same(
    tmp_path, monkeypatch
):
    """``COBA_HF_FAIL_RATE``: a request fails with an engine error (what veRL's agent loop turns into
    a failed group) when `injected_failure` draws it from the request's seed; the rate is met over
    many requests, a rerun fails the same ones, and each failure is in the request log."""
    from coba_verl.cpu.hf_env import FAIL_RATE_ENV, injected_failure

    monkeypatch.setenv(FAIL_RATE_ENV, "0.3")
    monkeypatch.setenv(REQUEST_LOG_ENV, str(tmp_path))
    params = {"temperature": 1.0, "max_tokens": 1}

    def outcomes(server: HFServer) -> list[bool]:
        failed = []
        for k in range(40):
            try:
                run(server.generate([5, 6], dict(params), f"r{k}"))
                failed.append(False)
            except RuntimeError as error:
                assert "COBA_HF_FAIL_RATE=0.3" in str(error)
                failed.append(True)
        return failed

    model = tiny_model()
    first = outcomes(serve(model, replica_rank=0))
    expected = [injected_failure(request_seed(1, 0, [5, 6], k), 0.3) for k in range(40)]
    assert first == expected and 4 <= sum(first) <= 20  # 12 expected of 40
    assert outcomes(serve(model, replica_rank=0)) == first
    log = [json.loads(line) for line in (tmp_path / "requests-0.jsonl").read_text().splitlines()]
    assert sum(line.get("event") == "failed" for line in log) == 2 * sum(first)
    many = [injected_failure(request_seed(1, 0, [5], k), 0.3) for k in range(4000)]
    assert abs(np.mean(many) - 0.3) < 0.03


@pytest.mark.parametrize("value", ["1", "-0.1", "often", "nan"])
def test_a_failure_rate_that_is_not_a_probability_is_refused_by_value(value):
    from coba_verl.cpu.hf_env import fail_rate
    from coba_verl.refusal import CobaRefusal

    with pytest.raises(CobaRefusal, match=f"COBA_HF_FAIL_RATE='{value}': the failure rate"):
        fail_rate(value)
    assert fail_rate(None) == fail_rate("") == 0.0
