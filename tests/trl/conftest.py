"""Shared pieces of the TRL tests: the lab's character tokenizer and a very small Qwen2, a four-prompt
training set whose every round covers all prompts (so pass rates exist from the second round on),
and a reward whose pass rate differs by prompt.

    prompt_id  prompt   reward
    0          "1+1="   always 1          (p = 1)
    1          "9*9="   always 0          (p = 0)
    2          "2+3="   1 iff the completion has an even number of characters  (p about 1/2)
    3          "7-4="   likewise
"""

from __future__ import annotations

import sys
from collections.abc import Callable
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


@pytest.fixture
def grpo_config(tmp_path) -> Callable[..., GRPOConfig]:
    """GRPOConfig for a CPU run over the four prompts: one round of 4 x G rows per step."""

    def make(**overrides: Any) -> GRPOConfig:
        kwargs: dict[str, Any] = dict(
            output_dir=str(tmp_path / "out"),
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

    return make


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
