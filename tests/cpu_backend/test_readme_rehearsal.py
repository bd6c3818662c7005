"""A dress rehearsal of README's GPU launch: its ``coba-verl train`` line, read from README.md, trains
one step through veRL's real V1 trainer on CPU.

Only what CPU (and a test's minutes) forces is swapped, each swap named with its reason in `SWAPS`;
every other key of the line, and every veRL default it leaves, meets veRL's own code as printed:
``use_dynamic_bsz``, the ``coba`` keys, the data the README's data line writes (GSM8K's format,
scored by veRL's own GSM8K rule), ``val_before_train``, and the padding of each step to veRL's
mini-batch multiple. The data come from README's data line too, fed local rows instead of the hub.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The swapped batch: M prompts x n rollouts (README: 128 x 16).
M, N = 4, 4


class Swap(NamedTuple):
    """One override of the rehearsal: its value (``{data}``, ``{model}``: the test's folders) and why."""

    value: str
    why: str


#: README's launch line as it is, but for these. A key README's line sets is replaced; one it leaves
#: to veRL's default is added. ``--cpu`` is coba-verl train's flag for the CPU backend's config group.
SWAPS: dict[str, Swap] = {
    "--cpu": Swap("", "no GPU: the CPU backend's group, coba_cpu=cpu (platform cpu, FSDP2 in float32)"),
    "trainer.n_gpus_per_node": Swap("1", "8 GPUs -> one logical device: one FSDP rank, one hf replica"),
    "actor_rollout_ref.rollout.name": Swap("hf", "vLLM has no CPU build: the CPU backend's engine"),
    "actor_rollout_ref.model.path": Swap("{model}", "a 1.5B model on 2 cores: a tiny Qwen2, from scratch"),
    "data.train_files": Swap("{data}/train.parquet", "README's data line on local rows: no hub in a test"),
    "data.val_files": Swap("{data}/test.parquet", "README's data line on local rows: no hub in a test"),
    "data.train_batch_size": Swap(str(M), "128 x 16 rollouts of up to 512 tokens: minutes on 2 cores"),
    "actor_rollout_ref.rollout.n": Swap(str(N), "128 x 16 rollouts of up to 512 tokens: minutes on 2 cores"),
    "actor_rollout_ref.actor.ppo_mini_batch_size": Swap(
        str(2 * M),
        "veRL's default 256 is 2 x README's M = 128, so veRL pads each step to 2 x M x n rows "
        "(trainer_base.py:1601, padding_utils.py:165); 2 x the swapped M keeps that, at 32 rows not 1024",
    ),
    "trainer.total_training_steps": Swap("1", "one step: README's line trains for veRL's 30 epochs"),
    "trainer.logger": Swap("[console,file]", "veRL's default wandb needs an account; the test reads a file"),
    "actor_rollout_ref.rollout.agent.num_workers": Swap("1", "veRL's 8 agent-loop actors: a minute, 2 cores"),
    "reward.num_workers": Swap("1", "veRL's 8 reward-loop actors: a minute to start on 2 cores"),
    "coba_cpu.allow_with_cuda": Swap("true", "the same CPU run on a machine that also has a GPU"),
}
#: The keys of README's line the rehearsal replaces (the others of `SWAPS` are added).
REPLACED = {
    "trainer.n_gpus_per_node", "actor_rollout_ref.rollout.name", "actor_rollout_ref.model.path",
    "data.train_files", "data.val_files", "data.train_batch_size", "actor_rollout_ref.rollout.n",
}  # fmt: skip


def readme_command(head: tuple[str, ...]) -> list[str]:
    """The command of README's ``## Launch`` bash blocks that starts with ``head``, continuation lines
    joined, its comment dropped (as tests/test_readme_launch.py reads them)."""
    section = README.split("## Launch", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("  #")[0])
            if tuple(words[: len(head)]) == head:
                return words
    raise AssertionError(f"README's Launch section has no {' '.join(head)} line")


def _key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+")


def rehearsal_command(data: Path, model: Path) -> list[str]:
    """README's ``coba-verl train`` line with `SWAPS` applied, as ``python -m coba_verl.cli`` (the
    ``coba-verl`` console script's function) runs it."""
    line = readme_command(("coba-verl", "train"))
    values = {key: swap.value.format(data=data, model=model) for key, swap in SWAPS.items()}
    kept = [arg if _key(arg) not in values else f"{_key(arg)}={values[_key(arg)]}" for arg in line[2:]]
    added = [key if key.startswith("--") else f"{key}={value}"
             for key, value in values.items() if key not in {_key(a) for a in line[2:]}]  # fmt: skip
    return [sys.executable, "-m", "coba_verl.cli", "train", *added, *kept]


def test_the_rehearsal_swaps_only_the_keys_it_names_and_replaces_only_what_readme_sets():
    line = readme_command(("coba-verl", "train"))
    command = rehearsal_command(Path("/d"), Path("/m"))
    readme_keys = {_key(arg) for arg in line[2:]}
    assert REPLACED <= readme_keys, REPLACED - readme_keys  # README renamed a key the rehearsal swaps
    assert (set(SWAPS) - REPLACED) & readme_keys == set()  # an added key README now sets
    unswapped = [arg for arg in line[2:] if _key(arg) not in SWAPS]
    assert unswapped == [arg for arg in command[4:] if _key(arg) not in SWAPS]  # the rest as printed
    assert unswapped == ["actor_rollout_ref.actor.use_dynamic_bsz=true", "coba.strategy=coba"]
    assert "actor_rollout_ref.rollout.name=hf" in command and "--cpu" in command
    assert len(command) == 4 + len(unswapped) + len(SWAPS)


def write_data(out: Path) -> Path:
    """README's data line (``python -m coba_verl.data gsm8k --output-dir ...``) on local GSM8K-shaped
    rows (question; answer ending ``#### <number>``): M training prompts, 4 held out."""
    line = readme_command(("python", "-m", "coba_verl.data"))
    source = out / "source"
    source.mkdir()
    for split, starts in (("train", range(M)), ("test", range(M, M + 4))):
        rows = [{"question": f"What is {a} plus {a + 1}?", "answer": f"{a} + {a + 1}\n#### {2 * a + 1}"}
                for a in starts]  # fmt: skip
        (source / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = [*line[3:-1], str(out / "gsm8k")] if line[-2] == "--output-dir" else None
    assert args is not None, line
    for split in ("train", "test"):
        args += ["--local-path", f"{split}={source / split}.jsonl"]
    done = subprocess.run([sys.executable, "-m", "coba_verl.data", *args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out / "gsm8k"


def write_model(out: Path) -> Path:
    """A tiny Qwen2 built from scratch (`coba_verl.arithmetic`), positions for veRL's default
    512-token prompts and responses, which the line keeps."""
    from coba_verl.arithmetic.model import ModelSpec, build_model_for
    from coba_verl.arithmetic.tokenizer import chat_tokenizer

    tokenizer = chat_tokenizer()
    model = build_model_for(tokenizer, ModelSpec(max_positions=1024), seed=0)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    return out / "model"


@pytest.mark.e2e
def test_readmes_gpu_line_trains_one_step_through_verls_trainer_on_cpu(tmp_path):
    command = rehearsal_command(write_data(tmp_path), write_model(tmp_path))
    metrics = tmp_path / "metrics.jsonl"
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [row["data"] for row in rows if "timing_s/step" in row["data"]]
    assert [row["step"] for row in rows if "timing_s/step" in row["data"]] == [1]
    (step,) = steps
    assert step["coba/prompts"] == M and step["coba/rollouts"] == M * N and step["coba/budget_mean"] == N
    assert step["coba/trained_rollouts"] == M * N
    assert step["coba/padding_rows"] == M * N  # veRL padded the step to 2 x M x n rows, as on GPUs
    assert step["coba/optimizer_steps"] == 1
    before = [row["data"] for row in rows if row["step"] == 0]
    assert any("val-core/openai/gsm8k/acc/mean@1" in data for data in before)  # veRL's GSM8K scorer ran
