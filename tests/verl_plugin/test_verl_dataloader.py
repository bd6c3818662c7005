"""Prompt ids from extra_info.index, veRL's shuffle order, and tracker state through data.pt.

Everything here runs veRL's own RLHFDataset, collate_fn, create_rl_sampler and
``PPOTrainer._init_dataloader`` on the fixture parquet; no Ray is started.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from coba_verl.framework_api import FrameworkMismatch
from coba_verl.records.prompt_ids import PromptIdMap
from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.hooks.dataloader import STATE_KEY, CobaDataLoader, prompt_id_map
from coba_verl.verl_plugin.hooks.trainer import CobaTrainer

pytestmark = pytest.mark.usefixtures("reuse_datasets")


def build_trainer(config, tokenizer, cls=CobaTrainer):
    """A trainer with veRL's dataloaders only (no workers, no Ray)."""
    trainer = cls(config)
    trainer.tokenizer, trainer.processor = tokenizer, None
    trainer._init_dataloader()
    return trainer


def next_batch(trainer):
    """veRL's _fetch_one_gen_batch, minus the uid: the next batch, restarting the loader at an epoch end."""
    try:
        if trainer.train_dataloader_it is None:
            trainer.train_dataloader_it = iter(trainer.train_dataloader)
        return tu.get_tensordict(next(trainer.train_dataloader_it))
    except StopIteration:
        trainer.train_dataloader_it = iter(trainer.train_dataloader)
        return tu.get_tensordict(next(trainer.train_dataloader_it))


def release_workers(*trainers) -> None:
    """Stop dataloader worker processes now; left to garbage collection of the trainer, each waits
    out torch's 5 s join timeout."""
    for trainer in trainers:
        iterator = trainer.train_dataloader._iterator
        if hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()


def scripted_scores(index: int, budget: int, step: int) -> np.ndarray:
    """Deterministic 0/1 rewards: prompt ``index`` passes with probability (index % 5) / 4."""
    rng = np.random.default_rng(1000 * index + step)
    return (rng.random(budget) < (index % 5) / 4).astype(np.float64)


def run_steps(trainer, steps: range, rollout_n: int = 4) -> list[tuple[list[int], list[int]]]:
    """What CobaTrainer does per step, minus generation: allocate, observe scripted scores, end_step."""
    loader = trainer.train_dataloader
    record = []
    for step in steps:
        batch = next_batch(trainer)
        index = [int(i) for i in list(batch["index"])]
        ids = loader.prompt_ids.ids(index)
        budgets = loader.allocator.allocate(ids, len(index) * rollout_n).budgets
        for prompt_id, idx, b in zip(ids, index, budgets, strict=True):
            loader.allocator.observe(np.full(b, prompt_id), scripted_scores(idx, int(b), step))
        loader.allocator.end_step()
        record.append((index, budgets.tolist()))
    return record


def test_rows_are_keyed_by_extra_info_index_not_row_position(small_config, tiny_tokenizer, kept_indices):
    trainer = build_trainer(small_config(), tiny_tokenizer)
    dataset = trainer.train_dataset
    assert len(dataset) == len(kept_indices) == 12  # two over-long prompts were filtered out
    assert [dataset[row]["index"] for row in range(len(dataset))] == kept_indices
    id_map = trainer.train_dataloader.prompt_ids
    assert id_map.num_prompts == 12
    ranks = {index: rank for rank, index in enumerate(sorted(kept_indices))}
    batch = next_batch(trainer)  # a real collate_fn batch as a TensorDict
    index = [int(i) for i in list(batch["index"])]
    assert id_map.ids(index).tolist() == [ranks[i] for i in index]
    assert id_map.ids(index).dtype == np.int64


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([3, 5, 3], "rows 0 and 2 both have index 3"),
        ([0, 0, 0], "a missing index reads as 0"),
        ([1, "a"], "mixes types"),
        ([1.5], "is not an integer or a string"),
        ([], "the training set is empty"),
    ],
)
def test_ambiguous_extra_info_index_is_refused(values, message):
    with pytest.raises(ValueError, match=message):
        prompt_id_map([{"index": value} for value in values])  # rows read one by one


def test_string_and_numpy_index_values_map_to_dense_ids():
    id_map = PromptIdMap(["c9f1", "0a2e", "77b0"])
    assert id_map.ids(["77b0", "0a2e", "c9f1"]).tolist() == [1, 0, 2]
    numbers = PromptIdMap([40, 7, 1000])
    assert numbers.ids([np.int64(7), torch.tensor(1000), 40.0]).tolist() == [0, 2, 1]
    with pytest.raises(ValueError, match="extra_info.index=8 is not in the training set"):
        numbers.ids([8])


@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_come_in_verl_order_across_epochs(small_config, tiny_tokenizer, shuffle):
    overrides = [f"data.shuffle={shuffle}"]
    stock = build_trainer(small_config(*overrides), tiny_tokenizer, cls=PPOTrainerSync)
    coba = build_trainer(small_config(*overrides), tiny_tokenizer)
    assert isinstance(coba.train_dataloader, CobaDataLoader)
    assert type(stock.train_dataloader.sampler) is type(coba.train_dataloader.sampler)
    steps = 3 * len(stock.train_dataloader)  # three epochs
    stock_order = [list(next_batch(stock)["index"]) for _ in range(steps)]
    coba_order = [list(next_batch(coba)["index"]) for _ in range(steps)]
    assert coba_order == stock_order
    if shuffle:
        assert stock_order[:3] != stock_order[3:6], "epochs should be reshuffled"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_kill_and_resume_reproduces_the_allocations(
    small_config, tiny_tokenizer, tmp_path, num_workers, caplog
):
    """Steps 1-3 are epoch 1 (12 prompts / 4), so step 4 onwards allocates from history. With
    dataloader workers, torchdata prefetches indices ahead of training: the tracker saved must be
    the one of the checkpointed step, not of the prefetch."""
    config = (f"data.dataloader_num_workers={num_workers}",)
    reference = build_trainer(small_config(*config), tiny_tokenizer)
    uninterrupted = run_steps(reference, range(1, 7))

    first = build_trainer(small_config(*config), tiny_tokenizer)
    assert run_steps(first, range(1, 5)) == uninterrupted[:4]
    torch.save(first.train_dataloader.state_dict(), tmp_path / "data.pt")  # as veRL's _save_checkpoint
    release_workers(first)
    del first

    resumed = build_trainer(small_config(*config), tiny_tokenizer)
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    assert run_steps(resumed, range(5, 7)) == uninterrupted[4:]
    release_workers(reference, resumed)

    # The allocations after step 4 depend on the restored tracker: without it they differ.
    assert all(len(set(budgets)) > 1 for _, budgets in uninterrupted[3:])
    if num_workers:
        return
    state = torch.load(tmp_path / "data.pt", weights_only=False)
    del state[STATE_KEY]
    amnesiac = build_trainer(small_config(*config), tiny_tokenizer)
    with caplog.at_level(logging.WARNING):
        amnesiac.train_dataloader.load_state_dict(state)
    assert "tracker starts empty" in caplog.text
    replay = run_steps(amnesiac, range(5, 7))
    assert [index for index, _ in replay] == [index for index, _ in uninterrupted[4:]]  # same data position
    assert [budgets for _, budgets in replay] != [budgets for _, budgets in uninterrupted[4:]]


def test_resume_on_a_different_training_set_is_refused(small_config, tiny_tokenizer):
    trainer = build_trainer(small_config(), tiny_tokenizer)
    state = trainer.train_dataloader.state_dict()
    state[STATE_KEY]["identity"]["prompt_ids"] = PromptIdMap([1, 2, 3]).fingerprint
    with pytest.raises(ValueError, match="different set of extra_info.index values"):
        trainer.train_dataloader.load_state_dict(state)


def test_an_entry_of_another_coba_verl_version_is_refused_with_how_to_start_fresh(
    small_config, tiny_tokenizer
):
    trainer = build_trainer(small_config(), tiny_tokenizer)
    state = trainer.train_dataloader.state_dict()
    entry = state[STATE_KEY]
    state[STATE_KEY] = {"allocator": entry["allocator"], "prompt_ids": entry["identity"]["prompt_ids"]}
    with pytest.raises(ValueError, match=r"another version of coba-verl\. .*trainer.resume_mode=disable"):
        trainer.train_dataloader.load_state_dict(state)


def test_wrap_carries_every_constructor_argument_or_names_the_one_it_cannot(monkeypatch):
    import inspect

    from torchdata.stateful_dataloader import StatefulDataLoader

    from coba_verl.verl_plugin.hooks import dataloader

    loader = StatefulDataLoader(list(range(8)), batch_size=2, drop_last=True, num_workers=0)
    args = dataloader.loader_arguments(loader)
    expected = set(inspect.signature(StatefulDataLoader.__init__).parameters) - {
        "self",
        *dataloader._NOT_COPIED,
    }
    assert set(args) == expected and args["batch_size"] == 2 and args["drop_last"] is True

    def init_with_a_new_parameter(self, dataset, batch_size=1, *, new_knob=3):  # a future torchdata
        raise AssertionError("only the signature is read")

    monkeypatch.setattr(StatefulDataLoader, "__init__", init_with_a_new_parameter)
    with pytest.raises(
        FrameworkMismatch, match=r"takes \['new_knob'\] but the StatefulDataLoader does not expose"
    ):
        dataloader.loader_arguments(loader)


@pytest.fixture
def prior_parquet(tmp_path, train_parquet):
    """The fixture parquet with extra_info.pass_rate on every other row (the rest have none)."""
    import pandas as pd

    frame = pd.read_parquet(train_parquet)
    frame["extra_info"] = [
        {**info, "pass_rate": (0.25 * (row % 4) if row % 2 == 0 else None)}
        for row, info in enumerate(frame["extra_info"])
    ]
    path = tmp_path / "train_with_priors.parquet"
    frame.to_parquet(path)
    return str(path), {int(info["index"]): info["pass_rate"] for info in frame["extra_info"]}


def test_a_pass_rate_field_seeds_the_first_allocation_and_survives_resume(
    small_config, tiny_tokenizer, prior_parquet, kept_indices, tmp_path
):
    path, rates = prior_parquet
    overrides = (
        f"data.train_files=['{path}']",
        "coba.prior_field=extra_info.pass_rate",
        "coba.prior_weight=4",
    )
    trainer = build_trainer(small_config(*overrides), tiny_tokenizer)
    loader = trainer.train_dataloader
    index = [i for i in rates if i in set(kept_indices)]
    p = loader.allocator.tracker.pass_rates(loader.prompt_ids.ids(index))
    for i, got in zip(index, p, strict=True):
        assert np.isnan(got) if rates[i] is None else got == rates[i], i
    first = run_steps(trainer, range(1, 2))[0]
    assert len(set(first[1])) > 1  # epoch 1 is no longer uniform
    torch.save(loader.state_dict(), tmp_path / "data.pt")
    uninterrupted = run_steps(trainer, range(2, 4))

    resumed = build_trainer(small_config(*overrides), tiny_tokenizer)  # priors applied, then replaced
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    assert run_steps(resumed, range(2, 4)) == uninterrupted

    plain = build_trainer(small_config(f"data.train_files=['{path}']"), tiny_tokenizer)
    assert len(set(run_steps(plain, range(1, 2))[0][1])) == 1  # without coba.prior_field: uniform


def test_a_prior_file_for_another_dataset_is_refused(small_config, tiny_tokenizer, tmp_path):
    path = tmp_path / "priors.jsonl"
    path.write_text('{"index": 100000, "pass_rate": 0.5}\n')
    with pytest.raises(
        CobaRefusal, match=r"none of the 1 prior records of file \S*priors.jsonl .* another dataset"
    ):
        build_trainer(small_config(f"coba.prior_file={path}"), tiny_tokenizer)
