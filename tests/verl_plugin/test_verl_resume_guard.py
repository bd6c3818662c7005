"""A resume continues only the run it belongs to: same prompts under the same ids, same model.

`CobaDataLoader`'s data.pt entry fingerprints the prompts (ids and their text) and the model
(what its folder holds: config.json, tokenizer files, weights; not where it lies). veRL's
RLHFDataset and ``_init_dataloader`` run on fixture parquet files; no Ray is started.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pandas as pd
import pytest

from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.hooks.dataloader import STATE_KEY, CobaDataLoader
from coba_verl.verl_plugin.hooks.trainer import CobaTrainer

pytestmark = pytest.mark.usefixtures("reuse_datasets")


def build_trainer(config, tokenizer):
    """A trainer with veRL's dataloaders only (no workers, no Ray)."""
    trainer = CobaTrainer(config)
    trainer.tokenizer, trainer.processor = tokenizer, None
    trainer._init_dataloader()
    return trainer


def run_steps(trainer, steps: range, rollout_n: int = 4) -> None:
    """Allocate and observe scripted 0/1 scores per step, as CobaTrainer does minus generation."""
    loader = trainer.train_dataloader
    batches = iter(loader)
    for step in steps:
        index = [int(i) for i in next(batches)["index"]]
        ids = loader.prompt_ids.ids(index)
        budgets = loader.allocator.allocate(ids, len(index) * rollout_n).budgets
        for prompt_id, b in zip(ids, budgets, strict=True):
            loader.allocator.observe(np.full(b, prompt_id), (np.arange(b) + step + prompt_id) % 2.0)
        loader.allocator.end_step()


@pytest.fixture(scope="module")
def reprepared_parquet(train_parquet, tmp_path_factory) -> str:
    """The fixture parquet with its prompts moved one row on: the same ids, other problems."""
    frame = pd.read_parquet(train_parquet)
    frame["prompt"] = list(frame["prompt"].iloc[1:]) + [frame["prompt"].iloc[0]]
    path = tmp_path_factory.mktemp("reprepared") / "train.parquet"
    frame.to_parquet(path)
    return str(path)


def model_folder(path, hidden_size: int, tokenizer=None, weights_seed: int = 0) -> str:
    """A model folder: config.json, the tokenizer's files (if given) and 256 KiB of seeded weights."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": hidden_size}))
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    weights = np.random.default_rng(weights_seed).integers(0, 256, size=1 << 18, dtype=np.uint8)
    (path / "model.safetensors").write_bytes(weights.tobytes())
    return str(path)


def rewrapped(trainer, model_path: str | None) -> CobaDataLoader:
    """The trainer's loader wrapped as CobaTrainer does, with the run's model path."""
    return CobaDataLoader.wrap(trainer.train_dataloader, trainer.coba_config, model_path=model_path)


def test_resume_on_reprepared_data_with_the_same_indices_is_refused(
    small_config, tiny_tokenizer, reprepared_parquet
):
    # Room for every prompt, so both files keep every row and hence the same ids (and, for
    # reuse_datasets, a key of their own: the other tests' datasets drop the long prompts).
    unfiltered = "data.max_prompt_length=64"
    saved = build_trainer(small_config(unfiltered), tiny_tokenizer).train_dataloader
    state = saved.state_dict()
    other = build_trainer(
        small_config(f"data.train_files=['{reprepared_parquet}']", unfiltered), tiny_tokenizer
    )
    assert other.train_dataloader.prompt_ids.fingerprint == saved.prompt_ids.fingerprint

    with pytest.raises(CobaRefusal, match="belong to other prompts") as refused:
        other.train_dataloader.load_state_dict(state)
    assert "trainer.resume_mode=disable" in str(refused.value)
    build_trainer(small_config(unfiltered), tiny_tokenizer).train_dataloader.load_state_dict(state)


def test_resume_with_another_model_is_refused_naming_both(small_config, tiny_tokenizer, tmp_path):
    trainer = build_trainer(small_config(), tiny_tokenizer)
    model_a = model_folder(tmp_path / "a", hidden_size=32)
    trainer.train_dataloader = rewrapped(trainer, model_a)
    run_steps(trainer, range(1, 2))
    state = trainer.train_dataloader.state_dict()

    rewrapped(trainer, model_a).load_state_dict(state)  # the same model resumes
    model_b = model_folder(tmp_path / "b", hidden_size=32, weights_seed=1)  # same config, other weights
    with pytest.raises(CobaRefusal, match="written for the model") as refused:
        rewrapped(trainer, model_b).load_state_dict(state)
    assert model_a in str(refused.value) and model_b in str(refused.value)
    assert "trainer.resume_mode=disable" in str(refused.value)

    (tmp_path / "a" / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64}))
    with pytest.raises(CobaRefusal, match="config.json, tokenizer files or weights differ"):
        rewrapped(trainer, model_a).load_state_dict(state)


def test_a_model_folder_moved_elsewhere_resumes_and_a_changed_tokenizer_is_refused(
    small_config, tiny_tokenizer, tmp_path
):
    trainer = build_trainer(small_config(), tiny_tokenizer)
    first = model_folder(tmp_path / "disk1" / "model", hidden_size=32, tokenizer=tiny_tokenizer)
    trainer.train_dataloader = rewrapped(trainer, first)
    run_steps(trainer, range(1, 3))
    state = trainer.train_dataloader.state_dict()

    second = str(tmp_path / "disk2" / "qwen")
    shutil.copytree(first, second)
    shutil.rmtree(first)  # moved: the first path is gone
    resumed = rewrapped(build_trainer(small_config(), tiny_tokenizer), second)
    resumed.load_state_dict(state)
    ids = np.arange(trainer.train_dataloader.prompt_ids.num_prompts)
    np.testing.assert_array_equal(
        resumed.allocator.tracker.pass_rates(ids), trainer.train_dataloader.allocator.tracker.pass_rates(ids)
    )

    config = json.loads((tmp_path / "disk2" / "qwen" / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}"
    (tmp_path / "disk2" / "qwen" / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CobaRefusal, match="holds another model"):
        rewrapped(build_trainer(small_config(), tiny_tokenizer), second).load_state_dict(state)


def test_checkpoint_of_a_run_without_fingerprints_resumes_with_a_warning(
    small_config, tiny_tokenizer, caplog
):
    trainer = build_trainer(small_config(), tiny_tokenizer)
    trainer.train_dataloader = rewrapped(trainer, "Qwen/Qwen2.5-7B-Instruct")
    run_steps(trainer, range(1, 4))
    state = trainer.train_dataloader.state_dict()
    for key in ("prompt_content", "model"):
        state[STATE_KEY]["identity"][key] = None  # its run had no dataframe and no model path
    resumed = rewrapped(build_trainer(small_config(), tiny_tokenizer), "Qwen/Qwen2.5-7B-Instruct")
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(state)
    assert "no prompt_content fingerprint" in caplog.text and "no model fingerprint" in caplog.text
    ids = np.arange(trainer.train_dataloader.prompt_ids.num_prompts)
    np.testing.assert_array_equal(
        resumed.allocator.tracker.pass_rates(ids), trainer.train_dataloader.allocator.tracker.pass_rates(ids)
    )
    assert not np.isnan(resumed.allocator.tracker.pass_rates(ids)).all()  # the history came back
