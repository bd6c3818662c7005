"""The CoBA replay buffers poll by poll: each trainer's own buffer (built by veRL's
``_build_replay_buffer`` from the composed config) sampling against a scripted engine that finishes
one prompt group per poll, so that groups come back over several polls and others are still in flight
while the buffer decides. No Ray: TransferQueue's key-value calls are answered by the engine; the
trainer's own ``_next_train_batch`` / ``_submit_batch_to_rollout`` (allocation, C-size, the ledger)
and veRL's buffer code run unchanged. Small config: M = 4 prompts, n = 4, B_low = 2; epoch one has
no history, so every budget is n until C-size trims one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
import transfer_queue

from coba_verl.verl_plugin.hooks.trainer import (
    CobaColocateAsyncTrainer,
    CobaSeparateAsyncTrainer,
    CobaTrainer,
)

M, N = 4, 4
#: A prompt group's sessions, by the group's place in submission order (1 = first) and its budget:
#: each session's score, or None for a session that failed (it writes no trajectory).
Outcome = Callable[[int, int], list[float | None]]

DAPO = ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward")
#: separate_async with a standalone pool of one device, two local updates of M / 2 prompts a step; its
#: weight sync is the CPU backend's checkpoint engine, which loads anywhere (never called here)
SEPARATE = (
    "trainer.v1.separate_async.parameter_sync_step=2", "trainer.v1.separate_async.num_warmup_batches=2",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={M // 2}",
    "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=ray_object_store",
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=coba_verl.cpu.checkpoint_engine",
    "actor_rollout_ref.hybrid_engine=false", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
)  # fmt: skip
#: (trainer, its overrides, prompts one sample trains); the sync buffer counts rollouts under DAPO
MODES = {
    "sync": (CobaTrainer, (*DAPO, "coba.size_refills=false"), M),
    "colocate_async": (CobaColocateAsyncTrainer, ("trainer.v1.trainer_mode=colocate_async",), M),
    "separate_async": (
        CobaSeparateAsyncTrainer, ("trainer.v1.trainer_mode=separate_async", *SEPARATE), M // 2
    ),
}  # fmt: skip


def spread(ordinal: int, budget: int) -> list[float | None]:
    """Every session finishes, alternately passing and failing: a reward spread."""
    return [float(s % 2 == 0) for s in range(budget)]


def all_fail(ordinal: int, budget: int) -> list[float | None]:
    """Every session failed (an engine that is down)."""
    return [None] * budget


class ScriptedEngine:
    """The trainer's agent-loop manager and TransferQueue's key-value store at once. A submitted prompt
    group runs until a poll: each wait of the buffer for its next poll finishes the oldest running group,
    writing one trajectory ``{uid}_{session}_0`` per session ``outcome`` finishes (its score as
    ``rm_scores``) and tagging the prompt ``finished``, or ``failure`` when a session failed."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.tags: dict[str, dict[str, dict]] = defaultdict(dict)  # partition -> key -> tag
        self.scores: dict[str, float] = {}
        self.running: list[tuple[str, int]] = []  # (uid, budget), oldest first
        self.submissions: list[list[int]] = []  # budgets of each submission
        self.finished = 0  # groups finished so far
        self.polls = 0

    # -------------------------------------------------------------- the agent-loop manager
    def generate_sequences(self, prompts) -> None:
        budgets = prompts["__rollout_n__"].tolist()
        self.submissions.append(budgets)
        for uid, budget in zip(map(str, prompts["uid"]), budgets, strict=True):
            self.tags["train"][uid]["status"] = "running"
            self.running.append((uid, int(budget)))

    def poll(self, partition_id: str, last_debug_time: float) -> float:
        """The buffer's ``_wait_for_next_poll``: one more group finishes."""
        self.polls += 1
        if self.running:
            uid, budget = self.running.pop(0)
            self.finished += 1
            sessions = self.outcome(self.finished, budget)
            for session, score in enumerate(sessions):
                if score is not None:
                    key = f"{uid}_{session}_0"
                    tag = {"status": "success", "prompt_len": 3, "response_len": 2, "seq_len": 5}
                    self.tags["train"][key] = tag
                    self.scores[key] = score
            self.tags["train"][uid]["status"] = "failure" if None in sessions else "finished"
        return last_debug_time

    # -------------------------------------------------------------- TransferQueue
    def kv_batch_put(self, keys, partition_id, fields=None, tags=None) -> None:
        for key, tag in zip(keys, tags, strict=True):
            self.tags[partition_id][str(key)] = dict(tag)

    def kv_list(self, partition_id=None) -> dict:
        return {p: {k: dict(t) for k, t in items.items()} for p, items in self.tags.items()}

    def kv_clear(self, keys, partition_id) -> None:
        for key in keys:
            self.tags[partition_id].pop(key, None)

    def kv_batch_get(self, keys, partition_id, select_fields) -> dict:
        assert list(select_fields) == ["rm_scores"], select_fields
        return {"rm_scores": torch.tensor([[self.scores[key]] for key in keys], dtype=torch.float32)}


def start(mode, outcome, small_config, tokenizer, monkeypatch, *overrides) -> SimpleNamespace:
    """``mode``'s trainer with the engine behind it, its step's first M prompts submitted (step 1)."""
    cls, mode_overrides, prompts = MODES[mode]
    engine = ScriptedEngine(outcome)
    for name in ("kv_batch_put", "kv_list", "kv_clear", "kv_batch_get"):
        monkeypatch.setattr(transfer_queue, name, getattr(engine, name))
    trainer = cls(small_config(*mode_overrides, *overrides))
    trainer.tokenizer, trainer.processor = tokenizer, None
    trainer._init_dataloader()
    trainer.global_steps = 1
    trainer.agent_loop_manager = engine
    trainer.replay_buffer._wait_for_next_poll = engine.poll
    trainer._add_batch_to_generate()
    return SimpleNamespace(trainer=trainer, engine=engine, buffer=trainer.replay_buffer, prompts=prompts)


def sample(run: SimpleNamespace):
    return run.buffer.sample(run.trainer.global_steps, "train", run.prompts)


def failing_first(groups: int) -> Outcome:
    """The first ``groups`` groups fail whole, the later ones finish with a reward spread."""
    return lambda ordinal, budget: all_fail(ordinal, budget) if ordinal <= groups else spread(ordinal, budget)


# ---------------------------------------------------------------- 2 x M empty groups, every mode
@pytest.mark.usefixtures("reuse_datasets")
@pytest.mark.parametrize(
    ("mode", "refills", "trained_groups"),
    [("sync", [4, 3], 4), ("colocate_async", [1] * 7, 4), ("separate_async", [1] * 7, 2)],
)
def test_2m_minus_1_empty_groups_in_a_row_over_as_many_polls_pass(
    mode, refills, trained_groups, small_config, tiny_tokenizer, monkeypatch
):
    """M = data.train_batch_size = 4 in every mode (veRL gives its async buffer no train_batch_size):
    7 = 2 x M - 1 groups whose every session failed, one a poll, do not stop the sample; the groups
    after them train. The sync buffer refills once nothing is in flight, the async ones one prompt per
    evicted group."""
    run = start(mode, failing_first(2 * M - 1), small_config, tiny_tokenizer, monkeypatch)
    batch, _ = sample(run)
    assert len(batch.keys) == trained_groups * N  # M x n, or separate_async's (M / 2) x n
    assert run.engine.submissions == [[N] * M] + [[N] * k for k in refills]
    assert run.engine.finished == 2 * M - 1 + trained_groups  # one a poll: 7 empty, then those trained
    assert run.engine.polls == run.engine.finished


@pytest.mark.usefixtures("reuse_datasets")
@pytest.mark.parametrize(("mode", "refilled"), [("sync", 4), ("colocate_async", 7), ("separate_async", 7)])
def test_2m_empty_groups_in_a_row_stop_the_sample_naming_the_count(
    mode, refilled, small_config, tiny_tokenizer, monkeypatch
):
    """The 8th = 2 x M group in a row without a finished session stops the sample, at the poll that
    brought it back: one error naming 8 and the prompts the refills submitted."""
    run = start(mode, all_fail, small_config, tiny_tokenizer, monkeypatch)
    message = (
        f"8 prompt groups in a row came back with every session failed ({refilled} prompts refilled for "
        "this step so far): the rollout engine, agent loop or reward function most likely fails every "
        "request; see the agent-loop workers' 'Error in _run_prompt' log lines."
    )
    with pytest.raises(RuntimeError) as raised:
        sample(run)
    assert str(raised.value) == message
    assert (run.engine.finished, run.engine.polls) == (2 * M, 2 * M)
    assert sum(len(s) for s in run.engine.submissions) == M + refilled


# ---------------------------------------------------------------- C-size with groups in flight
@pytest.mark.usefixtures("reuse_datasets")
def test_size_refills_leaves_the_budgets_in_flight_to_them(small_config, tiny_tokenizer, monkeypatch):
    """C-size with groups in flight at each refill: group 2 comes back with 3 of its 4 sessions (one
    failed), so 7 sessions are ready when DAPO evicts group 3; group 4 (budget 4) is still in flight,
    so the refill has 16 - 7 - 4 = 5 slots: [4, 2] (2 trimmed). When group 4 is evicted, [4, 2] are in
    flight: 16 - 7 - 6 = 3 slots, [3] (1 trimmed). The step then trains exactly 16, nothing surplus.
    Counting the ready sessions alone would give 9 slots twice: [4, 4] and [4, 4], 23 sessions."""

    def outcome(ordinal: int, budget: int) -> list[float | None]:
        if ordinal == 2:
            return [1.0, 0.0, None, 1.0]
        return [0.0] * budget if ordinal in (3, 4) else spread(ordinal, budget)

    run = start("sync", outcome, small_config, tiny_tokenizer, monkeypatch, *DAPO, "coba.size_refills=true")
    batch, metrics = sample(run)
    assert run.engine.submissions == [[4, 4, 4, 4], [4, 2], [3]]
    assert run.buffer.sizer.pop_trimmed() == 3
    assert len(batch.keys) == M * N and run.engine.running == []
    assert metrics.get("training/filter_groups/discarded_surplus_samples", 0) == 0
    assert metrics["training/filter_groups/evicted_samples"] == 2
    assert run.trainer.train_dataloader.round_rest["__rollout_n__"].tolist() == [4]  # put back whole


@pytest.mark.usefixtures("reuse_datasets")
def test_prompts_refilled_counts_the_prompts_c_size_submitted_not_those_asked_for(
    small_config, tiny_tokenizer, monkeypatch
):
    """Groups 1-2 ready (8 sessions), 3-4 evicted by DAPO: each eviction asks for 2 prompts while the
    other 4 sessions are in flight, so C-size submits 1 of them each time; the refills then fail whole,
    and the empty groups 5-12 stop the sample. The refills asked for 2 + 2 + 2 + 2 + 2 = 10 prompts and
    submitted 1 + 1 + 2 + 2 + 2 = 8: the error names 8."""

    def outcome(ordinal: int, budget: int) -> list[float | None]:
        if ordinal in (3, 4):
            return [0.0] * budget
        return spread(ordinal, budget) if ordinal < 3 else all_fail(ordinal, budget)

    run = start("sync", outcome, small_config, tiny_tokenizer, monkeypatch, *DAPO, "coba.size_refills=true")
    with pytest.raises(RuntimeError, match=r"^8 prompt groups in a row came back with every session failed "
                       r"\(8 prompts refilled for this step so far\)"):  # fmt: skip
        sample(run)
    assert run.engine.submissions == [[4, 4, 4, 4], [4], [4], [4, 4], [4, 4], [4, 4]]
