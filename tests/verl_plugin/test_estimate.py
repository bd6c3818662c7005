"""``coba-verl estimate`` without Ray: the config it runs veRL with, the reward wrapper that tags
each generation with its prompt's index, and the dump -> prior file conversion.

The whole command through veRL's real trainer on CPU is in tests/cpu_backend/test_verl_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from coba_verl.records.priors import PriorRecords, read_prior_file, write_prior_file
from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin import estimate
from coba_verl.verl_plugin.hooks.progress import CountingLoader, generations_of

REWARD_MODULE = """
def exact(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return float(solution_str == ground_truth) + bonus

async def exact_async(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": float(solution_str == ground_truth), "pred": solution_str}
"""


@pytest.fixture
def reward_file(tmp_path) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD_MODULE)
    estimate.inner_function.cache_clear()
    return path


def request(tmp_path: Path, samples: int = 8) -> estimate.EstimateRequest:
    return estimate.EstimateRequest(tmp_path / "priors.jsonl", samples, tmp_path / "priors.generations")


def test_configure_validates_the_training_set_with_k_samples_at_the_training_sampling(
    tmp_path, train_parquet, coba_compose
):
    config = coba_compose([
        f"data.train_files={train_parquet}", "data.val_files=/elsewhere/test.parquet",
        "data.train_batch_size=4", "actor_rollout_ref.rollout.temperature=0.7",
        "actor_rollout_ref.rollout.top_p=0.9", "actor_rollout_ref.rollout.val_kwargs.temperature=0",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=false", "trainer.use_v1=false",
        "coba.prior_file=/not/yet/written.jsonl",
    ])  # fmt: skip
    estimate.configure(config, request(tmp_path, samples=5))
    assert config.data.val_files == train_parquet
    assert config.data.val_batch_size == 4 and config.data.validation_shuffle is False
    val = config.actor_rollout_ref.rollout.val_kwargs
    assert (val.n, val.do_sample, val.temperature, val.top_p) == (5, True, 0.7, 0.9)
    trainer = config.trainer
    assert (trainer.val_only, trainer.val_before_train, trainer.use_v1) == (True, True, True)
    assert trainer.resume_mode == "disable"
    assert trainer.validation_data_dir == str(tmp_path / "priors.generations")
    assert config.coba.prior_file is None and config.coba.prior_field is None
    reward = config.reward.custom_reward_function
    assert (reward.path, reward.name) == (estimate.INDEX_REWARD_PATH, "compute_score")
    assert reward.reward_kwargs == {"coba_inner_path": None, "coba_inner_name": "compute_score"}


def test_configure_wraps_the_runs_own_reward_with_its_kwargs_and_the_async_wrapper_for_an_async_one(
    tmp_path, train_parquet, reward_file, coba_compose
):
    sync = coba_compose([
        f"data.train_files={train_parquet}", f"reward.custom_reward_function.path={reward_file}",
        "reward.custom_reward_function.name=exact", "+reward.custom_reward_function.reward_kwargs.bonus=0.5",
    ])  # fmt: skip
    estimate.configure(sync, request(tmp_path))
    wrapped = sync.reward.custom_reward_function
    assert wrapped.name == "compute_score"
    inner = {"coba_inner_path": str(reward_file), "coba_inner_name": "exact"}
    assert wrapped.reward_kwargs == {"bonus": 0.5, **inner}
    asynchronous = coba_compose([
        f"data.train_files={train_parquet}", f"reward.custom_reward_function.path={reward_file}",
        "reward.custom_reward_function.name=exact_async",
    ])  # fmt: skip
    estimate.configure(asynchronous, request(tmp_path))
    assert asynchronous.reward.custom_reward_function.name == "compute_score_async"


def test_index_reward_keeps_the_inner_score_and_adds_the_index_as_json_text(reward_file):
    ours = {"coba_inner_path": str(reward_file), "coba_inner_name": "exact", "bonus": 0.5}
    result = estimate.compute_score(
        data_source="x", solution_str="7", ground_truth="7", extra_info={"index": 17}, **ours
    )
    assert result == {"score": 1.5, "acc": 1.5, "coba_index": "17"}  # bonus reached the inner function
    positional = estimate.compute_score("x", "6", "7", {"index": "p-3"}, **ours)
    assert positional == {"score": 0.5, "acc": 0.5, "coba_index": '"p-3"'}
    assert json.loads(positional["coba_index"]) == "p-3"  # reads back with its type
    ours_async = {"coba_inner_path": str(reward_file), "coba_inner_name": "exact_async"}
    result = asyncio.run(
        estimate.compute_score_async(
            data_source="x", solution_str="7", ground_truth="7", extra_info={"index": 4}, **ours_async
        )
    )
    assert result == {"score": 1.0, "pred": "7", "coba_index": "4"}  # a dict result keeps its keys


def test_index_reward_defaults_to_veRLs_reward_and_names_a_missing_index():
    from verl.utils.reward_score import default_compute_score

    assert estimate.inner_function(None, "compute_score") is default_compute_score
    with pytest.raises(ValueError, match="without extra_info.index"):
        estimate.with_index(1.0, {"split": "train"})


def test_veRL_loads_the_index_reward_from_the_path_configure_sets():
    from verl.utils.import_utils import load_extern_object

    for name in ("compute_score", "compute_score_async"):
        loaded = load_extern_object(module_path=estimate.INDEX_REWARD_PATH, object_name=name)
        assert loaded is getattr(estimate, name)


def write_dump(folder: Path, rows: list[tuple[object, float]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"input": "q", "score": score, "coba_index": json.dumps(index), "uid": f"u_{i}_0"})
        for i, (index, score) in enumerate(rows)
    ]
    (folder / "0.jsonl").write_text("\n".join(lines) + "\n")


def test_prior_records_count_successes_by_the_trackers_rule_per_index(tmp_path):
    dump = tmp_path / "generations"
    write_dump(dump, [(907, 1.0), (14, 0.0), (907, 1.0), (14, 1.0), (907, 0.5), (14, 0.0)])
    records = estimate.prior_records(dump, success_value=1.0)
    assert records.index == [907, 14]
    assert records.successes.tolist() == [2, 1] and records.attempts.tolist() == [3, 3]  # 0.5 fails
    strict = estimate.prior_records(dump, success_value=0.5)
    assert strict.successes.tolist() == [1, 0]


def test_prior_records_refuse_a_nan_score_naming_the_dump_and_the_generation(tmp_path):
    dump = tmp_path / "generations"
    write_dump(dump, [(907, 1.0), (14, float("nan")), (907, 0.0)])
    with pytest.raises(ValueError, match=r"generations in .*generations: score at position 1 is nan"):
        estimate.prior_records(dump, success_value=1.0)


def test_read_generations_refuses_a_missing_dump_and_rows_without_the_index(tmp_path):
    with pytest.raises(RuntimeError, match="wrote no generations"):
        estimate.read_generations(tmp_path)
    (tmp_path / "0.jsonl").write_text(json.dumps({"input": "q", "score": 1.0}) + "\n")
    with pytest.raises(RuntimeError, match="line 1 has no coba_index"):
        estimate.read_generations(tmp_path)


def test_summary_warns_with_counts_for_short_prompts_and_training_prompts_without_an_estimate(caplog):
    records = PriorRecords([3, 5], np.array([0, 3]), np.array([4, 3]), "dump")
    with caplog.at_level(logging.WARNING, logger="coba_verl.verl_plugin.estimate"):
        found = estimate.summary(records, samples=4, expected=[3, 5, 9, 11])
    assert found["prompts"] == 2 and found["generations"] == 7
    assert found["all_fail_share"] == 0.5 and found["all_pass_share"] == 0.5
    assert found["short_prompts"] == 1 and found["training_prompts_without_record"] == 2
    assert "1 prompts got fewer than 4 samples" in caplog.text
    assert "2 of 4 training prompts have no estimate" in caplog.text


def test_in_order_sorts_records_by_training_row_order_and_the_file_reads_back(tmp_path):
    records = PriorRecords([14, 907, 5], np.array([1, 2, 0]), np.array([3, 3, 3]), "dump")
    ordered = estimate.in_order(records, [907, 3, 14])
    assert ordered.index == [907, 14, 5] and ordered.successes.tolist() == [2, 1, 0]
    path = write_prior_file(tmp_path / "out" / "priors.jsonl", ordered)
    back = read_prior_file(path, weight=8)
    assert back.index == [907, 14, 5] and back.successes.tolist() == [2, 1, 0]
    assert back.attempts.tolist() == [3, 3, 3]


def test_parse_args_takes_our_flags_and_passes_the_rest_to_hydra(tmp_path):
    out = tmp_path / "p.jsonl"
    argv = ["--output", str(out), "--cpu", "data.train_batch_size=4", "--samples", "2"]
    req, rest = estimate.parse_args(argv)
    assert (req.output, req.samples, req.generations_dir) == (out, 2, tmp_path / "p.generations")
    assert rest == ["+coba_cpu=cpu", "data.train_batch_size=4"]
    with pytest.raises(SystemExit):
        estimate.parse_args(["--output", str(out), "--samples", "0"])


def test_counting_loader_counts_generations_per_batch_as_veRLs_validation_draws_them(caplog):
    batches = [{"raw_prompt": ["a", "b"]}, {"raw_prompt": ["c"]}]
    with caplog.at_level(logging.INFO, logger="coba_verl.verl_plugin.hooks.progress"):
        loader = CountingLoader(batches, prompts=3, samples=4)
    assert "3 prompts x 4 samples = 12 generations in 2 batches" in caplog.text
    assert list(loader) == batches and len(loader) == 2
    assert [generations_of(b, 4) for b in batches] == [8, 4]


def test_a_training_file_that_is_not_parquet_is_refused_before_estimate_reads_it(tmp_path, coba_compose):
    not_parquet = tmp_path / "train.parquet"
    not_parquet.write_text("index,prompt\n0,1+1=\n")
    config = coba_compose([f"data.train_files={not_parquet}"])
    with pytest.raises(CobaRefusal, match=r"data.train_files: .*train.parquet"):
        estimate.run(config, request(tmp_path))
    assert not (tmp_path / "priors.generations").exists()  # refused before anything ran
