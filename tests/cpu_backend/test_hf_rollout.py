"""The hf rollout's sampler: reproducible per request, independent of batch company, honours params."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from coba_verl.cpu.hf_env import decode_pace
from coba_verl.cpu.hf_sampling import SampleRequest as _Request
from coba_verl.cpu.hf_sampling import filter_logits, request_seed, sample_batch
from coba_verl.refusal import CobaRefusal

EOS, PAD = 2, 0


@pytest.fixture(scope="module")
def model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg).eval()


def request(prompt: list[int], seed: int, **kw) -> _Request:
    loop = asyncio.new_event_loop()
    params = dict(max_tokens=6, temperature=1.0, top_k=-1, top_p=1.0, want_logprobs=True)
    params["stop_ids"] = frozenset({EOS})
    params.update(kw)
    return _Request(prompt_ids=prompt, seed=seed, future=loop.create_future(), **params)


def test_a_request_samples_the_same_tokens_whatever_else_shares_its_batch(model):
    alone = sample_batch(model, [request([5, 6, 7], seed=11)], PAD)[0]
    crowded = sample_batch(
        model, [request([9], seed=3), request([5, 6, 7], seed=11), request([4, 4, 4, 4, 4], seed=8)], PAD
    )[1]
    assert crowded.token_ids == alone.token_ids
    assert crowded.log_probs == pytest.approx(alone.log_probs, abs=1e-5)


def test_log_probs_are_those_of_the_model_at_the_sampling_temperature(model):
    out = sample_batch(model, [request([5, 6, 7], seed=1, temperature=0.7, stop_ids=frozenset())], PAD)[0]
    ids = torch.tensor([[5, 6, 7, *out.token_ids]])
    logits = model(input_ids=ids).logits[0, 2:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    assert out.log_probs == pytest.approx(expected.tolist(), abs=1e-5)


def test_greedy_takes_the_argmax_and_max_tokens_and_stop_ids_end_a_row(model):
    greedy = request([5, 6], seed=0, temperature=0.0, max_tokens=3, stop_ids=frozenset())
    out = sample_batch(model, [greedy], PAD)[0]
    assert len(out.token_ids) == 3
    ids = torch.tensor([[5, 6]])
    for tok in out.token_ids:
        assert tok == int(model(input_ids=ids).logits[0, -1].argmax())
        ids = torch.cat([ids, torch.tensor([[tok]])], 1)
    first = out.token_ids[0]
    stop_at_first = request([5, 6], seed=0, temperature=0.0, stop_ids=frozenset({first}))
    stopped = sample_batch(model, [stop_at_first], PAD)[0]
    assert stopped.token_ids == [first]  # the stop token is returned, as vLLM does


def test_top_k_and_top_p_keep_only_the_allowed_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    out = filter_logits(logits, top_k=torch.tensor([2, -1, -1]), top_p=torch.tensor([1.0, 0.7, 1.0]))
    kept = torch.isfinite(out)
    assert kept.tolist() == [[True, True, False, False], [True, True, False, False], [True] * 4]


def test_repeated_requests_for_one_prompt_get_distinct_seeds():
    seeds = {request_seed(0, 1, [5, 6, 7], k) for k in range(64)}
    assert len(seeds) == 64
    assert request_seed(0, 2, [5, 6, 7], 0) != request_seed(0, 1, [5, 6, 7], 0)  # a new weight version


def test_decode_pacing_keeps_the_samples_and_an_abort_cuts_its_wait_short(model):
    """A paced decode draws the same tokens; an abort during a token's wait answers at once with the
    tokens so far (what veRL's partial rollout resumes from)."""
    free = sample_batch(model, [request([5, 6, 7], seed=4, stop_ids=frozenset())], PAD)[0]
    paced = sample_batch(model, [request([5, 6, 7], seed=4, stop_ids=frozenset())], PAD, pace_s=0.01)[0]
    assert paced.token_ids == free.token_ids and len(free.token_ids) == 6
    abort = threading.Event()
    threading.Timer(0.3, abort.set).start()
    start = time.monotonic()
    cut = sample_batch(model, [request([5, 6, 7], seed=4, stop_ids=frozenset())], PAD, abort, pace_s=60.0)[0]
    assert time.monotonic() - start < 30  # not the 5 x 60 s of paced tokens
    assert cut.stop_reason == "aborted" and cut.token_ids == free.token_ids[:1]


@pytest.mark.parametrize("value", ["-1", "fast", "nan", "inf"])
def test_a_decode_pace_that_is_not_seconds_is_refused_by_value(value):
    with pytest.raises(
        CobaRefusal, match=f"COBA_HF_DECODE_PACE_S='{value}': the pace is a number of seconds"
    ):
        decode_pace(value)


def test_an_unset_decode_pace_decodes_at_full_speed():
    assert decode_pace(None) == decode_pace("") == 0.0 and decode_pace("0.25") == 0.25
