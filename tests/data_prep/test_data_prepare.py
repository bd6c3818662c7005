"""Preparation from the shipped fixtures: schema, indices, rejections, hub path, veRL round trip."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from verl.utils.reward_score import default_compute_score

from coba_verl.data import SCHEMA, SOURCES, check_files, prepare_split
from coba_verl.data import loading as loading_module
from coba_verl.data.checks import STYLE_OF_SOURCE, train_test_overlap
from coba_verl.data.formats import DAPO_PREFIX, gold_response
from coba_verl.data.loading import hub_unreachable
from coba_verl.data.reward import DAPO_EVAL_SOURCES, compute_score, score_value
from coba_verl.records.prompt_ids import PromptIdMap


def _rows(path: str | Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_every_split_is_written_with_verl_schema_and_dense_indices(prepared) -> None:
    assert set(prepared) == {(name, split) for name, spec in SOURCES.items() for split in spec.splits}
    for (name, split), report in prepared.items():
        table = pq.read_table(report.path)
        assert table.schema.equals(SCHEMA), name
        rows = table.to_pylist()
        assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows))), name
        assert {r["data_source"] for r in rows} == {SOURCES[name].data_source}
        assert all(r["extra_info"]["split"] == split for r in rows)
        assert all(r["reward_model"]["style"] == "rule" and r["reward_model"]["ground_truth"] for r in rows)
        assert all(len(r["prompt"]) == 1 and r["prompt"][0]["role"] == "user" for r in rows)
        assert report.rows_written == len(rows) and report.rows_read == len(rows) + report.rows_rejected


def test_preparing_twice_gives_identical_files(local_paths, tmp_path) -> None:
    spec = SOURCES["gsm8k"]
    first = prepare_split(spec, "train", tmp_path / "a", local_path=local_paths[("gsm8k", "train")])
    second = prepare_split(spec, "train", tmp_path / "b", local_path=local_paths[("gsm8k", "train")])
    assert first.sha256 == second.sha256 and _rows(first.path) == _rows(second.path)


def test_index_offset_shifts_every_index(local_paths, tmp_path) -> None:
    report = prepare_split(
        SOURCES["math"], "train", tmp_path, local_path=local_paths[("math", "train")], index_offset=10_000
    )
    indices = [r["extra_info"]["index"] for r in _rows(report.path)]
    assert indices == list(range(10_000, 10_000 + len(indices)))
    assert (report.index_min, report.index_max) == (indices[0], indices[-1])


def test_rows_without_answer_are_counted_listed_and_not_written(prepared) -> None:
    report = prepared[("gsm8k", "train")]
    assert report.rejected == {"no_answer": 1}
    listed = [
        json.loads(x) for x in Path(report.path).with_name("train.rejected.jsonl").read_text().splitlines()
    ]
    assert [(r["reason"], r["position"]) for r in listed] == [("no_answer", 4)]
    written = [r["extra_info"]["question"] for r in _rows(report.path)]
    assert not any("3 cows" in q for q in written)
    manifest = json.loads(Path(report.path).with_name("manifest.json").read_text())
    assert manifest["splits"]["train"]["rejected"] == {"no_answer": 1}
    assert prepared[("math", "train")].rejected == {"no_answer": 1}  # the solution without \boxed
    assert prepared[("amc23", "test")].rejected == {"no_answer": 1}  # answer null


def test_dapo_release_is_deduplicated_with_conflicts_and_unscorable_answers_reported(prepared) -> None:
    report = prepared[("dapo_math", "train")]
    assert report.rejected == {
        "duplicate": 10,
        "duplicate_conflict": 1,
        "no_answer": 1,
        "unscorable_answer": 1,
    }
    rows = _rows(report.path)
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "9", "7", "720", "15"]
    # The release's uuid is kept for reference; the tracker key is the dense integer index.
    assert rows[0]["extra_info"]["source_id"] == "00000000-0000-4000-8000-000000000000"
    for row in rows:  # the template is stripped and rendered once, not nested
        assert row["prompt"][0]["content"].count(DAPO_PREFIX) == 1
    listed = Path(report.path).with_name("train.rejected.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["reason"] for x in listed) == [
        "duplicate_conflict",
        "no_answer",
        "unscorable_answer",
    ]


def test_dapo_processed_copy_gives_the_same_prompts_as_the_release(prepared, fixtures_dir, tmp_path) -> None:
    processed = prepare_split(
        SOURCES["dapo_math"], "train", tmp_path, local_path=fixtures_dir / "dapo_math_processed.jsonl"
    )
    keep = ("data_source", "prompt", "reward_model")
    release_rows = [{k: r[k] for k in keep} for r in _rows(prepared[("dapo_math", "train")].path)]
    assert [{k: r[k] for k in keep} for r in _rows(processed.path)] == release_rows


def test_eval_answers_are_normalised_and_olympiad_context_prepended(prepared) -> None:
    truths = {
        name: [r["reward_model"]["ground_truth"] for r in _rows(prepared[(name, "test")].path)]
        for name in ("aime2024", "aime2025", "amc23", "olympiadbench", "math500_dapo")
    }
    assert truths["aime2024"] == ["10", "23"]  # "023" -> "23"
    assert truths["aime2025"] == ["51", "16"]
    assert truths["amc23"] == ["27", "2.5"]  # 27.0 -> "27"
    assert truths["olympiadbench"] == ["23", "-2, 2", "5"]
    assert truths["math500_dapo"][2] == "3"  # empty answer column: falls back to the solution's \boxed
    olympiad = _rows(prepared[("olympiadbench", "test")].path)
    assert olympiad[2]["extra_info"]["question"] == "Let $a=2$ and $b=3$.\nFind $a+b$."
    assert olympiad[0]["extra_info"]["solution"] == "Check 21 and 22."  # a list of one string, joined


def test_limit_reads_the_first_rows_and_rejects_non_positive_values(local_paths, tmp_path) -> None:
    path = local_paths[("gsm8k", "train")]
    report = prepare_split(SOURCES["gsm8k"], "train", tmp_path, local_path=path, limit=2)
    assert (report.rows_read, report.rows_written) == (2, 2)
    for limit in (0, -1):
        with pytest.raises(ValueError, match=f"limit={limit} must be >= 1"):
            prepare_split(SOURCES["gsm8k"], "train", tmp_path / "x", local_path=path, limit=limit)


def test_gold_answers_score_one_through_verl(prepared) -> None:
    for (name, _), report in prepared.items():
        spec = SOURCES[name]
        for row in _rows(report.path):
            truth = row["reward_model"]["ground_truth"]
            response = gold_response(truth, spec.style)
            if row["data_source"] in DAPO_EVAL_SOURCES:
                result = compute_score(row["data_source"], response, truth)
            else:
                result = default_compute_score(row["data_source"], response, truth)
            assert score_value(result) == 1.0, (name, truth)


def test_written_files_round_trip_through_verl_rlhf_dataset(prepared, tiny_tokenizer, tmp_path) -> None:
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 4096,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "return_raw_chat": True,
            "truncation": "error",
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    train = prepared[("dapo_math", "train")].path
    dataset = RLHFDataset(train, tiny_tokenizer, config)
    rows = _rows(train)
    assert len(dataset) == len(rows)
    for i, row in enumerate(rows):
        item = dataset[i]
        assert item["index"] == row["extra_info"]["index"] and isinstance(item["index"], int)
        assert list(item["raw_prompt"]) == row["prompt"]
        assert item["data_source"] == "math_dapo"
        assert item["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]

    # veRL concatenates data.val_files: files of different datasets must share one schema.
    val_files = [r.path for (_, split), r in prepared.items() if split == "test"]
    val = RLHFDataset(val_files, tiny_tokenizer, config)
    assert len(val) == sum(r.rows_written for (_, split), r in prepared.items() if split == "test")
    assert {val[i]["data_source"] for i in range(len(val))} >= set(DAPO_EVAL_SOURCES)


def test_hub_path_is_datasets_load_dataset_with_the_spec_ids(monkeypatch, local_paths, tmp_path) -> None:
    calls = []
    fixture = datasets.load_dataset("json", data_files=str(local_paths[("gsm8k", "train")]), split="train")

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return fixture

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(loading_module, "hub_unreachable", lambda: None)
    report = prepare_split(SOURCES["gsm8k"], "train", tmp_path)
    assert calls == [("openai/gsm8k", "main", "train")]
    assert report.origin == "hf://openai/gsm8k (main) split=train" and report.rows_written == 5
    prepare_split(SOURCES["olympiadbench"], "test", tmp_path / "o", hub_id="someone/mirror", hub_config="x")
    assert calls[-1] == ("someone/mirror", "x", "train")


def test_hub_failure_tells_how_to_work_offline(monkeypatch, tmp_path) -> None:
    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(loading_module, "hub_unreachable", lambda: None)
    with pytest.raises(RuntimeError, match="--local-path train=FILE"):
        prepare_split(SOURCES["dapo_math"], "train", tmp_path)


def test_unreachable_hub_is_reported_at_once_without_retries(monkeypatch, tmp_path) -> None:
    def never(*args, **kwargs):
        raise AssertionError("datasets.load_dataset must not be called when the hub is unreachable")

    monkeypatch.setattr(datasets, "load_dataset", never)
    down = "https://hf.example is unreachable (no DNS)"
    monkeypatch.setattr(loading_module, "hub_unreachable", lambda: down)
    with pytest.raises(RuntimeError) as err:
        prepare_split(SOURCES["gsm8k"], "train", tmp_path)
    assert str(err.value) == (
        "Could not load hf://openai/gsm8k (main) split=train for gsm8k: the Hugging Face hub at "
        "https://hf.example is unreachable (no DNS). Download it elsewhere and pass --local-path "
        "train=FILE (parquet/jsonl/json/csv) or a hub snapshot directory; or, if an earlier run "
        "cached it, set HF_HUB_OFFLINE=1 to read the cache."
    )
    with pytest.raises(RuntimeError, match="--local-path dapo_math=FILE"):  # the form a group takes
        prepare_split(SOURCES["dapo_math"], "train", tmp_path, local_key="dapo_math")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (urllib.error.URLError("[Errno -2] Name or service not known"), "is unreachable ([Errno -2]"),
        (TimeoutError("timed out"), "is unreachable (timed out)"),
        (urllib.error.HTTPError("https://hf.example", 503, "busy", None, None), None),  # it answered
        (None, None),
    ],
)
def test_hub_probe_is_one_quick_request_and_any_http_answer_counts(monkeypatch, answer, expected) -> None:
    calls = []

    def urlopen(request, timeout):
        calls.append((request.get_method(), timeout))
        if answer is not None:
            raise answer

    monkeypatch.setattr(loading_module.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(loading_module, "_hub_probes", {})
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    for _ in range(2):
        reason = hub_unreachable()
        assert reason is None if expected is None else expected in reason
    assert calls == [("HEAD", loading_module.HUB_PROBE_TIMEOUT_S)]  # once per process
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # the cache only: no probe
    monkeypatch.setattr(loading_module, "_hub_probes", {})
    assert hub_unreachable() is None and len(calls) == 1


def test_source_without_expected_columns_fails_naming_them(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "2+2?", "label": "4"}) + "\n")
    with pytest.raises(ValueError, match=r"columns are \['label', 'text'\]; pass --question-field"):
        prepare_split(SOURCES["minerva"], "test", tmp_path / "out", local_path=bad)
    report = prepare_split(
        SOURCES["minerva"],
        "test",
        tmp_path / "out",
        local_path=bad,
        question_field="text",
        answer_field="label",
    )
    assert _rows(report.path)[0]["reward_model"]["ground_truth"] == "4"


def test_save_to_disk_folder_is_read_by_split(tmp_path) -> None:
    folder = tmp_path / "snapshot"
    datasets.DatasetDict(
        {"test": datasets.Dataset.from_list([{"question": "What is 6 times 7?", "answer": "42"}])}
    ).save_to_disk(str(folder))
    report = prepare_split(SOURCES["minerva"], "test", tmp_path / "out", local_path=folder)
    assert report.rows_written == 1


def test_check_accepts_a_dataset_train_and_test_split_with_the_same_indices(prepared) -> None:
    train, test = prepared[("gsm8k", "train")].path, prepared[("gsm8k", "test")].path
    assert _rows(train)[0]["extra_info"]["index"] == _rows(test)[0]["extra_info"]["index"] == 0
    assert check_files([train, test]) == []
    evals = [r.path for (_, split), r in prepared.items() if split == "test"]  # each counts from 0
    assert check_files(evals, score_gold=False) == []


def test_overlap_names_test_prompts_that_are_also_in_training(prepared, tmp_path) -> None:
    train, test = prepared[("gsm8k", "train")].path, prepared[("gsm8k", "test")].path
    assert train_test_overlap([train, test]) == []
    rows = _rows(test)
    rows[1]["extra_info"]["question"] = "  " + _rows(train)[3]["extra_info"]["question"].replace(" ", "\n", 1)
    leaked = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), leaked)
    assert train_test_overlap([train, leaked]) == [
        f"{leaked} row 1: the same problem is in training, {Path(train)} row 3"
    ]
    assert check_files([train, leaked]) == []  # an overlap is a note, not a problem


def test_check_reports_a_file_it_cannot_read(tmp_path) -> None:
    bad = tmp_path / "notes.parquet"
    bad.write_text("not parquet")
    problems = check_files([bad, tmp_path / "missing.parquet"])
    assert len(problems) == 2 and all("cannot be read as parquet" in p for p in problems)
    assert train_test_overlap([bad]) == []


def test_check_flags_index_collisions_across_training_files_and_unroutable_sources(
    prepared, tmp_path
) -> None:
    gsm8k, math = prepared[("gsm8k", "train")].path, prepared[("math", "train")].path
    problems = check_files([gsm8k, math])
    assert problems and all("repeats" in p for p in problems)
    assert check_files([gsm8k]) == []

    rows = _rows(gsm8k)
    rows[0]["data_source"] = "my_dataset"
    rows[1]["reward_model"]["ground_truth"] = ""
    bad = tmp_path / "bad.parquet"
    pq.write_table(pq.read_table(gsm8k).from_pylist(rows, schema=SCHEMA), bad)
    problems = check_files([bad])
    assert any("no scorer for data_source='my_dataset'" in p for p in problems)
    assert any("row 1: reward_model.ground_truth is empty" in p for p in problems)

    # A file from another tool with plain-string prompts is reported, not a crash.
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.Table.from_pylist([{**rows[2], "prompt": ["What is 2+2?"]}]), foreign)
    assert check_files([foreign]) == [f"{foreign} row 0: prompt is not a non-empty list of chat messages"]


def _indexed(path: Path, indices: list, split: str = "train") -> Path:
    """A file of arithmetic rows whose ``extra_info.index`` values are ``indices`` (None: no index)."""
    rows = [
        {
            "data_source": "coba_arithmetic",
            "prompt": [{"role": "user", "content": f"{i}+1="}],
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"split": split} if index is None else {"index": index, "split": split},
        }
        for i, index in enumerate(indices)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_check_holds_training_indices_to_the_trainers_rule(tmp_path) -> None:
    """`INDEX_RULE` for the check as for `PromptIdMap`: strings are indices too; a missing,
    fractional or repeated index, or a mix of types across the training files, is a problem."""
    uuids = _indexed(tmp_path / "uuids.parquet", ["c9f1", "0a2e"])
    assert check_files([uuids], score_gold=False) == []
    assert check_files([_indexed(tmp_path / "floats.parquet", [0.0, 1.0])], score_gold=False) == []
    numbers = _indexed(tmp_path / "numbers.parquet", [0, 1])
    after_int = "(str) after 0 (int) of an earlier row; give every row the same type."
    assert check_files([numbers, uuids], score_gold=False) == [
        f"{uuids} row 0: extra_info.index mixes types: 'c9f1' {after_int}",
        f"{uuids} row 1: extra_info.index mixes types: '0a2e' {after_int}",
    ]
    half = _indexed(tmp_path / "half.parquet", [0.5])
    assert check_files([half], score_gold=False) == [
        f"{half} row 0: extra_info.index=0.5 of type float is not an integer or a string."
    ]
    missing = _indexed(tmp_path / "missing.parquet", [None, 3, 3])
    assert check_files([missing], score_gold=False) == [
        f"{missing} row 0: extra_info.index is missing.",
        f"{missing} row 2: extra_info.index=3 repeats {missing} row 1",
    ]
    with pytest.raises(ValueError, match="extra_info.index is missing"):
        PromptIdMap([0, None])  # the trainer applies the same rule


def test_check_of_files_whose_role_is_known_ignores_their_split_field(tmp_path) -> None:
    """The pre-flight knows data.train_files from data.val_files; the rows' split fields do not decide."""
    tests = _indexed(tmp_path / "test.parquet", [0, 0, None], split="test")
    assert check_files([tests], score_gold=False) == []
    assert check_files([tests], score_gold=False, training=False) == []
    assert check_files([tests], score_gold=False, training=True) == [
        f"{tests} row 1: extra_info.index=0 repeats {tests} row 0",
        f"{tests} row 2: extra_info.index is missing.",
    ]


def test_check_reports_a_file_without_rows(tmp_path) -> None:
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMA), empty)
    assert check_files([empty]) == [f"{empty}: has no rows"]


def test_check_takes_the_answer_format_from_the_source_not_from_the_prompt_text(prepared, tmp_path) -> None:
    rows = _rows(prepared[("gsm8k", "train")].path)
    for row in rows:  # a user's own template: the GSM8K instruction (and its "####") is gone
        row["prompt"] = [{"role": "user", "content": row["extra_info"]["question"]}]
    retemplated = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), retemplated)
    assert check_files([retemplated]) == []  # gold responses in GSM8K's format, as its spec says
    assert STYLE_OF_SOURCE == {spec.data_source: spec.style for spec in SOURCES.values()}


def _with_pass_rates(fixtures_dir: Path, tmp_path: Path, rates: list) -> Path:
    """The GSM8K fixture's first rows with a nested pass-rate field ``stats.acc`` (None = absent)."""
    lines = (fixtures_dir / "gsm8k_train.jsonl").read_text().splitlines()[: len(rates)]
    path = tmp_path / "with_rates.jsonl"
    rows = [{**json.loads(line), "stats": {"acc": rate}} for line, rate in zip(lines, rates, strict=True)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_pass_rate_field_is_written_to_extra_info_and_read_as_a_prior(fixtures_dir, tmp_path, caplog) -> None:
    from coba_verl.records.priors import records_from_rows

    source = _with_pass_rates(fixtures_dir, tmp_path, [0.25, None, 1])
    with caplog.at_level("WARNING", logger="coba_verl.data.prepare"):
        report = prepare_split(SOURCES["gsm8k"], "train", tmp_path / "out", local_path=source,
                               pass_rate_field="stats.acc")  # fmt: skip
    rows = _rows(report.path)
    assert [r["extra_info"]["pass_rate"] for r in rows] == [0.25, None, 1.0]
    assert report.with_pass_rate == 2
    assert any("2 of 3 rows carry a pass rate" in r.getMessage() for r in caplog.records)
    records = records_from_rows(rows, [r["extra_info"]["index"] for r in rows], "extra_info.pass_rate", 8)
    assert (records.index, records.successes.tolist(), records.without_prior) == ([0, 2], [2, 8], 1)
    plain = prepare_split(SOURCES["gsm8k"], "train", tmp_path / "plain", local_path=source)
    assert plain.with_pass_rate is None
    assert {r["extra_info"]["pass_rate"] for r in _rows(plain.path)} == {None}  # the schema is fixed


@pytest.mark.parametrize(("rate", "shown"), [(1.5, "1.5"), ("high", "'high'"), (True, "True")])
def test_a_pass_rate_outside_0_1_stops_the_build_naming_the_row(fixtures_dir, tmp_path, rate, shown) -> None:
    source = _with_pass_rates(fixtures_dir, tmp_path, [0.5, rate])
    with pytest.raises(ValueError, match=rf"source row 1 has stats.acc={shown}; a pass rate must be"):
        prepare_split(SOURCES["gsm8k"], "train", tmp_path / "o", local_path=source,
                      pass_rate_field="stats.acc")  # fmt: skip


def test_a_pass_rate_field_the_source_lacks_is_refused_before_any_row(local_paths, tmp_path) -> None:
    with pytest.raises(ValueError, match="--pass-rate-field difficulty is not a column of the source"):
        prepare_split(SOURCES["gsm8k"], "train", tmp_path, local_path=local_paths[("gsm8k", "train")],
                      pass_rate_field="difficulty")  # fmt: skip
