"""Prior records from row fields and files, and how they seed the tracker."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from coba_verl.core.tracker import CapabilityTracker
from coba_verl.records.priors import (
    apply_priors,
    combine,
    outcome_records,
    parse_prior_field,
    read_prior_file,
    records_from_rows,
)
from coba_verl.records.prompt_ids import PromptIdMap
from coba_verl.refusal import CobaRefusal

ROWS = [
    {"extra_info": {"pass_rate": 0.375, "pass_count": 3, "attempts": 8}},
    {"extra_info": {"pass_rate": None}},  # no prior
    {"extra_info": {"pass_rate": 1.0, "pass_count": 4, "attempts": 4}},
]
INDEX = [30, 10, 20]


def test_a_pass_rate_field_is_a_record_of_the_stated_weight_and_rows_without_it_have_none():
    records = records_from_rows(ROWS, INDEX, "extra_info.pass_rate", weight=8)
    assert records.index == [30, 20] and records.without_prior == 1
    assert records.successes.tolist() == [3, 8] and records.attempts.tolist() == [8, 8]


def test_two_fields_are_successes_and_attempts():
    records = records_from_rows(ROWS, INDEX, "extra_info.pass_count/extra_info.attempts", weight=8)
    assert records.index == [30, 20]
    assert records.successes.tolist() == [3, 4] and records.attempts.tolist() == [8, 4]


@pytest.mark.parametrize("spec", ["", "a/b/c", "a/"])
def test_a_field_spec_of_neither_form_is_refused(spec):
    with pytest.raises(ValueError, match="must name one field holding a pass rate"):
        parse_prior_field(spec)


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ({"p": 1.5}, "p", r"index 7 is 1\.5; a pass rate lies in \[0, 1\]"),
        ({"p": "0.5"}, "p", "index 7 is '0.5'"),
        ({"s": 5, "a": 4}, "s/a", "index 7 is successes=5, attempts=4"),
        ({"s": 0, "a": 0}, "s/a", "attempts >= 1"),
        ({"s": 1.5, "a": 4}, "s/a", "needs integers"),
    ],
)
def test_a_bad_record_is_refused_naming_its_index(row, field, message):
    with pytest.raises(ValueError, match=message):
        records_from_rows([row], [7], field, weight=8)


def test_a_file_takes_both_forms(tmp_path):
    path = tmp_path / "priors.jsonl"
    path.write_text('{"index": 30, "successes": 1, "attempts": 4}\n\n{"index": 10, "pass_rate": 0.5}\n')
    records = read_prior_file(path, weight=4)
    assert records.index == [30, 10]
    assert records.successes.tolist() == [1, 2] and records.attempts.tolist() == [4, 4]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json\n", "line 1 is not JSON"),
        ('{"successes": 1, "attempts": 2}\n', "line 1 has no index"),
        ('{"index": 1, "successes": 1}\n', "neither successes and attempts nor pass_rate"),
        ('{"index": 1, "pass_rate": -0.1}\n', "pass rate of index 1 is -0.1"),
    ],
)
def test_a_bad_file_is_refused_naming_the_line_or_index(tmp_path, text, message):
    path = tmp_path / "priors.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_prior_file(path, weight=4)


def test_a_missing_file_is_refused_by_name(tmp_path):
    with pytest.raises(CobaRefusal, match="prior_file=.*nope.jsonl. does not exist"):
        read_prior_file(tmp_path / "nope.jsonl", weight=4)


def test_records_seed_the_tracker_by_index_and_the_file_wins_over_the_field(tmp_path):
    path = tmp_path / "priors.jsonl"
    path.write_text('{"index": 20, "successes": 1, "attempts": 2}\n')
    records = combine(records_from_rows(ROWS, INDEX, "extra_info.pass_rate", 8), read_prior_file(path, 8))
    ids = PromptIdMap(INDEX)  # sorted: 10 -> 0, 20 -> 1, 30 -> 2
    tracker = CapabilityTracker(ids.num_prompts, window=3)
    applied = apply_priors(tracker, ids, records)
    p = tracker.pass_rates(ids.ids([10, 20, 30]))
    assert np.isnan(p[0]) and p[1:].tolist() == [0.5, 0.375]
    assert applied["prior_prompts"] == 2 and tracker.f_bar == 1.0 - (0.5 + 0.375) / 2


def test_records_of_other_prompts_are_counted_and_ignored_and_a_file_of_another_dataset_refused(
    tmp_path, caplog
):
    ids = PromptIdMap(INDEX)
    path = tmp_path / "priors.jsonl"
    path.write_text("".join(json.dumps({"index": i, "pass_rate": 0.5}) + "\n" for i in (10, 99, 98)))
    with caplog.at_level(logging.WARNING):
        applied = apply_priors(CapabilityTracker(3), ids, read_prior_file(path, 8))
    assert applied["prior_ignored"] == 2
    assert "2 of 3 prior records have an index that is not in the training set" in caplog.text
    path.write_text('{"index": 99, "pass_rate": 0.5}\n')
    with pytest.raises(ValueError, match="none of the 1 prior records .* another dataset"):
        apply_priors(CapabilityTracker(3), ids, read_prior_file(path, 8))
    path.write_text('{"index": 10, "pass_rate": 0.5}\n{"index": 10, "pass_rate": 0.25}\n')
    with pytest.raises(CobaRefusal, match="index 10 has more than one prior record"):
        read_prior_file(path, 8)  # refused where it is read, before any tracker


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_outcome_records_refuse_a_score_that_is_not_finite_naming_the_source_and_sample(bad):
    # A broken reward (NaN) must stop the measurement, not count as a failure and become a hard prior.
    with pytest.raises(
        ValueError, match=rf"^dump x: score at position 2 is {bad}: rewards must be finite\.$"
    ):
        outcome_records([7, 7, 9], [1.0, 0.0, bad], 1.0, "dump x")


def test_outcome_records_count_successes_per_index_in_first_appearance_order():
    records = outcome_records([9, 7, 9, 7], [1.0, -1.0, 0.5, 1.0], 1.0, "dump x")
    assert records.index == [9, 7]
    assert records.successes.tolist() == [1, 1] and records.attempts.tolist() == [2, 2]
    with pytest.raises(ValueError, match=r"^dump x: 2 prompt indices but 3 scores\.$"):
        outcome_records([9, 7], [1.0, 0.0, 1.0], 1.0, "dump x")
