"""Shared fixtures: a tokenizer built from scratch with a chat template, a small training parquet,
and veRL configs composed from ``coba_verl/config/coba_trainer.yaml``.

The parquet has 14 prompts whose ``extra_info.index`` values are neither contiguous nor in row
order; two prompts are longer than ``data.max_prompt_length`` and are dropped by veRL's
``filter_overlong_prompts``, so dataloader rows and ``extra_info.index`` disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

MAX_PROMPT_LENGTH = 24
# (extra_info.index, question); the two "long" questions exceed MAX_PROMPT_LENGTH tokens.
QUESTIONS: list[tuple[int, str]] = [
    (907, "what is 1 plus 1"),
    (14, "what is 2 plus 3"),
    (233, "what is 4 plus 4"),
    (5, " ".join(["long"] * 40)),
    (61, "what is 7 minus 2"),
    (388, "what is 3 times 3"),
    (72, "what is 9 minus 4"),
    (150, "what is 6 plus 1"),
    (41, " ".join(["long"] * 30)),
    (3, "what is 8 minus 8"),
    (519, "what is 2 times 5"),
    (97, "what is 5 plus 5"),
    (826, "what is 1 times 7"),
    (12, "what is 6 minus 3"),
]
KEPT_INDICES: list[int] = [i for i, q in QUESTIONS if not q.startswith("long")]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A word-level tokenizer trained on the fixture's words, with pad/eos tokens and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<pad>", "<eos>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    corpus = [q for _, q in QUESTIONS] + ["yes no the answer is"] + [str(d) for d in range(10)]
    backend = Tokenizer(models.WordLevel(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=specials))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="session")
def train_parquet(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    rows = [
        {
            "data_source": "toy_math",
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "0"},
            "extra_info": {"index": index, "split": "train"},
        }
        for index, question in QUESTIONS
    ]
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def config_dir() -> str:
    return str(resources.files("coba_verl") / "config")


def compose_coba(overrides: list[str]) -> DictConfig:
    """``coba_trainer`` composed as ``python -m coba_verl.main <overrides>`` would see it."""
    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return compose(config_name="coba_trainer", overrides=overrides)


#: Overrides that make the composed config pass veRL's validate_config on 1 node x 8 GPUs.
GPU_1X8 = [
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "data.train_batch_size=64",
    "actor_rollout_ref.rollout.n=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
]


@pytest.fixture
def reuse_datasets(monkeypatch):
    """Build each RLHFDataset once per session: trainers made in one test share veRL's dataset objects.

    ``PPOTrainer._init_dataloader`` still runs for every trainer; only the parquet read and the
    length filter (about a second each) are not repeated. Datasets are not mutated by iteration.
    """
    from verl.trainer.ppo.v1 import trainer_base

    real = trainer_base.create_rl_dataset

    def cached(data_paths, data_config, tokenizer, processor, is_train=True, max_samples=-1):
        key = (tuple(data_paths), is_train, max_samples, data_config.max_prompt_length, id(tokenizer))
        if key not in _DATASETS:
            _DATASETS[key] = real(data_paths, data_config, tokenizer, processor, is_train, max_samples)
        return _DATASETS[key]

    monkeypatch.setattr(trainer_base, "create_rl_dataset", cached)


_DATASETS: dict = {}


@pytest.fixture(scope="session")
def coba_compose() -> Callable[[list[str]], DictConfig]:
    return compose_coba


@pytest.fixture(scope="session")
def gpu_1x8() -> list[str]:
    return list(GPU_1X8)


@pytest.fixture(scope="session")
def kept_indices() -> list[int]:
    """extra_info.index of the rows that survive filter_overlong_prompts, in file order."""
    return list(KEPT_INDICES)


@pytest.fixture(scope="session")
def small_config(train_parquet) -> Callable[..., DictConfig]:
    """A factory of composed configs over the fixture parquet (4 prompts x rollout.n = 4 per step)."""

    def make(*overrides: str) -> DictConfig:
        config = compose_coba(
            [
                f"data.train_files=['{train_parquet}']",
                f"data.val_files=['{train_parquet}']",
                f"data.max_prompt_length={MAX_PROMPT_LENGTH}",
                "data.filter_overlong_prompts=true",
                "data.filter_overlong_prompts_workers=1",
                "data.dataloader_num_workers=0",
                "data.train_batch_size=4",
                "data.seed=7",
                "actor_rollout_ref.rollout.n=4",
                "actor_rollout_ref.rollout.name=vllm",  # mandatory (???): a GPU launch names its engine
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "coba.max_rollouts=8",
                *overrides,
            ]
        )
        with open_dict(config):
            config.data.cache_dir = str(Path(train_parquet).parent / "cache")
        return config

    return make


@pytest.fixture(scope="module")
def transfer_queue(coba_compose):
    """A local Ray with 2 CPUs and TransferQueue initialised from veRL's transfer_queue config node
    with one storage unit (docs/verl.md, "TransferQueue in the tests"); one per test module."""
    import ray
    import transfer_queue as tq

    assert not ray.is_initialized(), "another test left Ray running"
    config = coba_compose(["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tq.init(config.transfer_queue)
        yield tq
        tq.close()
    finally:
        ray.shutdown()


@pytest.fixture
def cupy_installed():
    """cupy found and importable (a stand-in), as on a GPU machine with veRL's ``cupy-cu130`` extra:
    veRL's nccl checkpoint engine loads (`tests.verl_plugin.verl_start_code.installed`)."""
    from tests.verl_plugin.verl_start_code import installed

    with installed("cupy"):
        yield
