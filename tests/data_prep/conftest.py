"""Shared fixtures: the shipped source-format files, one prepared output tree, a tiny tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# --local-path arguments that serve every dataset from the shipped fixtures.
LOCAL = {
    ("gsm8k", "train"): FIXTURES / "gsm8k_train.jsonl",
    ("gsm8k", "test"): FIXTURES / "gsm8k_test.jsonl",
    ("math", "train"): FIXTURES / "math_train.jsonl",
    ("math", "test"): FIXTURES / "math_test.jsonl",
    ("math500", "test"): FIXTURES / "math500_test.jsonl",
    ("dapo_math", "train"): FIXTURES / "dapo_math_17k.parquet",
    ("aime2024", "test"): FIXTURES / "aime2024.jsonl",
    ("aime2025", "test"): FIXTURES / "aime2025.jsonl",
    ("amc23", "test"): FIXTURES / "amc23.jsonl",
    ("math500_dapo", "test"): FIXTURES / "math500_test.jsonl",
    ("minerva", "test"): FIXTURES / "minerva.jsonl",
    ("olympiadbench", "test"): FIXTURES / "olympiadbench.parquet",
}


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], object]:
    """Every dataset split prepared once from the fixtures: {(dataset, split): SplitReport}."""
    from coba_verl.data import SOURCES, prepare_split

    root = tmp_path_factory.mktemp("prepared")
    return {
        (name, split): prepare_split(SOURCES[name], split, root / name, local_path=path)
        for (name, split), path in LOCAL.items()
    }


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A word-level tokenizer with a ChatML chat template, built from scratch (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "<|im_start|>": 2, "<|im_end|>": 3, "user": 4, "assistant": 5}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return tok


@pytest.fixture(scope="session")
def local_paths() -> dict[tuple[str, str], Path]:
    return dict(LOCAL)
