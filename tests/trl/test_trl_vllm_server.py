"""TRL's vLLM server mode with per-prompt budgets: TRL's own ``VLLMGeneration`` (its server branch,
with every process's rows gathered on the main one) in front of a recording stand-in for TRL's
``VLLMClient``, inside ``CobaGRPOTrainer.train()``. vLLM does not install on CPU, so the trainer is
built for transformers generation and then switched to server mode, as its ``__init__`` would have
set it up (the client, and ``sync_weights`` counted instead of sent)."""

from __future__ import annotations

from collections import Counter

from trl.generation.vllm_generation import VLLMGeneration

from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer
from coba_verl.trl.server_client import GroupSizeClient, runs_of


class RecordingServer:
    """TRL's ``VLLMClient.generate`` answered on CPU: n completions per prompt, every call recorded with
    the weight version the server held."""

    def __init__(self, eos: int) -> None:
        self.eos, self.version = eos, 0
        self.calls: list[dict] = []

    def generate(self, prompts, features=None, n=1, **params):
        self.calls.append({"prompts": [list(p) for p in prompts], "n": n, "version": self.version})
        completions = [[5 + k % 3, self.eos] for _ in prompts for k in range(n)]
        return {
            "prompt_ids": [list(p) for p in prompts for _ in range(n)],
            "completion_ids": completions,
            "logprobs": [[[-0.5] for _ in c] for c in completions],
            "logprob_token_ids": [[[t] for t in c] for c in completions],
        }


def serve(trainer: CobaGRPOTrainer, server: RecordingServer) -> None:
    """Switch a transformers-generation trainer to TRL's server mode in front of ``server``."""
    generation = object.__new__(VLLMGeneration)
    args = trainer.args
    generation.__dict__.update(
        mode="server", accelerator=trainer.accelerator, vllm_client=server, enable_sleep_mode=False,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
        repetition_penalty=args.repetition_penalty, max_completion_length=args.max_completion_length,
        logprobs=0, structured_outputs_regex=None, generation_kwargs={},
    )  # fmt: skip

    def sync_weights() -> None:  # TRL pushes every parameter to the server; here the version counts
        server.version += 1

    generation.sync_weights = sync_weights
    trainer.vllm_generation, trainer.use_vllm, trainer._last_loaded_step = generation, True, -1
    args.vllm_mode = "server"


def test_runs_of_reads_consecutive_rows_of_one_prompt_as_one_group():
    assert runs_of([[1], [1], [2], [2], [2], [1]]) == [(0, 2), (2, 3), (5, 1)]


def test_each_prompt_gets_its_budget_from_the_server_one_call_per_group_size(
    make_trainer, grpo_config, toy, tokenizer
):
    trainer = make_trainer(CobaGRPOTrainer, grpo_config(max_steps=4), coba_config=CobaConfig(max_rollouts=10))
    server = RecordingServer(tokenizer.eos_token_id)
    serve(trainer, server)
    allocations = []
    allocate = trainer.allocator.allocate
    trainer.allocator.allocate = lambda ids, total: (
        allocations.append((ids, allocate(ids, total))) or allocations[-1][1]
    )
    trainer.train()

    assert len(allocations) == 4
    calls_by_version = Counter(call["version"] for call in server.calls)
    assert sorted(calls_by_version) == [1, 2, 3, 4]  # weights synced once a step, before its generation
    for version, (ids, allocation) in enumerate(allocations, start=1):
        calls = [call for call in server.calls if call["version"] == version]
        assert len({call["n"] for call in calls}) == len(calls)  # one call per group size
        served = Counter()  # completions the server made of each distinct prompt this step
        for call in calls:
            for prompt in call["prompts"]:
                served[tuple(prompt)] += call["n"]
        assert len(served) == len(ids) == len(toy.prompts)  # every prompt of the round, once
        assert sorted(served.values()) == sorted(allocation.budgets.tolist())  # each its B_i
    assert any(len(set(a.budgets.tolist())) > 1 for _, a in allocations[1:]), "budgets must differ"
    assert isinstance(trainer.vllm_generation.vllm_client, GroupSizeClient)
