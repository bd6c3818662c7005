"""Shared pieces of the TRL tests: the lab's character tokenizer and a very small Qwen2, a four-prompt
training set whose every round covers all prompts (so pass rates exist from the second round on),
a reward whose pass rate differs by prompt, and CPU stand-ins for vLLM behind TRL's own
``VLLMGeneration`` (`install_fake_vllm`).

    prompt_id  prompt   reward
    0          "1+1="   always 1          (p = 1)
    1          "9*9="   always 0          (p = 0)
    2          "2+3="   1 iff the completion has an even number of characters  (p about 1/2)
    3          "7-4="   likewise
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: Where the test install puts TRL, outside the environment veRL's processes import from: veRL
#: 0.9.1's FSDP engine imports TRL's PPO value head whenever TRL is importable, and TRL 1.16 no
#: longer has it (README, "Use with TRL"). Only the TRL tests put it on their path.
TRL_SITE = Path(__file__).resolve().parents[2] / ".trl-site"
if TRL_SITE.is_dir() and str(TRL_SITE) not in sys.path:
    sys.path.insert(0, str(TRL_SITE))

import pytest  # noqa: E402
import torch  # noqa: E402
import trl.generation.vllm_generation as trl_vllm_generation  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from coba_verl.arithmetic.model import ModelSpec, build_model_for  # noqa: E402
from coba_verl.arithmetic.tokenizer import transformers_tokenizer  # noqa: E402

TINY = ModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
PROMPTS = ["1+1=", "9*9=", "2+3=", "7-4="]
G = 4  # num_generations in the tests


def mixed_reward(completions: list[str], prompt_id: list[int], **kwargs: Any) -> list[float]:
    """Prompt 0 always succeeds, prompt 1 never, prompts 2 and 3 on completions of even length."""
    return [
        1.0 if pid == 0 or (pid >= 2 and len(c) % 2 == 0) else 0.0
        for c, pid in zip(completions, prompt_id, strict=True)
    ]


def length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A second, continuous reward function (for multi-reward aggregation)."""
    return [len(c) / 8.0 for c in completions]


def four_prompts() -> Dataset:
    return Dataset.from_dict({"prompt": PROMPTS, "prompt_id": list(range(len(PROMPTS)))})


@pytest.fixture
def toy() -> SimpleNamespace:
    """The module's constants and reward functions, for test modules (they cannot import conftest)."""
    return SimpleNamespace(
        G=G, prompts=PROMPTS, mixed_reward=mixed_reward, length_reward=length_reward, dataset=four_prompts
    )


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    return transformers_tokenizer()


def cpu_grpo_config(output_dir: Path, **overrides: Any) -> GRPOConfig:
    """GRPOConfig for a CPU run over the four prompts: one round of 4 x G rows per step, 3 steps,
    no checkpoints, unless ``overrides`` say otherwise (the two-process scripts use it too)."""
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        seed=0,
        per_device_train_batch_size=len(PROMPTS) * G,
        num_generations=G,
        max_completion_length=8,
        max_steps=3,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


@pytest.fixture
def grpo_config(tmp_path) -> Callable[..., GRPOConfig]:
    """`cpu_grpo_config` in the test's folder."""
    return lambda **overrides: cpu_grpo_config(**{"output_dir": tmp_path / "out", **overrides})


@pytest.fixture
def make_trainer(tokenizer, grpo_config) -> Callable[..., GRPOTrainer]:
    """``make_trainer(cls, config=None, dataset=None, reward_funcs=mixed_reward, **trainer_kwargs)``
    with a freshly initialised tiny model (same weights every call)."""

    def make(
        cls: type[GRPOTrainer],
        config: GRPOConfig | None = None,
        dataset: Dataset | None = None,
        reward_funcs: Any = mixed_reward,
        **kwargs: Any,
    ) -> GRPOTrainer:
        return cls(
            model=build_model_for(tokenizer, TINY, seed=0),
            reward_funcs=reward_funcs,
            args=config if config is not None else grpo_config(),
            train_dataset=four_prompts() if dataset is None else dataset,
            processing_class=tokenizer,
            **kwargs,
        )

    return make


# ---------------------------------------------------------------------------- vLLM on CPU
# vLLM does not install on CPU. TRL's ``VLLMGeneration`` stays TRL's (its server and colocate
# branches of ``generate`` and ``sync_weights`` run unchanged); only ``_init_vllm``, which would
# connect to a server or start an engine, is replaced by one that installs a recording stand-in:
# `FakeVLLMServer` for TRL's ``VLLMClient`` (server mode, main process only, as TRL does) or
# `FakeColocatedLLM` for ``vllm.LLM`` (colocate mode, every process). Both answer with
# `fake_completion`, so every completion names the prompt it was made for, and record every call
# with the prompts, the count asked for, how many weight syncs the engine has received and the
# digest of the weights it holds.


def weights_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """A short digest of named tensors (names and exact values), to tell weight versions apart."""
    digest = hashlib.sha256()
    for name, tensor in named:
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def fake_completion(prompt: list[int], j: int, eos: int) -> list[int]:
    """The j-th completion of ``prompt`` in one request: its first character, then ``-`` when j is odd.

    Deterministic and free of history, so two runs that ask the same get the same; of the four
    prompts (four characters after BOS) ``prompt[-4]`` is the first character, so the completion
    names its prompt. Lengths alternate 1, 2, 1, ... (`mixed_reward` scores even lengths of prompts 2, 3).
    """
    return [prompt[-4]] + [5] * (j % 2) + [eos]  # token 5 is "-" in the lab's tokenizer


class _Recorder:
    """What both stand-ins share: the weights received, and a record of every generation call."""

    def __init__(self, eos: int) -> None:
        self.eos = eos
        self.version = 0  # weight syncs received (TRL resets the prefix cache once at the end of each)
        self.weights: str | None = None  # digest of the weights the engine holds
        self.trainer_model: torch.nn.Module | None = None  # set by a test: what the trainer holds
        self.calls: list[dict[str, Any]] = []
        self._received: list[tuple[str, torch.Tensor]] = []

    def _receive(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        self._received.extend((name, tensor.detach().clone()) for name, tensor in named)

    def reset_prefix_cache(self) -> None:
        self.version += 1
        self.weights, self._received = weights_digest(self._received), []

    def _record(self, prompts: list[list[int]], n: int, **params: Any) -> None:
        model = self.trainer_model
        self.calls.append(
            {
                "prompts": [list(p) for p in prompts],
                "n": n,
                "version": self.version,
                "weights": self.weights,
                "trainer_weights": None if model is None else weights_digest(model.named_parameters()),
                "params": {k: v for k, v in params.items() if k != "generation_kwargs"},
            }
        )


class FakeVLLMServer(_Recorder):
    """TRL 1.16's ``VLLMClient`` as ``VLLMGeneration`` uses it in server mode, answered on CPU."""

    def get_server_info(self) -> dict[str, Any]:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def update_named_params(self, metadata: list, named_params: Iterable[tuple[str, torch.Tensor]]) -> None:
        named = list(named_params)
        assert [m[0] for m in metadata] == [name for name, _ in named], "metadata and tensors disagree"
        self._receive(named)

    def generate(self, prompts: list[list[int]], features: Any = None, n: int = 1, **params: Any) -> dict:
        self._record(prompts, n, **params)
        completions = [fake_completion(p, j, self.eos) for p in prompts for j in range(n)]
        return {
            "prompt_ids": [list(p) for p in prompts],  # one per prompt, as the server returns them
            "completion_ids": completions,
            "logprobs": [[[-0.5] for _ in c] for c in completions],
            "logprob_token_ids": [[[t] for t in c] for c in completions],
        }


class FakeColocatedLLM(_Recorder):
    """``vllm.LLM`` as TRL 1.16's ``VLLMGeneration`` uses it in colocate mode: ``generate`` of one
    request per row, ``load_weights`` through the engine's model runner, ``reset_prefix_cache``."""

    def __init__(self, eos: int) -> None:
        super().__init__(eos)
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=self._receive))
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))
        )

    def generate(self, prompts: list[dict], sampling_params: Any, use_tqdm: bool = False) -> list:
        rows = [p["prompt_token_ids"] for p in prompts]
        self._record(rows, sampling_params.n, **{k: v for k, v in vars(sampling_params).items() if k != "n"})
        seen: Counter = Counter()
        outputs = []
        for row in rows:
            completions = []
            for _ in range(sampling_params.n):
                ids = fake_completion(row, seen[tuple(row)], self.eos)
                seen[tuple(row)] += 1
                logprobs = [{t: SimpleNamespace(logprob=-0.5, rank=1)} for t in ids]
                completions.append(SimpleNamespace(token_ids=ids, logprobs=logprobs))
            outputs.append(SimpleNamespace(prompt_token_ids=list(row), outputs=completions))
        return outputs


class FakeSamplingParams:
    """``vllm.SamplingParams``, which TRL's colocate branch builds from keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


def install_fake_vllm(patch: Callable[[Any, str, Any], None], eos: int) -> list[_Recorder]:
    """Make every ``VLLMGeneration`` built from now on talk to a stand-in (module comment above).

    ``patch(obj, name, value)`` sets an attribute (``setattr``, or pytest's monkeypatch). Returns
    the list the stand-ins are appended to as trainers are built, in order.
    """
    made: list[_Recorder] = []

    def init_vllm(generation: Any) -> None:  # replaces VLLMGeneration._init_vllm
        if generation.mode == "server":
            if generation.accelerator.is_main_process:
                generation.vllm_client = FakeVLLMServer(eos)
                made.append(generation.vllm_client)
        elif generation.mode == "colocate":
            if generation.tensor_parallel_size != 1:
                raise NotImplementedError("the CPU stand-in has no tensor-parallel groups")
            generation.llm = FakeColocatedLLM(eos)
            generation._llm_weights_sleeping = False
            made.append(generation.llm)
        else:
            raise ValueError(f"vllm_mode {generation.mode!r}")
        generation.accelerator.wait_for_everyone()

    patch(trl_vllm_generation.VLLMGeneration, "_init_vllm", init_vllm)
    patch(trl_vllm_generation, "SamplingParams", FakeSamplingParams)
    return made


@pytest.fixture
def fake_vllm(monkeypatch, tokenizer) -> list[_Recorder]:
    """`install_fake_vllm` for one test: the stand-ins of the trainers it builds, in order."""
    return install_fake_vllm(lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False),
                             tokenizer.eos_token_id)  # fmt: skip
