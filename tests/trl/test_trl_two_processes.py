"""Two CPU processes under ``accelerate launch``: rank 0's budgets on both, every completion generated once.

``accelerate launch --cpu --num_processes 2`` starts ONE process in accelerate 1.16 (its CPU
launcher spawns several only through mpirun), so the test launches with ``--multi_gpu``, i.e.
torchrun's launcher, and the script trains with ``use_cpu=True``: two processes on gloo.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trl

SCRIPT = Path(__file__).with_name("two_process_run.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_expand_rank_zeros_budgets_and_generate_each_completion_once(tmp_path, toy):
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(_free_port()), str(SCRIPT), str(tmp_path),
    ]  # fmt: skip
    trl_site = str(Path(trl.__file__).resolve().parents[1])  # where this process found TRL (conftest)
    path = os.pathsep.join(p for p in (trl_site, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world"] == ranks[1]["world"] == 2

    # Rank 1's own allocator would move a rollout (two_process_run.py): only rank 0 allocates, and
    # both ranks expand its budgets.
    assert ranks[1]["allocated"] == []
    assert ranks[0]["used"] == ranks[1]["used"] == ranks[0]["allocated"]
    assert len(ranks[0]["used"]) == 3
    # Round 4: rank 0's allocator raised, and rank 1 raised too instead of waiting for its budgets.
    assert ranks[0]["error"] == "ValueError: injected allocator failure"
    assert ranks[1]["error"] == (
        "RuntimeError: CoBA-RL allocation failed on the main process: ValueError: injected allocator failure"
    )

    assert ranks[0]["pass_rates"] == ranks[1]["pass_rates"]
    for step, budgets in enumerate(ranks[0]["used"]):
        budgets = {int(k): v for k, v in budgets.items()}
        assert sum(budgets.values()) == len(toy.prompts) * toy.G
        rows = [ranks[r]["generated"][step] for r in (0, 1)]
        assert len(rows[0]) == len(rows[1]) == len(toy.prompts) * toy.G // 2
        # rank 0 then rank 1 is the round's expanded order: each prompt's B_i rows, once
        expanded = [toy.prompts[i] for i, b in budgets.items() for _ in range(b)]
        assert rows[0] + rows[1] == expanded
        assert Counter(rows[0] + rows[1]) == {toy.prompts[i]: b for i, b in budgets.items()}
    later = [max(b.values()) for b in ranks[0]["used"][1:]]
    assert all(m > toy.G for m in later), "CoBA must move rollouts once pass rates exist"
