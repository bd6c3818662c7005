"""Every configuration `CobaGRPOTrainer` refuses, with the message it gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import Dataset

from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer


@pytest.mark.parametrize(
    ("config_kwargs", "coba_fields", "message"),
    [
        (  # the core's check_budget, worded for TRL
            {},
            dict(min_rollouts=5, max_rollouts=16),
            r"num_generations=4 is the mean budget per prompt, but no budgets can spend the round "
            r"\(generation_batch_size=16 completions\): total=16 is infeasible for M=4 prompts with low=5, "
            r"up=16: need 20 <= total <= 64\. Set num_generations between coba.min_rollouts=5 and "
            r"coba.max_rollouts=16",
        ),
        ({}, dict(max_rollouts=3), r"up=3: need 8 <= total <= 12\. Set num_generations between"),
        (
            dict(remove_unused_columns=True),
            {},
            r"remove_unused_columns=True drops .* Set remove_unused_columns=False",
        ),
        ({}, dict(budget_unit="tokens"), r"budget_unit='tokens' is not supported in TRL's GRPOTrainer"),
        ({}, dict(skip_spread_below=0.1), r"skip_spread_below=0.1 is not supported in TRL's GRPOTrainer"),
        ({}, dict(size_refills=True), r"CobaConfig.size_refills=True is not supported in TRL's GRPOTrainer"),
    ],
)
def test_refuses_grpo_configs_under_which_budgets_cannot_work(
    make_trainer, grpo_config, config_kwargs, coba_fields, message
):
    coba = CobaConfig(**coba_fields)
    with pytest.raises(ValueError, match=message):
        make_trainer(CobaGRPOTrainer, grpo_config(**config_kwargs), coba_config=coba)


def test_refuses_a_rollout_func(make_trainer):
    with pytest.raises(ValueError, match=r"rollout_func is not supported by CobaGRPOTrainer"):
        make_trainer(CobaGRPOTrainer, rollout_func=lambda prompts, trainer: {})


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        (
            Dataset.from_dict({"prompt": ["1+1=", "2+2="]}),
            r"train_dataset has no column 'prompt_id' \(columns: \['prompt'\]\)\. .*with_indices=True",
        ),
        (  # PromptIdMap's checks, naming the column
            Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3="], "prompt_id": [4, 9, 4]}),
            r"prompt_id must identify each training prompt, but rows 0 and 2 both have index 4 "
            r"\(train_dataset column 'prompt_id'; their pass rates would be merged\)\. Give every row a "
            r"unique id, e\.g\. its row number: dataset\.map\(lambda row, i: \{'prompt_id': i\}, "
            r"with_indices=True\)\.",
        ),
        (
            Dataset.from_dict({"prompt": ["1+1=", "2+2="], "prompt_id": [0.5, 1.5]}),
            r"prompt_id=0\.5 of type float is not an integer or a string",
        ),
        (
            Dataset.from_dict({"prompt": ["1+1=", "2+2="], "prompt_id": [[0], [1]]}),
            r"prompt_id=\[0\] of type list is not an integer or a string",
        ),
        (
            Dataset.from_dict({"prompt": ["1+1=", "2+2="], "prompt_id": [0, 1]}).to_iterable_dataset(),
            r"CobaGRPOTrainer got an IterableDataset: .* needs a map-style datasets.Dataset",
        ),
    ],
    ids=["missing", "repeated", "float", "list", "iterable"],
)
def test_refuses_training_sets_without_unique_prompt_ids(make_trainer, dataset, message):
    with pytest.raises(ValueError, match=message) as refused:
        make_trainer(CobaGRPOTrainer, dataset=dataset)
    assert "extra_info" not in str(refused.value)  # veRL's name for the id is not TRL's


def test_reads_ids_from_the_named_column(make_trainer, toy):
    dataset = toy.dataset().rename_column("prompt_id", "uid").map(lambda row: {"uid": f"q{row['uid']}"})
    trainer = make_trainer(CobaGRPOTrainer, dataset=dataset, prompt_id_column="uid")
    assert trainer.coba_prompt_ids.num_prompts == 4
    assert trainer.coba_prompt_ids.ids(["q0", "q3"]).tolist() == [0, 3]


def test_refuses_a_coba_config_that_is_not_the_dataclass(make_trainer):
    with pytest.raises(TypeError, match=r"coba_config must be a coba_verl.core.CobaConfig, got dict"):
        make_trainer(CobaGRPOTrainer, coba_config={"strategy": "coba"})


def test_refuses_the_async_grpo_trainers_config_by_name(make_trainer):
    """TRL's experimental AsyncGRPOTrainer is not a GRPOTrainer; its config must not pass for one."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    config = AsyncGRPOConfig(output_dir="unused", report_to=[], use_cpu=True, bf16=False)
    with pytest.raises(
        TypeError, match=r"got AsyncGRPOConfig\. TRL's experimental AsyncGRPOTrainer"
    ) as refused:
        make_trainer(CobaGRPOTrainer, config)
    assert "is not a GRPOTrainer (trl/experimental/async_grpo/async_grpo_trainer.py:910)" in str(
        refused.value
    )
    assert "repeats each prompt num_generations times (:886)" in str(refused.value)


#: The TRL 1.16.0 lines the AsyncGRPOConfig refusal cites (its message and docs/trl.md), each with
#: text that must be there.
CITED = [
    ("async_grpo_trainer.py", 910, 910, "class AsyncGRPOTrainer(_BaseTrainer):"),
    ("async_grpo_trainer.py", 351, 371, "dropping stale sample"),
    ("async_grpo_trainer.py", 1060, 1060, "rollout_worker: RolloutWorkerProtocol | None = None"),
    ("async_rollout_worker.py", 536, 536, "async def _generate_loop(self"),
    ("async_rollout_worker.py", 614, 614, "key: [row[key]] * self.num_generations"),
    ("async_rollout_worker.py", 696, 696, "if pending_completed[group_id] == self.num_generations:"),
    (
        "async_rollout_worker.py",
        886,
        887,
        "for _ in range(self.num_generations):\n                yield group_id, row",
    ),
    ("async_rollout_worker.py", 1168, 1168, 'ctx = mp.get_context("spawn")'),
    ("async_rollout_worker.py", 1218, 1218, "self._process = self._mp_ctx.Process("),
    (
        "async_rollout_worker.py",
        1062,
        1065,
        "advantages[scored_mask] = (scored - scored.mean()) / (scored.std() + 1e-8)",
    ),
]


@pytest.mark.parametrize(("path", "first", "last", "text"), CITED, ids=[f"{c[0]}:{c[1]}" for c in CITED])
def test_the_async_refusal_cites_trl_1_16_where_it_does_what_it_says(path, first, last, text):
    import trl
    from trl.experimental import async_grpo

    assert trl.__version__.startswith("1.16.")
    source = Path(async_grpo.__file__).with_name(path).read_text(encoding="utf-8").splitlines()
    assert text in "\n".join(source[first - 1 : last])


def test_api_check_names_a_grpo_trainer_method_whose_parameters_changed(monkeypatch):
    """Checked when coba_verl.trl is imported (`check_trl_api`): an override TRL no longer calls with
    these parameters would silently never run."""
    from trl import GRPOTrainer

    from coba_verl.framework_api import FrameworkMismatch
    from coba_verl.trl.checks import check_trl_api

    check_trl_api(GRPOTrainer)
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, inputs, prompts: None)
    with pytest.raises(
        FrameworkMismatch, match=r"GRPOTrainer._calculate_rewards\(self, inputs, prompts\) differs"
    ):
        check_trl_api(GRPOTrainer)
    monkeypatch.setattr(
        GRPOTrainer, "_calculate_rewards", lambda self, inputs, prompts, completions, ids: None
    )
    with pytest.raises(ImportError, match="pip install 'trl==1.16.0'"):  # still an ImportError
        check_trl_api(GRPOTrainer)
