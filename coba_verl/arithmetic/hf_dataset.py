"""The arithmetic task as a HuggingFace dataset and a reward function of completions.

The task, the tokenizer and the model are this package's (the lab's too); this module only changes
the packaging to what TRL's `GRPOTrainer` takes:

    arithmetic Split (prompts, answers, levels, ids)  ->  datasets.Dataset
        {"prompt": "47*8=", "answer": "376", "level": 3, "prompt_id": 17}
    arithmetic.task.verify                            ->  reward function, 1.0 iff the answer is exact

with ``arithmetic.tokenizer.transformers_tokenizer`` as the processing class and
``arithmetic.model.build_model_for`` for the model. Used by ``examples/trl_grpo_coba.py`` and the
tests in ``tests/trl``.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from coba_verl.arithmetic.task import Split, verify

__all__ = ["arithmetic_dataset", "exact_answer_reward"]


def arithmetic_dataset(split: Split, id_column: str = "prompt_id") -> Dataset:
    """A split as a prompt-only dataset: ``prompt``, ``answer``, ``level`` and the stable id column
    ``id_column`` (``prompt_id``, the column `CobaGRPOTrainer` reads by default)."""
    return Dataset.from_dict(
        {
            "prompt": list(split.prompts),
            "answer": list(split.answers),
            "level": split.levels.tolist(),
            id_column: split.ids.tolist(),
        }
    )


def exact_answer_reward(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 iff the completion is exactly the answer (`arithmetic.task.verify`)."""
    return [verify(c, a) for c, a in zip(completions, answer, strict=True)]
