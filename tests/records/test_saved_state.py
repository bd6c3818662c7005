"""The allocator's saved state that the three glues keep: its bytes round trip, and the identity
check that refuses a resume on other prompts or another model before anything is loaded."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.records.saved_state import (
    FORMAT,
    ResumeMismatch,
    RunIdentity,
    decode,
    encode,
    identify,
    model_fingerprint,
    prompt_content_fingerprint,
    restore_state,
    saved_state,
)

IDENTITY = RunIdentity("ids", "content", {"path": "/m", "fingerprint": "model"})


def observed_allocator() -> BudgetAllocator:
    """Two committed steps and a pending one (a checkpoint inside a step keeps it)."""
    allocator = BudgetAllocator(CobaConfig(max_rollouts=12), num_prompts=6)
    for scores in ([1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]):
        allocator.observe([0, 0, 3, 3], scores)
        allocator.tracker.record_lengths(np.array([0, 3]), np.array([17.0, 5.0]))
        allocator.end_step()
    allocator.observe([1, 1], [1.0, 0.0])
    return allocator


def restore(saved, identity=IDENTITY, allocator=None):
    allocator = allocator or BudgetAllocator(CobaConfig(max_rollouts=12), num_prompts=6)
    extra = restore_state(saved, allocator, identity, ids_name="extra_info.index", start_fresh="Start fresh.")
    return allocator, extra


def test_bytes_round_trip_restores_the_allocator_exactly_dtypes_included():
    allocator = observed_allocator()
    extra = {"trl_step": 7, "round": {"ids": np.array([3, 0], np.int64), "alpha": float("nan"), "x": None}}
    record = decode(encode(saved_state(allocator, IDENTITY, extra)))
    restored, back = restore(record)
    assert back["trl_step"] == 7 and back["round"]["x"] is None and np.isnan(back["round"]["alpha"])
    assert back["round"]["ids"].dtype == np.int64
    original, again = allocator.state_dict(), restored.state_dict()
    for key, value in original["tracker"].items():
        if isinstance(value, np.ndarray):
            assert again["tracker"][key].dtype == value.dtype, key
        np.testing.assert_array_equal(again["tracker"][key], value)
    ids = np.arange(6)
    np.testing.assert_array_equal(restored.tracker.pass_rates(ids), allocator.tracker.pass_rates(ids))
    assert restored.end_step() == allocator.end_step()  # the pending step came back too
    np.testing.assert_array_equal(restored.allocate(ids, 24).budgets, allocator.allocate(ids, 24).budgets)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"rest": {1, 2}}, "cannot save set at extra/rest"),
        ({"rest": np.array([{"a": 1}], dtype=object)}, "array of Python objects at extra/rest"),
        ({"a/b": np.zeros(2), "a": {"b": np.ones(2)}}, "the key 'a/b' at extra"),
        ({3: 1.0}, "the key 3 at extra"),
        ({"__array__": "x"}, "the key '__array__' at extra"),
    ],
)
def test_encode_names_a_value_or_key_it_cannot_store_faithfully(extra, message):
    with pytest.raises(TypeError, match=message):
        encode(saved_state(observed_allocator(), IDENTITY, extra))


@pytest.mark.parametrize(
    ("identity", "message"),
    [
        (RunIdentity("other", "content", IDENTITY.model), "different set of extra_info.index values"),
        (RunIdentity("ids", "other", IDENTITY.model), "different prompt text under them"),
        (RunIdentity("ids", "content", {"path": "/n", "fingerprint": "x"}), "model '/m'.*'/n' holds another"),
    ],
)
def test_a_state_of_other_prompts_or_another_model_is_refused_before_anything_loads(identity, message):
    saved = saved_state(observed_allocator(), IDENTITY)
    fresh = BudgetAllocator(CobaConfig(max_rollouts=12), num_prompts=6)
    with pytest.raises(ResumeMismatch, match=message) as refused:
        restore(saved, identity, fresh)
    assert str(refused.value).endswith("Start fresh.")
    assert fresh.tracker.steps == 0


def test_another_format_is_refused():
    saved = saved_state(observed_allocator(), IDENTITY)
    saved["format"] = FORMAT + 1
    with pytest.raises(ResumeMismatch, match=f"not of format {FORMAT} \\(its format: {FORMAT + 1}\\)"):
        restore(saved)


def test_a_fingerprint_either_side_lacks_is_skipped_and_a_missing_saved_one_is_warned(caplog):
    saved = saved_state(observed_allocator(), RunIdentity("ids", None, None))
    with caplog.at_level(logging.WARNING):
        restored, _ = restore(saved)
    assert "no prompt_content fingerprint" in caplog.text and "no model fingerprint" in caplog.text
    assert restored.tracker.steps == 2
    caplog.clear()
    restored, _ = restore(saved_state(observed_allocator(), IDENTITY), RunIdentity("ids", None, None))
    assert restored.tracker.steps == 2 and not caplog.text  # this run cannot say: nothing to compare


def test_prompt_content_follows_what_each_id_asks_not_the_row_order():
    assert prompt_content_fingerprint([1, 0], ["b", "a"]) == prompt_content_fingerprint([0, 1], ["a", "b"])
    assert prompt_content_fingerprint([0, 1], ["a", "b"]) != prompt_content_fingerprint([0, 1], ["b", "a"])
    messages = [[{"role": "user", "content": "1+1="}]]
    assert prompt_content_fingerprint([0], messages) != prompt_content_fingerprint([0], ["1+1="])


def test_model_fingerprint_is_what_the_folder_holds_not_where_it_lies(tmp_path):
    first = tmp_path / "disk1" / "model"
    first.mkdir(parents=True)
    (first / "config.json").write_text('{"hidden_size": 8}')
    (first / "model.safetensors").write_bytes(bytes(range(256)) * 600)
    (first / "README.md").write_text("not part of the model")
    moved = tmp_path / "disk2" / "model"
    shutil.copytree(first, moved)
    (moved / "README.md").write_text("edited")
    a, b = model_fingerprint(str(first)), model_fingerprint(str(moved))
    assert a["fingerprint"] == b["fingerprint"] and a["path"] != b["path"]
    (moved / "config.json").write_text('{"hidden_size": 16}')
    assert model_fingerprint(str(moved))["fingerprint"] != a["fingerprint"]
    hub = model_fingerprint("Qwen/Qwen2.5-0.5B-Instruct")
    assert hub["path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert hub != model_fingerprint("Qwen/Qwen2.5-7B-Instruct")
    assert model_fingerprint(None) is None


def test_identify_fingerprints_what_the_glue_could_read():
    from coba_verl.records.prompt_ids import PromptIdMap

    id_map = PromptIdMap([17, 3])
    full = identify(id_map, id_map.ids([17, 3]), ["b", "a"], "Qwen/Qwen2.5-0.5B-Instruct")
    assert full.prompt_ids == id_map.fingerprint
    assert full.prompt_content == prompt_content_fingerprint([1, 0], ["b", "a"])
    assert full.model == model_fingerprint("Qwen/Qwen2.5-0.5B-Instruct")
    assert identify(id_map) == RunIdentity(id_map.fingerprint, None, None)


@pytest.mark.parametrize(
    "data",
    [
        b"not an npz",
        "a JSON string of an older version",
        b"",
    ],
)
def test_decode_refuses_what_encode_did_not_write(data):
    with pytest.raises(ResumeMismatch, match=f"not of format {FORMAT}"):
        decode(data)


def test_decode_refuses_an_npz_without_the_records_structure():
    import io

    buffer = io.BytesIO()
    np.savez(buffer, meta=np.asarray("{}"), **{"tracker/successes": np.zeros(3)})  # an older side file
    with pytest.raises(ResumeMismatch, match="written by another version of coba-verl"):
        decode(buffer.getvalue())
