"""The CoBA replay buffers against veRL's: the source digests of the veRL methods they override or
re-implement, veRL's skip annotation on the counted sampling, and an order of ready groups that does
not depend on Python's hash seed. veRL's classes are built directly (no TransferQueue, no Ray)."""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
from verl.utils.skip import SkipManager

from coba_verl.framework_api import FrameworkMismatch
from coba_verl.verl_plugin.hooks.async_replay_buffer import CobaReplayBufferAsync
from coba_verl.verl_plugin.hooks.replay_buffer import CobaReplayBuffer
from coba_verl.verl_plugin.hooks.verl_guards import VERL_BUFFER_SHA256, verl_changes


def build(cls: type, rollouts_per_prompt: int | None = 4, **options) -> CobaReplayBuffer:
    """A CoBA buffer with veRL's defaults, a DAPO filter and a refill function that does nothing."""
    options = {"filter_groups_metric": "reward", **options}
    return cls(
        trainer_mode="sync" if cls is CobaReplayBuffer else "colocate_async",
        trainer_config=OmegaConf.create({}),
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs=OmegaConf.create({}),
        refill_fn=lambda count: None,
        train_batch_size=4,
        gen_batch_size=4,
        on_clear=lambda partition_id, uids, tags: None,
        rollouts_per_prompt=rollouts_per_prompt,
        **options,
    )


def mutant(owner: type, name: str, old: str, new: str):
    """veRL's own ``owner.name`` recompiled from its source with ``old`` replaced by ``new`` (a patch
    release changing one line), in veRL's module namespace."""
    source = textwrap.dedent(inspect.getsource(owner.__dict__[name]))
    assert old in source, f"{old!r} is not in {owner.__name__}.{name}"
    lines = [line for line in source.replace(old, new).splitlines() if not line.startswith("@")]
    namespace: dict = {}
    exec("\n".join(lines), vars(verl_replay_buffer), namespace)  # noqa: S102 - veRL's own code, edited
    return namespace[name]


def test_the_digests_are_those_of_the_installed_verl():
    assert verl_changes(VERL_BUFFER_SHA256) == []


@pytest.mark.parametrize("cls", [CobaReplayBuffer, CobaReplayBufferAsync])
def test_a_changed_clear_groups_refuses_the_buffer_naming_the_method(cls, monkeypatch):
    """Evicted groups reach the tracker only through the ``_clear_groups`` override: a veRL whose method
    changed (here: trajectory keys matched by their last two underscores) refuses at start."""
    changed = mutant(ReplayBuffer, "_clear_groups", 'key.split("_")[0]', 'key.rsplit("_", 2)[0]')
    monkeypatch.setattr(ReplayBuffer, "_clear_groups", changed)
    with pytest.raises(
        FrameworkMismatch, match=r"ReplayBuffer\._clear_groups is not the method coba-verl overrides"
    ):
        build(cls)
    monkeypatch.delattr(ReplayBuffer, "_clear_groups")  # renamed away
    with pytest.raises(FrameworkMismatch, match=r"ReplayBuffer\._clear_groups"):
        build(cls, rollouts_per_prompt=None)


@pytest.mark.parametrize(
    ("cls", "owner", "name", "old", "new"),
    [
        (CobaReplayBuffer, ReplayBuffer, "sample", "2 * dapo_count", "3 * dapo_count"),
        (CobaReplayBufferAsync, ReplayBufferAsync, "wait_for_sampleable", "len(evicted_uids)", "1"),
        (
            CobaReplayBufferAsync,
            ReplayBufferAsync,
            "_terminal_eviction_reasons",
            "set(self.failure_keys",
            "(",
        ),
        (CobaReplayBufferAsync, ReplayBuffer, "_select_prompt_uids", "[:batch_size]", "[-batch_size:]"),
        # helpers the counted samplings call, and the DAPO rule the async one applies to failed groups
        (CobaReplayBuffer, ReplayBuffer, "_materialize_batch", 'split("_")[0]', 'rsplit("_", 2)[0]'),
        (CobaReplayBuffer, ReplayBuffer, "_sampleable_terminal_keys", "| failed_uids)", ")"),
        (CobaReplayBufferAsync, ReplayBuffer, "_evict_terminal_groups", "if failed_uids:", "if False:"),
        (CobaReplayBufferAsync, ReplayBuffer, "_dapo_filtered_keys", "len(values) > 1", "len(values) > 2"),
    ],
    ids=[
        "sync-sample",
        "async-wait",
        "async-failed-eviction",
        "oldest-first",
        "batch",
        "sampleable",
        "evict",
        "dapo-rule",
    ],
)
def test_a_changed_sampling_method_falls_back_to_verls_sampling_with_a_warning(
    cls, owner, name, old, new, monkeypatch, caplog
):
    assert build(cls).counts_rollouts("train")
    monkeypatch.setattr(owner, name, mutant(owner, name, old, new))
    with caplog.at_level(logging.WARNING, logger=CobaReplayBuffer.__module__):
        buffer = build(cls)
    assert not buffer.counts_rollouts("train")  # veRL's own sample, failed-group eviction and order
    assert buffer.verl_changed == (f"{owner.__name__}.{name}",)
    assert f"{owner.__name__}.{name} differ from veRL 0.9.1's" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=CobaReplayBuffer.__module__):
        uniform = build(cls, rollouts_per_prompt=None)  # veRL's sampling anyway: nothing to say
    assert uniform.verl_changed == () and caplog.text == ""


def test_a_changed_module_helper_falls_back_to_verls_sampling(monkeypatch):
    """``_accumulate_eviction_metrics`` is a function of veRL's module, not a method: checked alike."""
    source = inspect.getsource(verl_replay_buffer._accumulate_eviction_metrics)
    namespace: dict = {}
    exec(source.replace("max(acc.get", "min(acc.get"), vars(verl_replay_buffer), namespace)  # noqa: S102
    changed = namespace["_accumulate_eviction_metrics"]
    monkeypatch.setattr(verl_replay_buffer, "_accumulate_eviction_metrics", changed)
    for cls in (CobaReplayBuffer, CobaReplayBufferAsync):
        buffer = build(cls)
        assert buffer.verl_changed == ("_accumulate_eviction_metrics",)
        assert not buffer.counts_rollouts("train")
    monkeypatch.delattr(verl_replay_buffer, "_accumulate_eviction_metrics")  # gone: also a change
    assert build(CobaReplayBuffer).verl_changed == ("_accumulate_eviction_metrics",)


def skip_annotation(method) -> tuple[str, str] | None:
    """(role, phase) of veRL's ``SkipManager.annotate_tq`` wrapper around ``method``, or None."""
    if not hasattr(method, "__wrapped__"):
        return None
    found = inspect.getclosurevars(method).nonlocals
    return (found["role"], found["phase"]) if found.get("cls") is SkipManager else None


def test_the_counted_sampling_keeps_verls_skip_annotation_where_verl_puts_it():
    assert skip_annotation(ReplayBuffer.sample) == ("rollout_tq", "sample")
    assert skip_annotation(ReplayBufferAsync.sample) == ("rollout_tq", "sample")
    for cls in (CobaReplayBuffer, CobaReplayBufferAsync):
        assert skip_annotation(cls._sample_rollouts) == ("rollout_tq", "sample")
        assert skip_annotation(cls.sample) is None  # its uncounted path is veRL's annotated sample


CUT_SCRIPT = """
import json, sys
from coba_verl.verl_plugin.hooks import replay_buffer
from coba_verl.verl_plugin.hooks.async_replay_buffer import CobaReplayBufferAsync
from coba_verl.verl_plugin.hooks.replay_buffer import CobaReplayBuffer

sizes = json.loads(sys.argv[1])
uids = [f"g{i:02d}" for i in range(len(sizes))]
cleared = []
replay_buffer.tq.kv_clear = lambda partition_id, keys: cleared.append(sorted(keys))
out = {}
for cls in (CobaReplayBuffer, CobaReplayBufferAsync):
    buffer = cls.__new__(cls)
    buffer.prompt_global_steps = {"train": {uid: 3 for uid in uids}}  # one step: all tied
    buffer.partitions = {"train": {f"{u}_{s}_0": {} for u, b in zip(uids, sizes) for s in range(b)}}
    buffer.min_group_size, buffer.on_trim, buffer.cut_seed, buffer.cuts_made = 2, None, 0, 0
    buffer._sessions_to_keep = lambda partition_id, sessions, keep, seed: set(sorted(sessions)[:keep])
    buffer._clear_groups = lambda partition_id, surplus: None
    groups, _ = buffer._ready_sessions("train", set(uids))
    batch, _ = buffer._take("train", set(uids), groups, 16, clear_surplus=cls is CobaReplayBuffer)
    out[cls.__name__] = sorted(batch.keys)
print(json.dumps(out))
"""


def test_which_groups_train_and_which_is_cut_do_not_depend_on_the_hash_seed(tmp_path):
    """Ten groups of one submission step, tied for age: the update takes them in the order
    TransferQueue lists them, so under two hash seeds the same groups train and the same one is cut."""
    sizes = [5, 3, 6, 2, 7, 4, 5, 3, 6, 2]
    script = tmp_path / "cut.py"
    script.write_text(CUT_SCRIPT)
    started = [
        subprocess.Popen(
            [sys.executable, str(script), json.dumps(sizes)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]  # side by side: each imports veRL
    runs = []
    for process in started:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        runs.append(json.loads(out.splitlines()[-1]))
    assert runs[0] == runs[1]
    # listed order: g00 (5), g01 (3), g02 (6) fill 14; the sync rule cuts the next group, g03's 2 whole
    # makes 16; so the sync update trains g00-g03 whole
    sync = {key.rsplit("_", 2)[0] for key in runs[0]["CobaReplayBuffer"]}
    assert sync == {"g00", "g01", "g02", "g03"}


@pytest.mark.parametrize("cls", [CobaReplayBuffer, CobaReplayBufferAsync])
def test_a_cut_is_random_under_dapo_and_by_score_mix_without_unless_set(cls):
    assert build(cls).cut_mode == "random"  # a DAPO filter, coba.cut_sessions=auto
    assert build(cls, filter_groups_metric=None).cut_mode == "spread"
    assert build(cls, cut_sessions="spread").cut_mode == "spread"
    assert build(cls, filter_groups_metric=None, cut_sessions="random").cut_mode == "random"
    with pytest.raises(ValueError, match="cut_sessions='first' is unknown"):
        build(cls, cut_sessions="first")


def test_each_random_cut_draws_with_the_seed_the_groups_step_and_its_own_number(monkeypatch):
    """Two updates, each cutting one group of a step-5 submission: the cuts draw with (data.seed, 5,
    0) and (data.seed, 5, 1), keep what `random_sessions_to_keep` keeps with those seeds, and read no
    score from TransferQueue (a random cut needs none)."""
    from coba_verl.core.trained_budget import random_sessions_to_keep
    from coba_verl.verl_plugin.hooks import replay_buffer

    cleared: list[list[str]] = []
    monkeypatch.setattr(replay_buffer.tq, "kv_clear", lambda partition_id, keys: cleared.append(sorted(keys)))
    monkeypatch.setattr(replay_buffer.tq, "kv_batch_get", lambda **kwargs: pytest.fail("read a score"))
    buffer = build(CobaReplayBuffer, cut_seed=11)
    buffer._clear_groups = lambda partition_id, surplus: None
    buffer._materialize_batch = lambda partition_id, uids, snapshot: sorted(snapshot)
    kept = []
    for update in range(2):
        uids = [f"u{update}a", f"u{update}b"]  # 6 + 8 sessions, 10 to train: the 8 is cut to 4
        buffer.prompt_global_steps = {"train": {uid: 5 for uid in uids}}
        sizes = dict(zip(uids, (6, 8), strict=True))
        buffer.partitions = {"train": {f"{u}_{s}_0": {} for u, b in sizes.items() for s in range(b)}}
        groups, _ = buffer._ready_sessions("train", set(uids))
        batch, _ = buffer._take("train", set(uids), groups, 10, clear_surplus=True)
        kept.append({int(key.split("_")[1]) for key in batch if key.startswith(uids[1])})
    assert kept == [random_sessions_to_keep(range(8), 4, (11, 5, k)) for k in range(2)]
    assert buffer.cuts_made == 2 and [len(keys) for keys in cleared] == [4, 4]


@pytest.mark.parametrize("cls", [CobaReplayBuffer, CobaReplayBufferAsync])
def test_like_keeps_verls_arguments_and_replaces_the_poll_interval_when_given(cls):
    verl = build(cls, rollouts_per_prompt=None)
    assert verl.poll_interval == 2.0  # veRL's default, which its trainer never overrides
    kept = cls.like(verl, on_clear=verl.on_clear)
    faster = cls.like(verl, on_clear=verl.on_clear, poll_interval=0.05)
    assert kept.poll_interval == 2.0 and faster.poll_interval == 0.05
    assert (faster.train_batch_size, faster.filter_groups_metric) == (verl.train_batch_size, "reward")
