"""The CPU lab's generated arithmetic in TRL's terms: a dataset, a reward function, a tokenizer.

Everything comes from `coba_verl.lab` (task, character tokenizer, tiny Qwen2); this module only
changes the packaging to what `GRPOTrainer` takes:

    lab Split (prompts, answers, levels, ids)  ->  datasets.Dataset
        {"prompt": "47*8=", "answer": "376", "level": 3, "prompt_id": 17}
    lab character Tokenizer                    ->  PreTrainedTokenizerFast that adds <bos>
        "47*8=" -> [<bos>, 4, 7, *, 8, =]      (the lab's ``encode_prompts`` layout)
    lab.task.verify                            ->  reward function, 1.0 iff the answer is exact

Used by ``examples/trl_grpo_coba.py`` and the tests in ``tests/trl``.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from coba_verl.lab.model import ModelSpec, build_model
from coba_verl.lab.task import Split, verify
from coba_verl.lab.tokenizer import BOS, EOS, PAD, build_tokenizer
from coba_verl.trl.checks import DEFAULT_ID_COLUMN

__all__ = ["arithmetic_dataset", "build_hf_tokenizer", "build_tiny_qwen2", "exact_answer_reward"]


def build_hf_tokenizer() -> PreTrainedTokenizerFast:
    """The lab's character tokenizer as a transformers tokenizer that prepends ``<bos>``, left-padded."""
    tok = build_tokenizer()
    tok.post_processor = TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, padding_side="left"
    )


def build_tiny_qwen2(tokenizer: PreTrainedTokenizerFast, spec: ModelSpec, seed: int) -> Qwen2ForCausalLM:
    """The lab's randomly initialised Qwen2 (`coba_verl.lab.model.build_model`) for ``tokenizer``."""
    return build_model(
        spec,
        len(tokenizer),
        pad_id=tokenizer.pad_token_id,
        bos_id=tokenizer.bos_token_id,
        eos_id=tokenizer.eos_token_id,
        seed=seed,
    )


def arithmetic_dataset(split: Split) -> Dataset:
    """A lab split as a TRL prompt-only dataset: ``prompt``, ``answer``, ``level`` and the stable id
    column `DEFAULT_ID_COLUMN` (``prompt_id``)."""
    return Dataset.from_dict(
        {
            "prompt": list(split.prompts),
            "answer": list(split.answers),
            "level": split.levels.tolist(),
            DEFAULT_ID_COLUMN: split.ids.tolist(),  # `CobaGRPOTrainer`'s default id column
        }
    )


def exact_answer_reward(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 iff the completion is exactly the answer (`coba_verl.lab.task.verify`)."""
    return [verify(c, a) for c, a in zip(completions, answer, strict=True)]
