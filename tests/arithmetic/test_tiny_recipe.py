"""The tiny veRL recipe's tokenizer, reward and prepare step: what veRL's Qwen path needs."""

from __future__ import annotations

import pytest

from coba_verl.arithmetic.tiny import compute_score
from coba_verl.arithmetic.tokenizer import BOS, chat_tokenizer, encode_prompts


def test_chat_template_renders_a_prompt_as_the_lab_encodes_it():
    tok = chat_tokenizer()
    ids = tok.apply_chat_template([{"role": "user", "content": "473*58="}], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns an encoding
    lab_ids, _ = encode_prompts(tok.backend_tokenizer, ["473*58="])
    assert list(ids) == lab_ids[0].tolist()
    assert ids[0] == tok.convert_tokens_to_ids(BOS) and len(ids) == 1 + len("473*58=")  # a token a character


def test_tokens_verl_qwen_builder_needs_are_single_tokens():
    tok = chat_tokenizer()
    assert len(tok.encode("\n", add_special_tokens=False)) == 1
    assert "<|im_end|>" in tok.get_vocab()
    answer = tok.encode("376", add_special_tokens=False) + [tok.eos_token_id]
    assert tok.decode(answer, skip_special_tokens=True) == "376"


def test_reward_is_one_iff_the_response_is_the_answer():
    assert compute_score("coba_arithmetic", "376", "376") == 1.0
    assert compute_score("coba_arithmetic", " 376 ", "376") == 1.0
    assert compute_score("coba_arithmetic", "3760", "376") == 0.0


def test_tiny_recipe_data_pass_the_data_check(tmp_path):
    from coba_verl.arithmetic.tiny import write_data
    from coba_verl.data import check_files

    out = write_data(tmp_path, n_train=24, n_test=8)
    assert check_files([out / "train.parquet", out / "test.parquet"], score_gold=True) == []


def test_prepare_reuses_an_output_made_with_the_same_arguments(tmp_path, monkeypatch):
    import coba_verl.arithmetic.warmstart as warmstart
    from coba_verl.arithmetic import tiny

    calls = []

    def fake_warm_start(model, tok, **kwargs):
        calls.append(kwargs)
        return warmstart.WarmStartResult(steps=0, probe_acc=[], losses=[], reached_target=False)

    monkeypatch.setattr(warmstart, "warm_start", fake_warm_start)
    tiny.prepare(tmp_path, n_train=8, n_test=4)
    assert len(calls) == 1 and calls[0]["max_steps"] == tiny.FAST_WARM["warm_max_steps"]
    assert (tmp_path / "model" / "config.json").is_file() and (tmp_path / tiny.MANIFEST).is_file()
    tiny.prepare(tmp_path, n_train=8, n_test=4)
    assert len(calls) == 1  # reused
    (tmp_path / "test.parquet").unlink()  # a manifest whose files are gone is not reused
    tiny.prepare(tmp_path, n_train=8, n_test=4)
    assert len(calls) == 2 and (tmp_path / "test.parquet").is_file()
    tiny.prepare(tmp_path, n_train=8, n_test=4, **tiny.LONG_WARM)
    tiny.prepare(tmp_path, n_train=8, n_test=4, **tiny.LONG_WARM, force=True)
    assert [c["max_steps"] for c in calls[2:]] == [tiny.LONG_WARM["warm_max_steps"]] * 2


def test_prepare_help_offers_the_warm_starts_and_the_priors(capsys):
    from coba_verl.arithmetic.tiny import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--long" in out and "--force" in out and "--easy" in out and "--priors" in out


def test_priors_give_every_training_prompt_k_samples_and_are_reproducible(tmp_path, monkeypatch):
    import coba_verl.arithmetic.warmstart as warmstart
    from coba_verl.arithmetic import tiny
    from coba_verl.records.priors import read_prior_file

    monkeypatch.setattr(
        warmstart,
        "warm_start",
        lambda model, tok, **kwargs: warmstart.WarmStartResult(
            steps=0, probe_acc=[], losses=[], reached_target=False
        ),
    )
    tiny.prepare(tmp_path, n_train=12, n_test=4)
    path = tiny.measure_priors(tmp_path, 3)
    records = read_prior_file(path, weight=8)
    assert path == tmp_path / tiny.PRIORS
    assert sorted(records.index) == list(range(12))  # extra_info.index of every training row
    assert records.attempts.tolist() == [3] * 12
    assert ((0 <= records.successes) & (records.successes <= 3)).all()
    first = path.read_bytes()
    assert tiny.measure_priors(tmp_path, 3).read_bytes() == first
    with pytest.raises(ValueError, match="samples=0"):
        tiny.measure_priors(tmp_path, 0)


def test_easy_and_long_warm_starts_are_exclusive(capsys):
    from coba_verl.arithmetic.tiny import main

    with pytest.raises(SystemExit):
        main(["--easy", "--long"])
    assert "choose one" in capsys.readouterr().err


def test_extra_test_set_is_the_larger_split_and_leaves_the_data_as_it_was(tmp_path):
    """``--extra-test-size N``: the held-out prompts write_data would write with N, beside the data
    (the DAPO bench's test_256.parquet), disjoint from the unchanged training prompts."""
    import pandas as pd

    from coba_verl.arithmetic.tiny import write_data, write_extra_test_set

    levels = ["2+1", "2-1"]
    write_data(tmp_path / "data", n_test=64, levels=levels)
    before = {f: (tmp_path / "data" / f).read_bytes() for f in ("train.parquet", "test.parquet")}
    extra = write_extra_test_set(tmp_path / "data", 256, levels=levels)
    assert extra.name == "test_256.parquet"
    assert before == {f: (tmp_path / "data" / f).read_bytes() for f in before}
    write_data(tmp_path / "big", n_test=256, levels=levels)
    assert pd.read_parquet(extra).equals(pd.read_parquet(tmp_path / "big" / "test.parquet"))
    prompts = {r[0]["content"] for r in pd.read_parquet(extra)["prompt"]}
    train = {r[0]["content"] for r in pd.read_parquet(tmp_path / "data" / "train.parquet")["prompt"]}
    assert len(prompts) == 256 and not prompts & train
