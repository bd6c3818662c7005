"""`CobaTrainer` inside veRL's own ``fit()``, on a real TransferQueue over a local 2-CPU Ray.

Replaced, because they need GPUs: the FSDP actor worker group (log-probs, update, checkpoint
shards), the checkpoint engine (weight sync to the inference servers), and the LLM call inside
the agent loop (a scripted answer with a known reward). veRL's own code runs for everything
else: ``fit`` / ``step`` / ``prepare_step``, the dataloader, ``_submit_batch_to_rollout``,
``AgentLoopWorkerTQ.generate_sequences`` / ``_run_prompt`` / ``_agent_loop_postprocess``
(reading ``__rollout_n__``), TransferQueue's SimpleStorage backend, ``ReplayBuffer.sample``,
``_balance_batch``, ``_compute_old_log_prob``, ``_compute_advantage``, ``_compute_metrics``,
``Tracking`` (file backend), ``_save_checkpoint`` / ``_load_checkpoint`` (data.pt), ``_validate``.

The scripted run is built to reach the corners of trajectory counting: session 0 of every prompt
with an even ``extra_info.index`` returns two agent-loop outputs (a multi-turn session), three
data-parallel ranks make ``_balance_batch`` add padding rows every step, and validation runs
before training and every third step.

TransferQueue starts in seconds on a 2-CPU Ray when it gets one storage unit
(``transfer_queue.backend.SimpleStorage.num_data_storage_units=1``): its controller and each
storage unit reserve one CPU, so veRL's default of 8 units (TransferQueue's own default: 2)
waits forever for CPUs that a 2-CPU node does not have.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_separate_async import HybridEngineMode, PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tokenizer import normalize_token_ids

from coba_verl.verl_plugin.hooks.dataloader import STATE_KEY
from coba_verl.verl_plugin.hooks.progress import ProgressLines
from coba_verl.verl_plugin.hooks.replay_buffer import CobaReplayBuffer
from coba_verl.verl_plugin.hooks.trainer import (
    CobaColocateAsyncTrainer,
    CobaSeparateAsyncTrainer,
    CobaTrainer,
)
from coba_verl.verl_plugin.verl_names import COBA_TRAINER_MODE

STEPS = 6  # 12 prompts, 4 per step: steps 1-3 are epoch 1, steps 4-6 revisit every prompt
# 3 ranks: 16 trajectories (plus multi-output extras) never fill lcm(3, ppo_mini_batch_size * n = 8) = 24,
# so veRL's _balance_batch adds padding rows to every step.
PROMPTS_PER_STEP, ROLLOUT_N, DP_SIZE = 4, 4, 3


def is_multi_output(index: int, session: int) -> bool:
    """Sessions whose agent loop returns two outputs (a first turn, then the final answer)."""
    return session == 0 and index % 2 == 0


def scripted_reward(index: int, session: int, step: int) -> float:
    """1.0 with probability (index % 5) / 4, deterministic in (index, session, step)."""
    return float(np.random.default_rng(100_000 * index + 100 * step + session).random() < (index % 5) / 4)


class ScriptedAgentLoopWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """veRL's AgentLoopWorkerTQ (the class under ``@ray.remote``), in-process, with the LLM call
    replaced by a scripted answer whose reward is `scripted_reward`."""

    def __init__(self, config, tokenizer) -> None:  # AgentLoopWorker.__init__ would start LLM clients
        self.config = config
        self.tokenizer = tokenizer
        self.processor = None
        self.reward_loop_worker_handles = None
        self.distillation_enabled = False
        self.background_tasks: set = set()

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        prompt_ids = normalize_token_ids(
            self.tokenizer.apply_chat_template(
                kwargs["raw_prompt"], add_generation_prompt=True, tokenize=True
            )
        )
        score = scripted_reward(int(kwargs["index"]), int(kwargs["session_id"]), int(kwargs["global_steps"]))
        version = kwargs["global_steps"] - 1  # weights in the servers: those after the previous step

        def output(text: str, reward: float | None) -> AgentLoopOutput:
            response_ids = self.tokenizer.encode(text)
            return AgentLoopOutput(
                prompt_ids=list(prompt_ids),
                response_ids=response_ids,
                response_mask=[1] * len(response_ids),
                response_logprobs=[-0.5] * len(response_ids),
                reward_score=reward,
                num_turns=2,
                metrics=AgentLoopMetrics(),
                extra_fields={
                    "min_global_steps": version,
                    "max_global_steps": version,
                    "reward_extra_info": {},
                },
            )

        final = output("the answer is " + ("yes" if score else "no"), score)
        outputs = final
        if not trajectory["validate"] and is_multi_output(int(kwargs["index"]), int(kwargs["session_id"])):
            outputs = [output("the answer", None), final]  # veRL copies the final reward to the first
        return await self._agent_loop_postprocess(outputs, trajectory["validate"], **kwargs)


class InlineAgentLoopManager:
    """AgentLoopManagerTQ.generate_sequences without Ray: chunk over two workers, run to completion."""

    def __init__(self, config, tokenizer) -> None:
        self.workers = [ScriptedAgentLoopWorker(config, tokenizer) for _ in range(2)]
        self.loop = asyncio.new_event_loop()
        self.submissions: list[dict] = []  # training batches
        self.validations: list[dict] = []  # validation batches

    def generate_sequences(self, prompts: TensorDict) -> None:
        record = {
            "index": [int(i) for i in list(prompts["index"])],
            "uid": [str(u) for u in list(prompts["uid"])],
            "step": int(prompts["global_steps"]),
            "dtype": None,
            "shape": None,
            "budgets": None,  # stays None when the batch carries no __rollout_n__ (stock veRL)
        }
        if "__rollout_n__" in prompts.keys():
            rollout_n = prompts["__rollout_n__"]
            record.update(dtype=rollout_n.dtype, shape=tuple(rollout_n.shape), budgets=rollout_n.tolist())
        (self.validations if "validate" in prompts.keys() else self.submissions).append(record)
        self.dispatch(prompts)

    def dispatch(self, prompts: TensorDict) -> None:
        for worker, chunk in zip(self.workers, prompts.chunk(len(self.workers)), strict=False):
            self.loop.run_until_complete(worker.generate_sequences(chunk))
        pending = [task for worker in self.workers for task in worker.background_tasks]
        self.loop.run_until_complete(asyncio.gather(*pending))


class CpuActorWorkerGroup:
    """What veRL's trainer calls on the actor worker group, answered on CPU."""

    def __init__(self, tq) -> None:
        self.tq = tq
        self._dispatch_info = {"actor": list(range(DP_SIZE))}
        self.updates: list[dict] = []

    def compute_log_prob(self, batch):
        lengths = [tag["seq_len"] for tag in batch.tags]
        zeros = torch.nested.as_nested_tensor([torch.zeros(n) for n in lengths], layout=torch.jagged)
        fields = TensorDict({"log_probs": zeros, "entropy": zeros.clone()}, batch_size=len(batch))
        self.tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        return batch

    def update_actor(self, batch):
        data = self.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages"]
        )
        first_token = [float(a[0]) for a in data["advantages"].unbind()]
        self.updates.append(
            {
                "keys": list(batch.keys),
                "advantage": dict(zip(batch.keys, first_token, strict=True)),
                "padding": sum(bool(tag.get("is_padding", False)) for tag in batch.tags),
                "mini_batch_size": int(batch.extra_info["mini_batch_size"]),
                "epochs": int(batch.extra_info["epochs"]),
            }
        )
        return {"metrics": {"mfu": 0.0, "pg_loss": 0.0}}

    def save_model_to_cpu(self, slot):  # separate_async's decoupled PPO: no weights here
        pass

    def restore_model_from_cpu(self, slot):
        pass

    def clear_cpu_model(self, slot):
        pass

    def save_checkpoint(self, local_path, remote_path=None, global_steps=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)

    def load_checkpoint(self, local_path, del_local_after_load=False):
        pass


class NoWeightSync:
    def sleep_replicas(self):
        pass

    def update_weights(self, global_steps=None):
        pass

    def abort_replicas(self):  # colocate_async
        pass

    def resume_generation_replicas(self):  # colocate_async
        pass


def clear_transfer_queue(tq) -> None:
    """Drop whatever an earlier run left in TransferQueue (fit() clears each step's keys itself)."""
    for partition_id, items in (tq.kv_list() or {}).items():
        if items:
            tq.kv_clear(keys=list(items), partition_id=partition_id)


def loop_config(small_config, ckpt_dir, *overrides, mode=COBA_TRAINER_MODE):
    """The config ``TaskRunnerV1`` receives from ``python -m coba_verl.main`` (trainer_mode=coba_sync)."""
    return small_config(
        f"trainer.total_training_steps={STEPS}",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[file]",
        f"trainer.default_local_dir={ckpt_dir}",
        f"trainer.n_gpus_per_node={DP_SIZE}",
        # engines of one device, as the CPU backend's (coba_cpu) and a GPU launch on 3 devices must
        # (veRL's rollout worker asserts that the devices divide into engines: veRL's default tp is 2)
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"trainer.v1.trainer_mode={mode}",
        *overrides,
    )


class RecordWarnings(logging.Handler):
    """Collects the records (WARNING and above unless told) of the trainer module's logger while a run
    is in progress."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level=level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def fit(config, tokenizer, tq, log_path, monkeypatch, cls=CobaTrainer, manager_cls=None):
    """``PPOTrainer._setup`` minus the GPU workers, then veRL's ``fit``."""
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(log_path))
    clear_transfer_queue(tq)
    trainer = cls(config)
    trainer.tokenizer, trainer.processor = tokenizer, None
    trainer._init_dataloader()
    trainer._init_dump_executor()
    trainer._init_resource_pool_mgr()
    trainer.actor_rollout_wg = CpuActorWorkerGroup(tq)
    trainer.checkpoint_manager = NoWeightSync()
    if isinstance(trainer, PPOTrainerSeparateAsync):  # what its _setup builds: the standalone pool's sync
        trainer.standalone_checkpoint_manager = NoWeightSync()
        trainer.current_mode = HybridEngineMode.TRAINER  # actor_rollout_ref.hybrid_engine=false
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=[])  # rewards come with rollouts
    trainer._load_checkpoint()
    manager = (manager_cls or InlineAgentLoopManager)(config, tokenizer)
    try:
        trainer.fit(manager)
    finally:
        if hasattr(manager, "drain"):  # sessions still generating in other processes
            manager.drain()
            clear_transfer_queue(tq)
    trainer.logger.finish()
    return trainer, manager


@pytest.fixture(scope="module")
def uninterrupted(transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    warnings = RecordWarnings()
    lines = RecordWarnings(logging.INFO)
    trainer_logger = logging.getLogger(CobaTrainer.__module__)
    progress_logger = logging.getLogger(ProgressLines.__module__)  # the step's line
    level, progress_level = trainer_logger.level, progress_logger.level
    trainer_logger.setLevel(logging.INFO)
    progress_logger.setLevel(logging.INFO)
    trainer_logger.addHandler(warnings)
    progress_logger.addHandler(lines)
    try:
        with pytest.MonkeyPatch.context() as monkeypatch:
            trainer, manager = fit(
                loop_config(
                    small_config, root / "ckpt", "trainer.val_before_train=true", "trainer.test_freq=3"
                ),
                tiny_tokenizer,
                transfer_queue,
                root / "metrics.jsonl",
                monkeypatch,
            )
    finally:
        trainer_logger.removeHandler(warnings)
        progress_logger.removeHandler(lines)
        trainer_logger.setLevel(level)
        progress_logger.setLevel(progress_level)
    logged = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    step_lines = [m for m in lines.messages if m.startswith("coba-verl step")]
    return SimpleNamespace(
        trainer=trainer, manager=manager, logged=logged, ckpt=root / "ckpt", warnings=warnings.messages,
        step_lines=step_lines,
    )  # fmt: skip


def test_step_line_shows_the_held_out_score_on_the_steps_that_validated(uninterrupted):
    assert len(uninterrupted.step_lines) == STEPS
    for step, line in enumerate(uninterrupted.step_lines, start=1):
        assert line.startswith(f"coba-verl step {step}: ")
        assert ("held-out" in line) == (step % 3 == 0), line  # trainer.test_freq=3


def test_coba_sync_mode_runs_verl_synchronous_machinery(uninterrupted):
    """trainer_mode=coba_sync only selects the class: veRL's base must see "sync" (one whole batch per
    step, the synchronous replay buffer), or it would switch to one-prompt async submissions."""
    trainer = uninterrupted.trainer
    assert trainer.trainer_mode == "sync" and trainer.config.trainer.v1.trainer_mode == "sync"
    assert type(trainer.replay_buffer) is CobaReplayBuffer  # veRL's sync buffer, one hook added
    assert next(c for c in CobaReplayBuffer.__mro__ if c.__module__.startswith("verl.")) is ReplayBuffer
    assert trainer.replay_buffer.gen_batch_size == PROMPTS_PER_STEP
    assert trainer.parameter_sync_step == 1


def test_every_submission_carries_int64_budgets_summing_to_m_times_n(uninterrupted):
    submissions = uninterrupted.manager.submissions
    assert [s["step"] for s in submissions] == list(range(1, STEPS + 1))
    for s in submissions:
        assert s["dtype"] == torch.int64 and s["shape"] == (PROMPTS_PER_STEP,)
        assert sum(s["budgets"]) == PROMPTS_PER_STEP * ROLLOUT_N
        assert 2 <= min(s["budgets"]) and max(s["budgets"]) <= 8
    # Epoch 1 has no history: plain GRPO. Epoch 2 allocates from the tracker.
    assert all(s["budgets"] == [ROLLOUT_N] * PROMPTS_PER_STEP for s in submissions[:3])
    assert all(len(set(s["budgets"])) > 1 for s in submissions[3:])


def test_agent_loop_generated_exactly_the_allocated_rollouts_per_prompt(uninterrupted):
    for submission, update in zip(
        uninterrupted.manager.submissions, uninterrupted.trainer.actor_rollout_wg.updates, strict=True
    ):
        sessions = {tuple(key.rsplit("_", 2)[:2]) for key in update["keys"]}  # {(uid, session)}
        per_uid = Counter(uid for uid, _ in sessions)
        assert [per_uid[uid] for uid in submission["uid"]] == submission["budgets"]
        # The corners this run is built to reach: a second output in some sessions, padding rows.
        assert len(update["keys"]) > len(sessions)
        assert any(key.startswith("pad") for key in update["keys"])


def test_padding_rows_are_skipped_without_a_warning(uninterrupted):
    updates = uninterrupted.trainer.actor_rollout_wg.updates
    assert all(any(key.startswith("pad") for key in update["keys"]) for update in updates)
    assert uninterrupted.warnings == []


def test_grpo_advantages_are_centred_within_each_variable_group(uninterrupted):
    submission = uninterrupted.manager.submissions[-1]
    update = uninterrupted.trainer.actor_rollout_wg.updates[-1]
    groups: dict[str, dict[str, float]] = {}  # uid -> {session: advantage}, padding left out
    for key, advantage in update["advantage"].items():
        uid, session, _ = key.rsplit("_", 2)
        if uid in submission["uid"]:
            groups.setdefault(uid, {})[session] = advantage  # every output of a session shares it
    assert sorted(len(g) for g in groups.values()) == sorted(submission["budgets"])
    assert sorted(submission["budgets"]) != [ROLLOUT_N] * PROMPTS_PER_STEP
    for advantages in groups.values():
        assert abs(sum(advantages.values())) < 1e-4


def test_tracker_holds_the_pass_rates_of_the_finished_trajectories(uninterrupted):
    successes: Counter = Counter()
    rollouts: Counter = Counter()
    for s in uninterrupted.manager.submissions:
        for index, budget in zip(s["index"], s["budgets"], strict=True):
            successes[index] += sum(scripted_reward(index, session, s["step"]) for session in range(budget))
            rollouts[index] += budget
    loader = uninterrupted.trainer.train_dataloader
    indices = sorted(rollouts)
    got = loader.allocator.tracker.pass_rates(loader.prompt_ids.ids(indices))
    want = np.array([successes[i] / rollouts[i] for i in indices])
    np.testing.assert_allclose(got, want)
    assert loader.allocator.tracker.steps == STEPS


def test_validation_neither_gets_budgets_nor_feeds_the_tracker(uninterrupted):
    """veRL's _validate submits its batches to the agent loop directly (not through
    _submit_batch_to_rollout) and never calls _compute_advantage; validation keeps val_kwargs.n."""
    validations = uninterrupted.manager.validations
    assert [v["step"] for v in validations] == [0, 3, 6]
    assert all(v["budgets"] is None for v in validations)
    assert all(len(v["index"]) == 12 for v in validations)
    by_step = {entry["step"]: entry["data"] for entry in uninterrupted.logged}
    for step in range(1, STEPS + 1):  # each step's tracker update holds exactly its own rollouts
        assert by_step[step]["coba/prompts"] == PROMPTS_PER_STEP
        assert by_step[step]["coba/rollouts"] == PROMPTS_PER_STEP * ROLLOUT_N
    assert any(key.startswith("val-core/") for key in by_step[3])


def test_checkpoint_is_written_after_the_steps_tracker_update(uninterrupted):
    for step in (2, 4, 6):
        state = torch.load(uninterrupted.ckpt / f"global_step_{step}" / "data.pt", weights_only=False)
        assert state[STATE_KEY]["allocator"]["tracker"]["steps"] == step


def test_coba_metrics_are_logged_through_verl_tracking(uninterrupted):
    by_step = {entry["step"]: entry["data"] for entry in uninterrupted.logged}
    assert sorted(by_step) == list(range(0, STEPS + 1))  # step 0: validation before training
    assert not any(key.startswith("coba/") for key in by_step[0])
    step5 = by_step[5]
    assert step5["coba/budget_mean"] == ROLLOUT_N
    assert step5["coba/budget_min"] >= 2 and step5["coba/budget_max"] <= 8
    hist = {k: v for k, v in step5.items() if k.startswith("coba/budget_hist/")}
    assert set(hist) == {"coba/budget_hist/2-3", "coba/budget_hist/4-7", "coba/budget_hist/8-8"}
    assert sum(hist.values()) == PROMPTS_PER_STEP
    for key in (
        "coba/alpha",
        "coba/beta",
        "coba/tau",
        "coba/F_bar",
        "coba/F_tilde",
        "coba/alpha_next",
        "coba/at_min_rollouts",
        "coba/at_max_rollouts",
        "coba/alloc_time_s",
        "coba/all_pass_share",
        "coba/all_fail_share",
        "coba/expected_zero_var_share",
        "coba/expected_zero_var_share_uniform",
    ):
        assert key in step5, key
    assert "coba/alpha" not in by_step[1]  # uniform cold start: no Beta involved, NaNs are not logged
    assert "critic/score/mean" in step5  # veRL's own metrics of the same step


def test_kill_and_resume_through_verl_checkpoint_reproduces_the_allocations(
    uninterrupted, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    config = loop_config(
        small_config,
        uninterrupted.ckpt,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={uninterrupted.ckpt / 'global_step_4'}",
        "trainer.save_freq=-1",
    )
    _, manager = fit(config, tiny_tokenizer, transfer_queue, tmp_path / "metrics.jsonl", monkeypatch)
    resumed = [(s["step"], s["index"], s["budgets"]) for s in manager.submissions]
    expected = [(s["step"], s["index"], s["budgets"]) for s in uninterrupted.manager.submissions[4:]]
    assert resumed == expected


def trained_trajectories(trainer, manager) -> list[dict[tuple[int, int, int], float]]:
    """Per step, {(extra_info.index, session, output): advantage} of what the actor was trained on."""
    steps = []
    for submission, update in zip(manager.submissions, trainer.actor_rollout_wg.updates, strict=True):
        index_of = dict(zip(submission["uid"], submission["index"], strict=True))
        trajectories = {}
        for key, advantage in update["advantage"].items():
            uid, session, output = key.rsplit("_", 2)
            if uid in index_of:  # padding rows carry a uid of their own
                trajectories[(index_of[uid], int(session), int(output))] = advantage
        steps.append(trajectories)
    return steps


def test_uniform_strategy_reproduces_stock_grpo(
    transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """coba.strategy=uniform against veRL's own PPOTrainerSync on the same data and rewards: same
    prompts per step, rollout.n sessions each, same trajectories, same advantages, under
    coba.group_weight=proportional and bit for bit the same under equal (the default)."""
    runs = {}
    for name, cls, overrides in (
        ("stock", PPOTrainerSync, ("trainer.v1.trainer_mode=sync",)),
        ("uniform", CobaTrainer, ("coba.strategy=uniform", "coba.group_weight=proportional")),
        ("uniform_equal", CobaTrainer, ("coba.strategy=uniform",)),  # equal, the default
    ):
        config = loop_config(small_config, tmp_path / name, "trainer.total_training_steps=4", *overrides)
        log_path = tmp_path / f"{name}.jsonl"
        trainer, manager = fit(config, tiny_tokenizer, transfer_queue, log_path, monkeypatch, cls)
        runs[name] = (manager, trained_trajectories(trainer, manager))
    (stock, stock_trained), (uniform, uniform_trained) = runs["stock"], runs["uniform"]
    assert [s["budgets"] for s in stock.submissions] == [None] * 4  # stock veRL: no __rollout_n__
    assert [s["budgets"] for s in uniform.submissions] == [[ROLLOUT_N] * PROMPTS_PER_STEP] * 4
    assert [s["index"] for s in uniform.submissions] == [s["index"] for s in stock.submissions]
    for stock_step, uniform_step in zip(stock_trained, uniform_trained, strict=True):
        assert len(stock_step) > PROMPTS_PER_STEP * ROLLOUT_N  # rollout.n sessions, some with 2 outputs
        assert sorted(uniform_step) == sorted(stock_step)
        for key, advantage in stock_step.items():
            assert uniform_step[key] == pytest.approx(advantage, abs=1e-6), key
    # coba.group_weight=equal: every group has rollout.n sessions, so the factor is exactly 1
    equal, equal_trained = runs["uniform_equal"]
    assert [s["index"] for s in equal.submissions] == [s["index"] for s in uniform.submissions]
    assert equal_trained == uniform_trained


class RolloutNIgnoringManager(InlineAgentLoopManager):
    """An agent-loop manager that drops ``__rollout_n__``: every prompt gets ``rollout.n`` sessions."""

    def generate_sequences(self, prompts: TensorDict) -> None:
        if "__rollout_n__" in prompts.keys():
            del prompts["__rollout_n__"]
        super().generate_sequences(prompts)


def test_session_count_check_fires_when_the_engine_ignores_rollout_n(
    transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """Epoch 1 is a uniform cold start (B_i = n, so nothing differs); in epoch 2 the budgets differ
    from n, and the first group that comes back with n sessions stops the run, naming it."""
    with pytest.raises(
        RuntimeError,
        match=r"finished sessions \[(2, )?3\] but was allocated B_i=[23] rollouts: the rollout engine did "
        r"not honour the budget\. A custom agent_loop_manager_class",
    ):
        fit(
            loop_config(small_config, tmp_path / "ckpt"), tiny_tokenizer, transfer_queue,
            tmp_path / "metrics.jsonl", monkeypatch, manager_cls=RolloutNIgnoringManager,
        )  # fmt: skip


# ---------------------------------------------------------------------- DAPO dynamic sampling
# A window longer than the run: the tracker's pass rates are then totals over every observation.
# C0, whatever coba.size_refills's default: C-size has its own tests (test_verl_refill_sizing.py).
DAPO = (
    "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward", "coba.window=50",
    "coba.size_refills=false",
)  # fmt: skip


def logged_steps(path) -> dict[int, dict]:
    return {e["step"]: e["data"] for e in map(json.loads, path.read_text().splitlines())}


FATES = ("trained", "cut", "evicted", "failed")


def assert_every_step_balances(
    logged: dict[int, dict], synchronous: bool = True, before: float = 0.0
) -> None:
    """The ledger's identity on every logged training step: in flight before + generated = trained
    + cut + evicted + failed + in flight after (nothing in flight across a synchronous step), and the
    tracker scored exactly the trained, cut and evicted sessions."""
    for step in sorted(step for step in logged if step):
        data = logged[step]
        settled = sum(data[f"coba/{fate}_rollouts"] for fate in FATES)
        assert before + data["coba/rollouts_generated"] == settled + data["coba/in_flight_rollouts"], step
        scored = data["coba/trained_rollouts"] + data["coba/cut_rollouts"] + data["coba/evicted_rollouts"]
        assert data["coba/rollouts"] == scored, step
        if synchronous:
            assert data["coba/in_flight_rollouts"] == 0 and data["coba/versions_behind_max"] == 0
        before = data["coba/in_flight_rollouts"]


def rounds_of(submissions: list[dict]) -> list[list[tuple[int, int]]]:
    """Every submitted (extra_info.index, B_i) in submission order, cut into rounds of M prompts."""
    drawn = [pair for s in submissions for pair in zip(s["index"], s["budgets"], strict=True)]
    return [drawn[i : i + PROMPTS_PER_STEP] for i in range(0, len(drawn), PROMPTS_PER_STEP)]


def dapo_fit(name, transfer_queue, small_config, tiny_tokenizer, tmp_path_factory, *overrides):
    """One scripted DAPO run through veRL's ``fit()`` with ``overrides``: trainer, manager, logged rows
    per step and the checkpoint folder."""
    root = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as monkeypatch:
        trainer, manager = fit(
            loop_config(small_config, root / "ckpt", *DAPO, *overrides),
            tiny_tokenizer,
            transfer_queue,
            root / "metrics.jsonl",
            monkeypatch,
        )
    logged = logged_steps(root / "metrics.jsonl")
    return SimpleNamespace(trainer=trainer, manager=manager, logged=logged, ckpt=root / "ckpt")


@pytest.fixture(scope="module")
def dapo(transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    return dapo_fit(
        "dapo", transfer_queue, small_config, tiny_tokenizer, tmp_path_factory, "trainer.save_freq=1"
    )


def test_dapo_refills_take_the_rest_of_their_round_and_every_round_spends_m_times_n(dapo):
    submissions = dapo.manager.submissions
    assert len(submissions) > STEPS  # DAPO evicted groups and refilled them one prompt at a time
    assert any(len(s["index"]) < PROMPTS_PER_STEP for s in submissions)
    rounds = rounds_of(submissions)
    rest = dapo.trainer.train_dataloader.round_rest  # drawn and allocated, not yet submitted
    if rest is not None:
        rounds[-1] += list(zip(map(int, rest["index"]), rest["__rollout_n__"].tolist(), strict=True))
    for drawn in rounds:
        assert len(drawn) == PROMPTS_PER_STEP
        assert sum(budget for _, budget in drawn) == PROMPTS_PER_STEP * ROLLOUT_N
    assert any(len({budget for _, budget in drawn}) > 1 for drawn in rounds)  # CoBA, not uniform


def test_groups_dapo_evicts_feed_the_tracker(dapo):
    """Every generated group reaches the tracker once, trained or evicted (all-pass / all-fail)."""
    successes: Counter = Counter()
    rollouts: Counter = Counter()
    for s in dapo.manager.submissions:
        for index, budget in zip(s["index"], s["budgets"], strict=True):
            successes[index] += sum(scripted_reward(index, session, s["step"]) for session in range(budget))
            rollouts[index] += budget
    loader = dapo.trainer.train_dataloader
    indices = sorted(rollouts)
    got = loader.allocator.tracker.pass_rates(loader.prompt_ids.ids(indices))
    np.testing.assert_allclose(got, [successes[i] / rollouts[i] for i in indices])
    assert 150 in indices and got[indices.index(150)] == 0  # index % 5 == 0: always fails, always evicted


def test_dapo_metrics_count_generated_and_evicted_rollouts(dapo):
    for step in range(1, STEPS + 1):
        data = dapo.logged[step]
        generated = sum(sum(s["budgets"]) for s in dapo.manager.submissions if s["step"] == step)
        assert data["coba/rollouts_generated"] == generated
        assert data["coba/rollouts"] == generated  # observed = generated: nothing lost, nothing twice
        cleared = [f"training/filter_groups/{k}" for k in ("evicted_samples", "discarded_surplus_samples")]
        assert data["coba/evicted_groups"] == sum(data.get(key, 0) for key in cleared)
    assert sum(dapo.logged[step]["coba/evicted_groups"] for step in dapo.logged if step) > 0
    assert_every_step_balances(dapo.logged)


def test_dapo_resume_reproduces_the_submissions_including_a_rounds_rest(
    dapo, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    def round_rest(step: int):
        state = torch.load(dapo.ckpt / f"global_step_{step}" / "data.pt", weights_only=False)
        return state[STATE_KEY]["extra"]["round_rest"]

    resume_step = next(step for step in range(2, STEPS) if round_rest(step) is not None)
    config = loop_config(
        small_config, dapo.ckpt, *DAPO, "trainer.resume_mode=resume_path", "trainer.save_freq=-1",
        f"trainer.resume_from_path={dapo.ckpt / f'global_step_{resume_step}'}",
    )  # fmt: skip
    _, manager = fit(config, tiny_tokenizer, transfer_queue, tmp_path / "metrics.jsonl", monkeypatch)
    resumed = [(s["step"], s["index"], s["budgets"]) for s in manager.submissions]
    expected = [
        (s["step"], s["index"], s["budgets"]) for s in dapo.manager.submissions if s["step"] > resume_step
    ]
    assert resumed == expected


def trained_sessions(trainer, manager) -> list[list[tuple[int, int, int, int, int]]]:
    """Per actor update, the sessions it trained as (submission step, extra_info.index, the prompt's
    submission number within that step, session, output), sorted: names that two runs share
    (uids do not). Padding rows left out."""
    seen: Counter = Counter()
    names = {}
    for s in manager.submissions:
        for uid, index in zip(s["uid"], s["index"], strict=True):
            names[uid] = (s["step"], int(index), seen[s["step"], int(index)])
            seen[s["step"], int(index)] += 1
    return [
        sorted(
            (*names[uid], int(session), int(output))
            for uid, session, output in (key.rsplit("_", 2) for key in update["advantage"])
            if uid in names
        )
        for update in trainer.actor_rollout_wg.updates
    ]


def test_dapo_resume_under_the_random_cut_trains_the_same_sessions_step_by_step(
    dapo, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """The random DAPO cut (``coba.cut_sessions=auto`` under DAPO) draws which sessions a cut group
    keeps with ``(data.seed, step, cuts made so far)``; the count travels in data.pt, so a run
    resumed after cuts were made cuts the same sessions as the run that was not interrupted."""
    assert dapo.trainer.replay_buffer.cut_mode == "random"

    def cuts_made(step: int) -> int:
        state = torch.load(dapo.ckpt / f"global_step_{step}" / "data.pt", weights_only=False)
        return state[STATE_KEY]["extra"]["carried"]["replay_buffer"]["cuts_made"]

    resume_step = next(step for step in range(1, STEPS) if 0 < cuts_made(step) < cuts_made(STEPS))
    config = loop_config(
        small_config, dapo.ckpt, *DAPO, "trainer.resume_mode=resume_path", "trainer.save_freq=-1",
        f"trainer.resume_from_path={dapo.ckpt / f'global_step_{resume_step}'}",
    )  # fmt: skip
    resumed, manager = fit(config, tiny_tokenizer, transfer_queue, tmp_path / "metrics.jsonl", monkeypatch)
    assert resumed.replay_buffer.cuts_made == dapo.trainer.replay_buffer.cuts_made
    expected = trained_sessions(dapo.trainer, dapo.manager)[resume_step:]
    assert min(s["step"] for s in manager.submissions) == resume_step + 1
    assert trained_sessions(resumed, manager) == expected


class FailingSessionWorker(ScriptedAgentLoopWorker):
    """Session 1 of every prompt raises in epoch 2 (a tool error, a timeout); index 61 fails whole."""

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        epoch_two = kwargs["global_steps"] > 3 and not trajectory["validate"]
        if epoch_two and (kwargs["session_id"] == 1 or int(kwargs["index"]) == 61):
            raise TimeoutError("scripted tool timeout")
        return await super()._run_agent_loop(
            sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
        )


class FailingSessionManager(InlineAgentLoopManager):
    def __init__(self, config, tokenizer) -> None:
        super().__init__(config, tokenizer)
        self.workers = [FailingSessionWorker(config, tokenizer) for _ in range(2)]


@pytest.mark.parametrize("refill", [False, True], ids=["train-on-the-rest", "refill-failed-groups"])
def test_failed_sessions_are_counted_and_the_run_goes_on(
    refill, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    overrides = [f"trainer.v1.sampler.sync_refill_failed_groups={str(refill).lower()}"]
    trainer, manager = fit(
        loop_config(small_config, tmp_path / "ckpt", *overrides), tiny_tokenizer, transfer_queue,
        tmp_path / "metrics.jsonl", monkeypatch, manager_cls=FailingSessionManager,
    )  # fmt: skip
    logged = logged_steps(tmp_path / "metrics.jsonl")
    for step in range(4, STEPS + 1):
        failed = sum(
            budget if index == 61 else int(budget > 1)
            for s in manager.submissions if s["step"] == step
            for index, budget in zip(s["index"], s["budgets"], strict=True)
        )  # fmt: skip
        assert failed > 0 and logged[step]["coba/failed_rollouts"] == failed
    assert all(logged[step]["coba/failed_rollouts"] == 0 for step in (1, 2, 3))
    assert trainer.ledger.groups == {}
    # a failed session of an evicted (refilled) group is failed, not also evicted
    assert_every_step_balances(logged)
    if refill:  # the whole-group failure of index 61 was replaced by a fresh prompt
        assert any(61 in s["index"] for s in manager.submissions if s["step"] > 3)
        assert any(len(s["index"]) < PROMPTS_PER_STEP for s in manager.submissions)


class EngineDownWorker(ScriptedAgentLoopWorker):
    """Every training session raises (an engine that is down, a reward function that always raises)."""

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        if not trajectory["validate"]:
            raise ConnectionError("scripted engine down")
        return await super()._run_agent_loop(
            sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
        )


class EngineDownManager(InlineAgentLoopManager):
    """Fails the test, rather than hang it, once the buffer has asked for 50 submissions."""

    def __init__(self, config, tokenizer) -> None:
        super().__init__(config, tokenizer)
        self.workers = [EngineDownWorker(config, tokenizer) for _ in range(2)]

    def generate_sequences(self, prompts: TensorDict) -> None:
        assert len(self.submissions) < 50, (
            "the replay buffer kept refilling prompts whose every session fails"
        )
        super().generate_sequences(prompts)


@pytest.mark.parametrize(
    "overrides", [DAPO, ("trainer.v1.sampler.sync_refill_failed_groups=true",)], ids=["dapo", "refill-failed"]
)
def test_sync_rollout_counting_stops_naming_the_count_when_every_session_fails(
    overrides, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """Step 1's 4 groups come back empty, the buffer refills 4 prompts (one round), those come back
    empty too: 2 x M = 8 groups in a row without a finished session stop the run."""
    with pytest.raises(
        RuntimeError,
        match=r"^8 prompt groups in a row came back with every session failed \(4 prompts refilled for this "
        r"step so far\): the rollout engine, agent loop or reward function most likely fails every request",
    ):
        fit(
            loop_config(small_config, tmp_path / "ckpt", *overrides), tiny_tokenizer, transfer_queue,
            tmp_path / "metrics.jsonl", monkeypatch, manager_cls=EngineDownManager,
        )  # fmt: skip


def test_async_rollout_counting_stops_naming_the_count_when_every_session_fails(
    async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path
):
    """colocate_async with every session failing: veRL's async buffer evicts each failed group and
    the counted sampling refills it, without end before; 2 x M = 8 groups in a row without a
    finished session now stop the run, naming the count. Here the first poll brings back all 8 groups
    in flight at once (the step's M and the warm-up batch's, failing within the same second): a limit
    above 8 would let the run go on. Groups coming back one a poll, where a limit below 2 x M shows:
    test_verl_buffer_polls.py."""
    stop = r"^8 prompt groups in a row came back with every session failed"
    with pytest.raises(RuntimeError, match=stop):
        async_fit(
            async_workers, small_config, tiny_tokenizer, transfer_queue, tmp_path, "trainer.save_freq=-1",
            failure_rate=1.0,
        )  # fmt: skip


# ---------------------------------------------------------------------- coba.group_weight=equal
def trained_by_update(trainer, manager) -> list[dict[tuple[int, int, int], float]]:
    """Per actor update, {(group, session, output): advantage}, with ``group`` the group's place in
    submission order (one per group even when DAPO trains a prompt twice in a step). Padding rows
    left out."""
    order = {uid: n for n, uid in enumerate(uid for s in manager.submissions for uid in s["uid"])}
    return [
        {
            (order[uid], int(session), int(output)): advantage
            for uid, session, output, advantage in (
                (*key.rsplit("_", 2), advantage) for key, advantage in update["advantage"].items()
            )
            if uid in order
        }
        for update in trainer.actor_rollout_wg.updates
    ]


def grpo_advantage(scores: list[float]) -> np.ndarray:
    """veRL's GRPO outcome advantage of one group: (score - mean) / (std + 1e-6), Bessel's std."""
    x = torch.tensor(scores, dtype=torch.float32)
    if len(scores) == 1:
        return np.zeros(1)
    return ((x - x.mean()) / (x.std() + 1e-6)).double().numpy()


@pytest.mark.parametrize(
    ("overrides", "route"),
    [((), "inside"), (DAPO, "inside"), ((), "after")],
    ids=["v1", "v1-dapo", "v1-after"],
)
def test_equal_group_weight_gives_every_trained_group_the_same_weight(
    overrides, route, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """coba.group_weight=equal through veRL's fit(): every trained session's advantage is veRL's
    GRPO advantage of its group times (R / G) / B_g over the trained batch (R sessions, G groups;
    with DAPO, groups of several submissions), so each group's factors sum to the same R / G. The
    ``after`` case is the route a veRL other than 0.9.1 gets (veRL's pass, then the weight)."""
    if route == "after":
        monkeypatch.setattr("coba_verl.verl_plugin.hooks.trainer.advantage_route", lambda method: "after")
    trainer, manager = fit(
        loop_config(small_config, tmp_path / "ckpt", *overrides, "coba.group_weight=equal"),
        tiny_tokenizer, transfer_queue, tmp_path / "metrics.jsonl", monkeypatch,
    )  # fmt: skip
    assert trainer._advantage_route == route
    if overrides:  # DAPO: a step's trained groups come from several submissions
        assert len(manager.submissions) > STEPS
    drawn = [(s["step"], index) for s in manager.submissions for index in s["index"]]  # per group
    reweighted = 0
    for step, trained in enumerate(trained_by_update(trainer, manager), start=1):
        groups: dict[int, set[int]] = {}  # group -> its trained sessions
        for group, session, _ in trained:
            groups.setdefault(group, set()).add(session)
        r, g = sum(len(sessions) for sessions in groups.values()), len(groups)
        factors = []
        for group, sessions in groups.items():
            when, index = drawn[group]
            sessions = sorted(sessions)
            stock = grpo_advantage([scripted_reward(index, session, when) for session in sessions])
            factor = (r / g) / len(sessions)
            expected = dict(zip(sessions, stock * factor, strict=True))
            for (q, session, _), advantage in trained.items():  # every output of each session
                if q == group:
                    assert advantage == pytest.approx(expected[session], rel=1e-5, abs=1e-6), (
                        step,
                        index,
                        session,
                    )
            factors.append(factor * len(sessions))
            reweighted += factor != 1.0 and bool(np.any(stock != 0))
        assert factors == pytest.approx([r / g] * g)  # the same total weight for every group
    assert reweighted > 0, "some group with a learning signal must have been reweighted"


def update_cost(update: dict) -> tuple[int, int, int]:
    """(sessions, rows with padding, optimizer steps) of one actor update: sessions are the distinct
    ``{uid}_{session}`` of its real rows; veRL's actor runs ceil(rows / mini-batch) x epochs steps."""
    sessions = {key.rsplit("_", 1)[0] for key in update["keys"] if not key.startswith("pad")}
    rows = len(update["keys"])
    return len(sessions), rows, -(-rows // update["mini_batch_size"]) * update["epochs"]


@pytest.fixture(scope="module")
def dapo_uniform(transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    return dapo_fit(
        "dapo-uniform",
        transfer_queue,
        small_config,
        tiny_tokenizer,
        tmp_path_factory,
        "coba.strategy=uniform",
        "trainer.save_freq=-1",
    )


def test_dapo_trains_m_times_n_rollouts_and_uniforms_rows_and_optimizer_steps_every_step(dapo, dapo_uniform):
    coba = [update_cost(u) for u in dapo.trainer.actor_rollout_wg.updates]
    uniform = [update_cost(u) for u in dapo_uniform.trainer.actor_rollout_wg.updates]
    assert len(coba) == len(uniform) == STEPS
    target = PROMPTS_PER_STEP * ROLLOUT_N
    assert [sessions for sessions, _, _ in coba] == [target] * STEPS
    assert [sessions for sessions, _, _ in uniform] == [target] * STEPS
    assert [(rows, steps) for _, rows, steps in coba] == [(rows, steps) for _, rows, steps in uniform]
    for step, (sessions, rows, steps) in enumerate(coba, start=1):
        data = dapo.logged[step]
        assert data["coba/trained_rollouts"] == sessions
        assert data["coba/trained_rows"] + data["coba/padding_rows"] == rows
        assert data["coba/optimizer_steps"] == steps
    # budgets differed, so groups of unequal sizes were combined into exactly M x n
    trained_sizes = [
        Counter(key.rsplit("_", 2)[0] for key in {k.rsplit("_", 1)[0] + "_0" for k in u["keys"]}).values()
        for u in dapo.trainer.actor_rollout_wg.updates
    ]
    assert any(len(set(sizes)) > 1 for sizes in trained_sizes)


@pytest.fixture(scope="module")
def dapo_skip(transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    """DAPO with GRESO's skip at 0.3, no exploration: the prompts that always fail or always pass
    (index % 5 of 0 or 4) are skipped once their counts make a spread at B_low unlikely."""
    return dapo_fit(
        "dapo_skip",
        transfer_queue,
        small_config,
        tiny_tokenizer,
        tmp_path_factory,
        "coba.skip_spread_below=0.3",
        "coba.skip_explore=0.0",
        "trainer.save_freq=-1",
    )


def test_skipped_prompts_are_never_submitted_and_every_update_still_trains_m_times_n(dapo_skip):
    skipped = sum(dapo_skip.logged[step].get("coba/skipped_prompts", 0) for step in range(1, STEPS + 1))
    assert skipped > 0
    budgets = [b for s in dapo_skip.manager.submissions for b in s["budgets"]]
    assert min(budgets) >= 2  # a skipped prompt (B_i = 0) never reaches the agent loop
    updates = [update_cost(u) for u in dapo_skip.trainer.actor_rollout_wg.updates]
    assert [sessions for sessions, _, _ in updates] == [PROMPTS_PER_STEP * ROLLOUT_N] * STEPS
    assert_every_step_balances(dapo_skip.logged)  # nothing generated for them, nothing lost
    for step in range(1, STEPS + 1):
        assert dapo_skip.logged[step]["coba/rollouts"] == dapo_skip.logged[step]["coba/rollouts_generated"]


@pytest.fixture(scope="module")
def dapo_sized(transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    """DAPO with C-size (``coba.size_refills``): each submission sized to the sessions still missing."""
    return dapo_fit(
        "dapo_sized",
        transfer_queue,
        small_config,
        tiny_tokenizer,
        tmp_path_factory,
        "coba.size_refills=true",
        "trainer.save_freq=1",
    )


def test_size_refills_submits_no_more_than_the_sessions_missing_and_still_trains_m_times_n(dapo_sized):
    """The scripted engine finishes each submission before the buffer looks again, so before every
    submission the slots are M x n minus the sessions of the step's groups with a reward spread: each
    submission fills them, overshooting only with a last prompt of B_low sessions. So a step generates
    M x n, plus the groups DAPO's filter evicts, plus at most B_low - 1 (cut), and no surplus group."""
    target, low = PROMPTS_PER_STEP * ROLLOUT_N, dapo_sized.trainer.coba_config.min_rollouts
    submissions = dapo_sized.manager.submissions
    for step in range(1, STEPS + 1):
        ready = filtered = 0
        for s in (s for s in submissions if s["step"] == step):
            budgets, slots = s["budgets"], target - ready
            assert slots > 0 and sum(budgets[:-1]) < slots, (step, s)  # every prompt had a slot
            assert sum(budgets) <= slots or budgets[-1] == low, (step, s)  # overshoot: a last B_low
            for index, budget in zip(s["index"], budgets, strict=True):
                scores = {scripted_reward(index, session, step) for session in range(budget)}
                ready += budget if len(scores) > 1 else 0
                filtered += 0 if len(scores) > 1 else budget
        data = dapo_sized.logged[step]
        assert data["coba/rollouts_generated"] == target + filtered + data["coba/cut_rollouts"], step
        assert data["coba/cut_rollouts"] <= low - 1 and data["coba/evicted_rollouts"] == filtered, step
        assert data.get("training/filter_groups/discarded_surplus_samples", 0) == 0, step
        assert data["coba/rollouts"] == data["coba/rollouts_generated"]  # only generated sessions scored
    updates = [update_cost(u) for u in dapo_sized.trainer.actor_rollout_wg.updates]
    assert [sessions for sessions, _, _ in updates] == [target] * STEPS
    assert_every_step_balances(dapo_sized.logged)


def test_size_refills_puts_prompts_back_in_their_round_and_counts_the_trimmed_rollouts(dapo_sized):
    """Submitted prompts, then the round's rest, still come in rounds of M drawn in order; every
    allocated rollout was generated, trimmed (``coba/trimmed_rollouts``) or waits in the rest."""
    submissions = dapo_sized.manager.submissions
    rounds = rounds_of(submissions)
    rest = dapo_sized.trainer.train_dataloader.round_rest
    if rest is not None:
        rounds[-1] += list(zip(map(int, rest["index"]), rest["__rollout_n__"].tolist(), strict=True))
    assert len(rounds[-1]) == PROMPTS_PER_STEP and all(len(drawn) == PROMPTS_PER_STEP for drawn in rounds)
    trimmed = [dapo_sized.logged[step]["coba/trimmed_rollouts"] for step in range(1, STEPS + 1)]
    assert sum(trimmed) > 0
    allocated = len(rounds) * PROMPTS_PER_STEP * ROLLOUT_N
    assert sum(budget for drawn in rounds for _, budget in drawn) + sum(trimmed) == allocated
    loader = dapo_sized.trainer.train_dataloader  # the tracker saw exactly the sessions generated
    successes: Counter = Counter()
    rollouts: Counter = Counter()
    for s in submissions:
        for index, budget in zip(s["index"], s["budgets"], strict=True):
            successes[index] += sum(scripted_reward(index, session, s["step"]) for session in range(budget))
            rollouts[index] += budget
    indices = sorted(rollouts)
    got = loader.allocator.tracker.pass_rates(loader.prompt_ids.ids(indices))
    np.testing.assert_allclose(got, [successes[i] / rollouts[i] for i in indices])


def test_size_refills_resume_submits_the_prompts_put_back_with_their_budgets(
    dapo_sized, transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """A step that put prompts back leaves them in data.pt's round rest: the resumed run submits
    what the uninterrupted one did, the same prompts with the same (trimmed) budgets."""

    def round_rest(step: int):
        state = torch.load(dapo_sized.ckpt / f"global_step_{step}" / "data.pt", weights_only=False)
        return state[STATE_KEY]["extra"]["round_rest"]

    resume_step = next(step for step in range(2, STEPS) if round_rest(step) is not None)
    config = loop_config(
        small_config, dapo_sized.ckpt, *DAPO, "coba.size_refills=true", "trainer.resume_mode=resume_path",
        "trainer.save_freq=-1", f"trainer.resume_from_path={dapo_sized.ckpt / f'global_step_{resume_step}'}",
    )  # fmt: skip
    _, manager = fit(config, tiny_tokenizer, transfer_queue, tmp_path / "metrics.jsonl", monkeypatch)
    resumed = [(s["step"], s["index"], s["budgets"]) for s in manager.submissions]
    expected = [(s["step"], s["index"], s["budgets"]) for s in dapo_sized.manager.submissions]
    assert resumed == [submission for submission in expected if submission[0] > resume_step]


def test_dapo_sessions_cut_from_a_trained_group_reach_the_tracker_not_the_update(dapo):
    """Every generated session is observed once (trained, evicted or cut); cut ones are never trained."""
    for step in range(1, STEPS + 1):
        data = dapo.logged[step]
        assert data["coba/rollouts"] == data["coba/rollouts_generated"]
    assert_every_step_balances(dapo.logged)
    assert sum(dapo.logged[step]["coba/cut_rollouts"] for step in range(1, STEPS + 1)) > 0
    # coba.cut_sessions=auto under DAPO: the cut groups kept random sessions, one draw per cut
    buffer = dapo.trainer.replay_buffer
    assert buffer.cut_mode == "random" and buffer.cut_seed == int(dapo.trainer.config.data.seed)
    assert buffer.cuts_made >= sum(dapo.logged[step]["coba/cut_rollouts"] > 0 for step in range(1, STEPS + 1))


def test_token_budget_keeps_each_rounds_tokens_and_veRL_trains_what_it_generated(
    transfer_queue, small_config, tiny_tokenizer, tmp_path, monkeypatch
):
    """``coba.budget_unit=tokens``: prompts with even indices answer in two outputs (longer sessions),
    so once lengths are known their rollouts cost more; each round's sum_i B_i L_i stays within
    n sum_i L_i, the rollouts per round vary, and every generated session is trained (no DAPO)."""
    trainer, manager = fit(
        loop_config(small_config, tmp_path / "ckpt", "coba.budget_unit=tokens", "trainer.save_freq=-1"),
        tiny_tokenizer,
        transfer_queue,
        tmp_path / "metrics.jsonl",
        monkeypatch,
    )
    logged = logged_steps(tmp_path / "metrics.jsonl")
    sums = [sum(s["budgets"]) for s in manager.submissions]
    assert sums[:3] == [PROMPTS_PER_STEP * ROLLOUT_N] * 3  # epoch 1: no history, uniform
    assert any(total != PROMPTS_PER_STEP * ROLLOUT_N for total in sums[3:])  # lengths differ by parity
    for step in range(4, STEPS + 1):
        data = logged[step]
        assert data["coba/expected_tokens"] <= data["coba/token_budget"] + 1e-6
        assert data["coba/token_budget"] == pytest.approx(data["coba/expected_tokens_uniform"])
    for update, submission in zip(trainer.actor_rollout_wg.updates, manager.submissions, strict=True):
        sessions, rows, steps = update_cost(update)
        assert sessions == sum(submission["budgets"])
        assert rows % math.lcm(DP_SIZE, update["mini_batch_size"]) == 0
        assert steps == rows // update["mini_batch_size"] * update["epochs"]


# ---------------------------------------------------------------------- colocate_async
# The agent loop workers run in Ray actors of their own, as veRL's do, so generation runs while the
# trainer samples and updates: a session with id s answers after s x SESSION_DELAY_S, so the large
# groups finish last. One warm-up batch keeps a round in flight ahead of each update.
SESSION_DELAY_S = 0.15
ASYNC = ("trainer.v1.colocate_async.num_warmup_batches=1",)


def session_fails(index: int, session: int, step: int, rate: float) -> bool:
    """True with probability ``rate``, deterministic in (index, session, step): the session raises."""
    return (
        bool(rate)
        and float(np.random.default_rng(7_000_000 + 100_000 * index + 100 * step + session).random()) < rate
    )


class AsyncScriptedWorker(ScriptedAgentLoopWorker):
    """`ScriptedAgentLoopWorker` in a Ray actor; sessions take time, with ``hang_step`` the even
    indices submitted at that step never finish (they are in flight at the next checkpoint), and with a
    failure rate a session raises where `session_fails`."""

    def __init__(self, config, tokenizer) -> None:
        import transfer_queue

        super().__init__(config, tokenizer)
        transfer_queue.init()  # as AgentLoopWorkerTQ.__init__: the driver's TransferQueue
        self.hang_step: int | None = None
        self.failure_rate = 0.0

    def set_hang_step(self, step: int | None, failure_rate: float = 0.0) -> None:
        self.hang_step = step
        self.failure_rate = failure_rate

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        if not trajectory["validate"]:
            await asyncio.sleep(SESSION_DELAY_S * int(kwargs["session_id"]))
            if kwargs["global_steps"] == self.hang_step and int(kwargs["index"]) % 2 == 0:
                await asyncio.sleep(3600)
            if session_fails(
                int(kwargs["index"]), int(kwargs["session_id"]), kwargs["global_steps"], self.failure_rate
            ):
                raise TimeoutError("scripted tool timeout")
        return await super()._run_agent_loop(
            sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs
        )

    async def drain(self) -> None:
        """Cancel what is still generating (the end of a run)."""
        tasks = list(self.background_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture(scope="module")
def async_workers(transfer_queue, small_config, tiny_tokenizer):
    """Two `AsyncScriptedWorker` actors for the module's asynchronous runs."""
    import sys

    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests are not importable in Ray
    remote = ray.remote(num_cpus=0)(AsyncScriptedWorker)
    workers = [remote.remote(small_config(), tiny_tokenizer) for _ in range(2)]
    yield workers
    for worker in workers:
        ray.kill(worker)


class RayAgentLoopManager(InlineAgentLoopManager):
    """veRL's AgentLoopManagerTQ.generate_sequences: chunks sent to the worker actors, not awaited."""

    def __init__(self, workers, hang_step: int | None = None, failure_rate: float = 0.0) -> None:
        import ray

        self.workers = workers
        self.submissions, self.validations = [], []
        ray.get([worker.set_hang_step.remote(hang_step, failure_rate) for worker in workers])

    def dispatch(self, prompts: TensorDict) -> None:
        for worker, chunk in zip(self.workers, prompts.chunk(len(self.workers)), strict=False):
            worker.generate_sequences.remote(chunk)

    def drain(self) -> None:
        import ray

        ray.get([worker.drain.remote() for worker in self.workers])


def async_fit(
    workers,
    small_config,
    tokenizer,
    tq,
    root,
    *overrides,
    hang_step=None,
    ckpt=None,
    cls=CobaColocateAsyncTrainer,
    failure_rate=0.0,
):
    """`fit` under ``trainer.v1.trainer_mode=colocate_async`` (or ``cls``'s mode) with the worker actors."""
    from coba_verl.core.allocator import BudgetAllocator

    observed = []  # (the trainer's step, tracker ids, scores, generating versions) per observe call
    observe = BudgetAllocator.observe

    def recording_observe(allocator, ids, scores, lengths=None, versions=None):
        observed.append((trainer_steps[0], np.array(ids), np.array(scores), np.array(versions)))
        return observe(allocator, ids, scores, lengths, versions)

    trainer_steps = [0]
    step = cls.step

    def counting_step(self, metrics, timing_raw):
        trainer_steps[0] = self.global_steps
        return step(self, metrics, timing_raw)

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(BudgetAllocator, "observe", recording_observe)
        monkeypatch.setattr(cls, "step", counting_step)
        warmup = ASYNC if cls is CobaColocateAsyncTrainer else ()
        config = loop_config(small_config, ckpt or root / "ckpt", *warmup, *overrides, mode=cls.VERL_MODE)
        trainer, manager = fit(
            config, tokenizer, tq, root / "metrics.jsonl", monkeypatch,
            cls=cls,
            manager_cls=lambda config, tokenizer: RayAgentLoopManager(workers, hang_step, failure_rate),
        )  # fmt: skip
    return SimpleNamespace(
        trainer=trainer, manager=manager, logged=logged_steps(root / "metrics.jsonl"), ckpt=root / "ckpt",
        observed=observed,
    )  # fmt: skip


@pytest.fixture(scope="module")
def async_coba(async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    """CoBA under colocate_async; the even indices submitted at step 4 hang, so they are in flight
    when step 4's checkpoint is written."""
    root = tmp_path_factory.mktemp("async-coba")
    return async_fit(
        async_workers, small_config, tiny_tokenizer, transfer_queue, root, "trainer.save_freq=2", hang_step=4
    )


@pytest.fixture(scope="module")
def async_uniform(async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("async-uniform")
    return async_fit(
        async_workers, small_config, tiny_tokenizer, transfer_queue, root, "coba.strategy=uniform",
        "trainer.save_freq=-1",
    )  # fmt: skip


def test_colocate_async_runs_veRLs_async_machinery_with_the_coba_buffer(async_coba):
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    from coba_verl.verl_plugin.hooks.async_replay_buffer import CobaReplayBufferAsync

    trainer = async_coba.trainer
    assert type(trainer) is CobaColocateAsyncTrainer and isinstance(trainer, PPOTrainerColocateAsync)
    assert trainer.trainer_mode == "colocate_async"
    assert type(trainer.replay_buffer) is CobaReplayBufferAsync and trainer.replay_buffer.counts_rollouts(
        "train"
    )
    # the warm-up round went out before step 1's own: generation ran a round ahead
    assert [s["step"] for s in async_coba.manager.submissions[:2]] == [1, 1]


def test_colocate_async_updates_train_m_times_n_rollouts_with_uniforms_rows_and_optimizer_steps(
    async_coba, async_uniform
):
    coba = [update_cost(u) for u in async_coba.trainer.actor_rollout_wg.updates]
    uniform = [update_cost(u) for u in async_uniform.trainer.actor_rollout_wg.updates]
    target = PROMPTS_PER_STEP * ROLLOUT_N
    assert len(coba) == len(uniform) == STEPS
    assert [sessions for sessions, _, _ in coba] == [target] * STEPS
    assert [sessions for sessions, _, _ in uniform] == [target] * STEPS
    assert [(rows, steps) for _, rows, steps in coba] == [(rows, steps) for _, rows, steps in uniform]
    assert any(len(set(s["budgets"])) > 1 for s in async_coba.manager.submissions)  # budgets differed


def test_colocate_async_ledger_balances_with_groups_in_flight_across_steps(async_coba):
    logged = async_coba.logged
    assert_every_step_balances(logged, synchronous=False)
    assert all(logged[step]["coba/in_flight_rollouts"] > 0 for step in range(1, STEPS + 1))
    assert max(logged[step]["coba/versions_behind_max"] for step in range(1, STEPS + 1)) >= 1
    generated = sum(sum(s["budgets"]) for s in async_coba.manager.submissions)
    assert sum(logged[step]["coba/rollouts_generated"] for step in range(1, STEPS + 1)) == generated


def test_colocate_async_scores_reach_the_tracker_with_the_version_that_generated_them(async_coba):
    """Each scored rollout carries the step that submitted its prompt (the scripted answers are
    generated under one version each), and some are older than the update that scores them."""
    trainer = async_coba.trainer
    submitted: dict[int, set[int]] = {}
    for submission in async_coba.manager.submissions:
        for prompt_id in trainer.train_dataloader.prompt_ids.ids(submission["index"]).tolist():
            submitted.setdefault(prompt_id, set()).add(submission["step"])
    for step, ids, _, versions in async_coba.observed:
        pairs = zip(ids.tolist(), versions.tolist(), strict=True)
        assert all(version in submitted[prompt_id] and version <= step for prompt_id, version in pairs)
    assert any(v < c[0] for c in async_coba.observed for v in c[3].tolist())  # generation ran ahead


def test_colocate_async_f_bar_averages_the_newest_complete_versions_of_the_scripted_rewards(async_coba):
    """F_v from the rewards the script gives every session a version's submissions drew: 1 - the mean
    over its prompts of their success rates (spec §3). The logged F_bar is, at every step, the mean
    of F_v over the window's newest complete versions, never one that the groups hung at step 4 keep
    open; once those are the only groups of an old version still in flight, every version before
    step 4 has joined it."""
    hang_step = 4  # async_coba's
    rewards: dict[int, dict[int, list[float]]] = {}  # version (submission step) -> index -> rewards
    for submission in async_coba.manager.submissions:
        version = submission["step"]
        for index, budget in zip(submission["index"], submission["budgets"], strict=True):
            drawn = [scripted_reward(index, session, version) for session in range(budget)]
            rewards.setdefault(version, {}).setdefault(index, []).extend(drawn)
    failure = {
        version: 1.0 - sum(sum(r) / len(r) for r in by_index.values()) / len(by_index)
        for version, by_index in rewards.items()
    }
    window = async_coba.trainer.allocator.tracker.window
    newest_before = 0
    for step in range(1, STEPS + 1):
        logged = async_coba.logged[step]
        if "coba/F_bar" not in logged:  # no version complete yet (NaN is not logged)
            assert newest_before == 0
            continue
        newest = int(logged["coba/F_bar_newest_version"])
        assert newest_before <= newest <= step and newest < hang_step
        averaged = [version for version in sorted(failure) if version <= newest][-window:]
        assert logged["coba/F_bar"] == pytest.approx(sum(failure[v] for v in averaged) / len(averaged))
        newest_before = newest
    assert newest_before == hang_step - 1


def test_f_bar_stops_waiting_for_a_version_whose_request_never_returns_past_the_staleness_bound(
    async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path, caplog
):
    """The even indices submitted at step 2 never finish: F_bar would leave version 2 out, and every
    version after it, for the rest of the run. With veRL's staleness bound at 2, from step 5 (3 steps
    after) versions 2 on are settled with what was observed: F_bar's newest version moves past 2, the
    WARNING names the versions, and ``coba/versions_held_open`` counts what F_bar still waits for."""
    hang_step = 2
    with caplog.at_level(logging.WARNING, logger=CobaTrainer.__module__):
        run = async_fit(
            async_workers, small_config, tiny_tokenizer, transfer_queue, tmp_path, "trainer.save_freq=-1",
            "trainer.v1.sampler.max_off_policy_threshold=2", hang_step=hang_step,
        )  # fmt: skip
    newest = {s: run.logged[s].get("coba/F_bar_newest_version") for s in range(1, STEPS + 1)}
    assert all(newest[s] is None or newest[s] < hang_step for s in range(1, hang_step + 3))  # waited
    assert newest[STEPS] is not None and newest[STEPS] >= hang_step  # then no longer
    assert f"F_bar stops waiting for policy versions {hang_step}-" in caplog.text
    # from step 3 the oldest group in flight is a hung one of version 2 (every older group is trained
    # first): versions 2-3 held at step 3, 2-4 at step 4, then the bound + 1 = 3 newest
    held = [run.logged[s]["coba/versions_held_open"] for s in range(hang_step + 1, STEPS + 1)]
    assert held == [2, 3, 3, 3]
    assert run.trainer.ledger.oldest_open_version == hang_step  # the hung groups are still in flight


def test_colocate_async_uniform_keeps_veRLs_sampling_by_groups(async_uniform):
    assert not async_uniform.trainer.replay_buffer.counts_rollouts("train")
    assert all(set(s["budgets"]) == {ROLLOUT_N} for s in async_uniform.manager.submissions)
    assert_every_step_balances(async_uniform.logged, synchronous=False)


def test_colocate_async_resume_reissues_in_flight_prompts_with_their_budgets_counted_once(
    async_coba, async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path
):
    """Resumed from step 4, whose checkpoint holds step 4's hung prompts in flight: veRL re-issues
    them with the budgets they were submitted with, the ledger counts them as in flight (not
    generated again), and step 5's round is the uninterrupted run's."""
    resumed = async_fit(
        async_workers, small_config, tiny_tokenizer, transfer_queue, tmp_path,
        "trainer.resume_mode=resume_path", f"trainer.resume_from_path={async_coba.ckpt / 'global_step_4'}",
        "trainer.save_freq=-1", ckpt=async_coba.ckpt,
    )  # fmt: skip
    original = {
        uid: budget
        for s in async_coba.manager.submissions
        for uid, budget in zip(s["uid"], s["budgets"], strict=True)
    }
    hung = [
        (uid, budget)
        for s in async_coba.manager.submissions
        if s["step"] == 4
        for uid, index, budget in zip(s["uid"], s["index"], s["budgets"], strict=True)
        if index % 2 == 0
    ]
    assert hung, "step 4 submitted no even index to hang"
    reissue, *fresh = resumed.manager.submissions
    assert reissue["step"] == 5 and set(reissue["uid"]) >= {uid for uid, _ in hung}
    assert all(
        original[uid] == budget for uid, budget in zip(reissue["uid"], reissue["budgets"], strict=True)
    )
    # the prompts drawn after the checkpoint (warm-up top-up, then step 5's) are the uninterrupted
    # run's step 5 round, with its budgets
    drawn = [pair for s in fresh for pair in zip(s["index"], s["budgets"], strict=True)]
    first_after = next(s for s in async_coba.manager.submissions if s["step"] == 5)
    assert drawn[:PROMPTS_PER_STEP] == list(zip(first_after["index"], first_after["budgets"], strict=True))
    # what the checkpointed run had in flight after step 4 (finished, untrained, or hung) is what the
    # resumed run starts with in flight: neither lost nor generated twice
    before = async_coba.logged[4]["coba/in_flight_rollouts"]
    assert before >= sum(budget for _, budget in hung)
    after_resume = {step: data for step, data in resumed.logged.items() if step >= 5}
    assert_every_step_balances(after_resume, synchronous=False, before=before)
    generated = sum(sum(s["budgets"]) for s in fresh if s["step"] == 5)
    assert after_resume[5]["coba/rollouts_generated"] == generated


def test_colocate_async_with_dapo_evicts_to_the_tracker_and_still_trains_m_times_n(
    async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path
):
    """DAPO's filter in the async buffer: all-pass / all-fail groups are evicted through veRL's
    ``_clear_groups`` (scored, then refilled one prompt each from the current round), and every
    update still trains exactly M x n rollouts. With ``coba.cut_sessions=spread`` a cut group keeps
    its reward spread, so every trained group has one (the default under DAPO, ``random``, may cut a
    group to sessions that all score alike)."""
    run = async_fit(
        async_workers,
        small_config,
        tiny_tokenizer,
        transfer_queue,
        tmp_path,
        *DAPO,
        "trainer.save_freq=-1",
        "coba.cut_sessions=spread",
    )
    assert run.trainer.replay_buffer.cut_mode == "spread"
    target = PROMPTS_PER_STEP * ROLLOUT_N
    assert [update_cost(u)[0] for u in run.trainer.actor_rollout_wg.updates] == [target] * STEPS
    assert_every_step_balances(run.logged, synchronous=False)
    assert sum(run.logged[step]["coba/evicted_groups"] for step in range(1, STEPS + 1)) > 0
    for update in run.trainer.actor_rollout_wg.updates:  # every trained group kept a reward spread
        by_group: dict[str, list[float]] = {}
        for key, advantage in update["advantage"].items():
            if not key.startswith("pad"):
                by_group.setdefault(key.rsplit("_", 2)[0], []).append(advantage)
        assert all(any(a != 0 for a in values) for values in by_group.values())


#: separate_async with a standalone pool only (no hybrid replicas), two local updates per weight
#: sync: each trains (M / 2) x n rollouts, one mini-batch of ppo_mini_batch_size = M / 2 prompts.
SEPARATE = (
    "trainer.v1.separate_async.parameter_sync_step=2", "trainer.v1.separate_async.num_warmup_batches=2",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS_PER_STEP // 2}",
    "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", "actor_rollout_ref.hybrid_engine=false",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",  # one engine fills the 1-device pool
)  # fmt: skip


@pytest.mark.usefixtures("cupy_installed")  # veRL's nccl engine loads, as SEPARATE's GPU machine has it
def test_separate_async_local_updates_each_train_their_share_in_rollouts(
    async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path
):
    for strategy in ("uniform", "coba"):
        (tmp_path / strategy).mkdir()
    runs = {
        strategy: async_fit(
            async_workers,
            small_config,
            tiny_tokenizer,
            transfer_queue,
            tmp_path / strategy,
            *SEPARATE,
            "trainer.save_freq=-1",
            f"coba.strategy={strategy}",
            cls=CobaSeparateAsyncTrainer,
        )  # fmt: skip
        for strategy in ("uniform", "coba")
    }
    run = runs["coba"]
    assert run.trainer.trainer_mode == "separate_async" and run.trainer.parameter_sync_step == 2
    share = PROMPTS_PER_STEP // 2 * ROLLOUT_N
    costs = {
        strategy: [update_cost(u) for u in r.trainer.actor_rollout_wg.updates] for strategy, r in runs.items()
    }
    assert [sessions for sessions, _, _ in costs["coba"]] == [share] * (2 * STEPS)
    assert [sessions for sessions, _, _ in costs["uniform"]] == [share] * (2 * STEPS)
    assert [cost[1:] for cost in costs["coba"]] == [cost[1:] for cost in costs["uniform"]]  # rows, opt. steps
    assert_every_step_balances(run.logged, synchronous=False)
    assert any(len(set(s["budgets"])) > 1 for s in run.manager.submissions)


@pytest.mark.usefixtures("cupy_installed")
def test_separate_async_with_dapo_trains_each_local_updates_share_from_groups_with_a_reward_spread(
    async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path
):
    """DAPO's filter in separate_async: evicted groups reach the tracker, and each of the two local
    updates per weight sync still trains exactly (M / 2) x n rollouts from groups with a reward
    spread; under the default random DAPO cut (``coba.cut_sessions=auto``) only a cut group may
    have lost its spread, so such groups number at most the cuts made."""
    run = async_fit(
        async_workers, small_config, tiny_tokenizer, transfer_queue, tmp_path, *SEPARATE, *DAPO,
        "trainer.save_freq=-1", cls=CobaSeparateAsyncTrainer,
    )  # fmt: skip
    share = PROMPTS_PER_STEP // 2 * ROLLOUT_N
    assert [update_cost(u)[0] for u in run.trainer.actor_rollout_wg.updates] == [share] * (2 * STEPS)
    assert_every_step_balances(run.logged, synchronous=False)
    assert sum(run.logged[step]["coba/evicted_groups"] for step in range(1, STEPS + 1)) > 0
    assert run.trainer.replay_buffer.cut_mode == "random"
    without_spread = 0
    for update in run.trainer.actor_rollout_wg.updates:
        by_group: dict[str, list[float]] = {}
        for key, advantage in update["advantage"].items():
            if not key.startswith("pad"):
                by_group.setdefault(key.rsplit("_", 2)[0], []).append(advantage)
        without_spread += sum(not any(a != 0 for a in values) for values in by_group.values())
    assert without_spread <= run.trainer.replay_buffer.cuts_made


# ---------------------------------------------------------------------- failed sessions, async
#: Each session raises with this probability (seeded per index, session and step): with budgets 2-8,
#: many groups lose a session, some fall below B_low = 2 finished, and a few lose every session.
FAILURE_RATE = 0.3


@pytest.mark.parametrize(
    ("strategy", "cls"),
    [
        ("coba", CobaColocateAsyncTrainer),
        ("coba", CobaSeparateAsyncTrainer),
        ("uniform", CobaColocateAsyncTrainer),
    ],
    ids=["colocate_async", "separate_async", "colocate_async-uniform"],
)
@pytest.mark.usefixtures("cupy_installed")
def test_async_failed_sessions_train_the_finished_ones_of_groups_with_b_low_and_are_counted_as_failed(
    strategy, cls, async_workers, transfer_queue, small_config, tiny_tokenizer, tmp_path
):
    """veRL's async buffer evicts a group when any one session failed; with budgets, a group with at
    least B_low finished sessions trains them and the ledger records the others as failed, while a
    group with fewer is evicted and refilled as veRL does. Uniform keeps veRL's eviction: no group
    with a failed session trains. Every update trains its share of M x n either way."""
    separate = cls is CobaSeparateAsyncTrainer
    mode = SEPARATE if separate else ()
    run = async_fit(
        async_workers, small_config, tiny_tokenizer, transfer_queue, tmp_path, *mode,
        "trainer.save_freq=-1", f"coba.strategy={strategy}", cls=cls, failure_rate=FAILURE_RATE,
    )  # fmt: skip
    share = PROMPTS_PER_STEP * ROLLOUT_N // (2 if separate else 1)
    updates = run.trainer.actor_rollout_wg.updates
    assert [update_cost(u)[0] for u in updates] == [share] * len(updates) and len(updates) >= STEPS
    submitted = {
        uid: (index, s["step"], budget)
        for s in run.manager.submissions
        for uid, index, budget in zip(s["uid"], s["index"], s["budgets"], strict=True)
    }
    finished = {
        uid: {session for session in range(budget) if not session_fails(index, session, step, FAILURE_RATE)}
        for uid, (index, step, budget) in submitted.items()
    }
    trained: dict[str, set[int]] = {}
    for update in updates:
        for key in update["keys"]:
            uid, session, _ = key.rsplit("_", 2)
            if uid in submitted:
                trained.setdefault(uid, set()).add(int(session))
    assert all(sessions <= finished[uid] for uid, sessions in trained.items())  # no failed session trains
    with_a_failure = [uid for uid in trained if len(finished[uid]) < submitted[uid][2]]
    if strategy == "uniform":
        assert with_a_failure == []  # veRL's eviction of the whole group
    else:
        assert with_a_failure  # veRL would have evicted these
        b_low = run.trainer.coba_config.min_rollouts
        assert all(len(finished[uid]) >= b_low for uid in trained)
        assert any(len(sessions) < b_low for sessions in finished.values())  # some were evicted for it
    assert_every_step_balances(run.logged, synchronous=False)
    closed = [uid for uid in submitted if uid not in run.trainer.ledger.groups]
    failed = sum(submitted[uid][2] - len(finished[uid]) for uid in closed)
    assert failed > 0 and sum(data["coba/failed_rollouts"] for data in run.logged.values() if data) == failed
    evicted = [data for step, data in run.logged.items() if step and "coba/evicted_budget_mean" in data]
    assert evicted and all("coba/budget_mean" in data for data in evicted)
