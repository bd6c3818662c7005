"""Real OpenRLHF GRPO runs on CPU through ``python -m coba_verl.openrlhf.train`` (tiny_run.py).

OpenRLHF's CLI, Ray orchestration, SamplesGenerator dispatch, executor and reward-function loading,
experience maker, DeepSpeed (ZeRO-0) update and checkpointing run unmodified; the scaffolding
(tests/openrlhf/scaffold) stands in for vLLM and makes CUDA calls harmless. One run of three steps
with a checkpoint per step and a uniform run beside upstream OpenRLHF's own (in CI), then a resume
from the step-1 checkpoint (``-m e2e``): one to two minutes each on 2 cores.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEP = re.compile(r"coba step (\d+): tracker ids \[([\d, ]*)\] budgets \[([\d, ]*)\]")


def rounds(output: str) -> dict[int, dict[int, int]]:
    """step -> {tracker id: budget}, from the trainer's one line per step."""
    out = {}
    for step, ids, budgets in STEP.findall(output):
        ids_l = [int(x) for x in ids.split(",")]
        out[int(step)] = dict(zip(ids_l, (int(x) for x in budgets.split(",")), strict=True))
    return out


def scalars(tb_dir) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tb_run(out):
    runs = [p.parent for p in (out / "tb").rglob("events.out.tfevents.*")]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def coba_run(tiny_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("coba")
    inputs = tiny_run.write_inputs(out / "inputs")
    flags = tiny_run.openrlhf_flags(inputs, out, episodes=3) + [
        "--coba.strategy",
        "coba",
        "--coba.max_rollouts",
        "8",
    ]
    proc = tiny_run.launch(flags)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out, inputs, flags, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def uniform_and_upstream(tiny_run, tmp_path_factory):
    """Two 2-step runs from the same inputs: ours with ``--coba.strategy uniform``, and OpenRLHF's own
    ``openrlhf.cli.train_ppo_ray`` with the same flags. One micro-batch per optimiser step, so that
    the loss does not depend on how the replay buffer orders the samples."""
    inputs = tiny_run.write_inputs(tmp_path_factory.mktemp("shared") / "inputs")
    runs = {}
    for name, module, extra in (
        ("ours", "coba_verl.openrlhf.train", ["--coba.strategy", "uniform"]),
        ("upstream", "openrlhf.cli.train_ppo_ray", []),
    ):
        out = tmp_path_factory.mktemp(name)
        flags = tiny_run.openrlhf_flags(inputs, out, episodes=2)
        flags += ["--train.micro_batch_size", "16", "--ckpt.save_steps", "-1", *extra]
        proc = tiny_run.launch(flags, module=module)
        assert proc.returncode == 0, name + proc.stdout[-3000:] + proc.stderr[-5000:]
        runs[name] = scalars(tb_run(out))
    return runs


def test_uniform_budgets_train_exactly_as_upstream_openrlhf(uniform_and_upstream):
    """Same samples (the stand-in seeds each by prompt and rank), same advantages, same losses and
    rewards at both steps: the second step's equality also pins the first update."""
    ours, upstream = uniform_and_upstream["ours"], uniform_and_upstream["upstream"]
    shared = {
        tag
        for tag in upstream
        if any(k in tag for k in ("policy_loss", "reward", "return", "response_length"))
    }
    assert any("policy_loss" in tag for tag in shared), sorted(upstream)
    for tag in sorted(shared):
        assert len(upstream[tag]) == 2, (tag, upstream[tag])
        assert ours[tag] == pytest.approx(upstream[tag], rel=1e-5, abs=1e-7), tag
    assert any(tag.endswith("coba/budget_std") for tag in ours)  # it was our trainer
    assert not any("coba/" in tag for tag in upstream)


def test_coba_run_trains_with_per_prompt_budgets(coba_run):
    out, _, _, log = coba_run
    steps = rounds(log)
    assert sorted(steps) == [1, 2, 3]
    assert list(steps[1].values()) == [4, 4, 4, 4]  # no history yet: uniform (spec §2)
    for budgets in steps.values():
        assert sum(budgets.values()) == 16 and all(2 <= b <= 8 for b in budgets.values())
    assert any(len(set(b.values())) > 1 for b in (steps[2], steps[3]))  # the tracker moved budgets
    logged = scalars(tb_run(out))
    for key in ("coba/budget_mean", "coba/budget_max", "coba/F_bar", "coba/prompt_mean_score"):
        assert any(tag.endswith(key) for tag in logged), sorted(logged)
    [samples] = [v for tag, v in logged.items() if tag.endswith("rollout/num_samples")]
    assert samples == [16.0, 16.0, 16.0]
    [loss] = [v for tag, v in logged.items() if tag.endswith("policy_loss")]
    assert len(loss) == 3
    assert (out / "final" / "model.safetensors").exists() or any((out / "final").iterdir())


@pytest.mark.e2e_extended  # a second launch, about 1.5 min: CI runs test_openrlhf_checkpoint.py instead
def test_resume_from_a_checkpoint_reproduces_the_allocations(coba_run, tiny_run, tmp_path):
    """The run's checkpoints after step 1, as a run killed after that save leaves them, then a resume."""
    out, _, flags, log = coba_run
    ckpt = tmp_path / "ckpt"
    shutil.copytree(out / "ckpt", ckpt)
    (ckpt / "_actor" / "latest").write_text("global_step1")
    resumed_flags = [*flags, "--ckpt.load_enable"]
    resumed_flags[resumed_flags.index("--ckpt.path") + 1] = str(ckpt)
    resumed_flags[resumed_flags.index("--logger.tensorboard_dir") + 1] = str(tmp_path / "tb")
    resumed_flags[resumed_flags.index("--ckpt.output_dir") + 1] = str(tmp_path / "final")
    proc = tiny_run.launch(resumed_flags)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    again = rounds(proc.stdout + proc.stderr)
    assert sorted(again) == [2, 3]
    first = rounds(log)
    assert again == {2: first[2], 3: first[3]}


@pytest.mark.e2e_extended  # a third launch, about 1.5 min: CI runs the seeding unit test instead
def test_a_run_with_a_prior_file_allocates_its_first_round_from_it(tiny_run, tmp_path):
    """Priors of the labels' true pass rates (always 1, never 0, even about 1/2): step 1 moves budget
    from the solved and unsolvable prompts to the two in between, as from step 2 without priors."""
    inputs = tiny_run.write_inputs(tmp_path / "inputs")
    priors = tmp_path / "priors.jsonl"
    records = [(10, 8, 8), (11, 0, 8), (12, 4, 8), (13, 4, 8)]  # (prompt_id, successes, attempts)
    lines = [json.dumps({"index": i, "successes": s, "attempts": a}) for i, s, a in records]
    priors.write_text("".join(line + "\n" for line in lines))
    flags = tiny_run.openrlhf_flags(inputs, tmp_path, episodes=1) + [
        "--coba.max_rollouts", "8", "--coba.prior_file", str(priors), "--ckpt.save_steps", "-1",
    ]  # fmt: skip
    proc = tiny_run.launch(flags)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    [first] = rounds(log).values()  # tracker id -> budget; ids 0-3 are prompt_ids 10-13 (sorted)
    assert sum(first.values()) == 16 and first != {0: 4, 1: 4, 2: 4, 3: 4}
    assert first[2] > first[0] and first[3] > first[1]
