"""Two CPU processes under ``accelerate launch``: rank 0's budgets on both, every completion generated
once; with TRL's vLLM generation in both modes, every prompt its B_i completions, and resume.

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
VLLM_SCRIPT = Path(__file__).with_name("two_process_vllm_run.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_processes(script: Path, *args: str) -> None:
    """``accelerate launch`` of ``script`` on two CPU processes (module docstring), TRL on their path."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(_free_port()), str(script), *args,
    ]  # fmt: skip
    trl_site = str(Path(trl.__file__).resolve().parents[1])  # where this process found TRL (conftest)
    path = os.pathsep.join(p for p in (trl_site, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.slow
def test_two_processes_expand_rank_zeros_budgets_and_generate_each_completion_once(tmp_path, toy):
    launch_two_processes(SCRIPT, str(tmp_path))
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


def expanded(budgets: dict[str, int]) -> list[int]:
    """The round's rows in order, as prompt ids: B_i rows of each prompt."""
    return [int(pid) for pid, b in budgets.items() for _ in range(b)]


def scored_in(ranks: list[dict], run: str, k: int) -> list[tuple[int, str]]:
    """The (prompt id, completion) pairs both processes scored in round k of ``run``, sorted."""
    return sorted(tuple(pair) for rank in ranks for pair in rank[run]["rounds"][k]["scored"])


def engine_weights(calls: list[dict], version: int) -> set[str]:
    """Digests of the weights the engine held in the calls made after weight sync ``version``."""
    return {call["weights"] for call in calls if call["version"] == version}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["server", "colocate"])
def test_two_processes_with_vllm_give_each_prompt_its_budget_and_resume(tmp_path, toy, tokenizer, mode):
    launch_two_processes(VLLM_SCRIPT, str(tmp_path), mode)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [ranks[r]["full"]["world"] for r in (0, 1)] == [2, 2]

    for run in ("full", "resumed"):
        rounds = [ranks[r][run]["rounds"] for r in (0, 1)]
        assert [x["budgets"] for x in rounds[0]] == [x["budgets"] for x in rounds[1]]
        engines = [ranks[r][run]["calls"] for r in (0, 1)]
        if mode == "server":  # one engine, on the main process, answers the rows of both
            assert engines[1] == []
        for k, (mine, theirs) in enumerate(zip(*rounds, strict=True)):
            budgets = mine["budgets"]
            assert sum(budgets.values()) == len(toy.prompts) * toy.G
            assert mine["rows"] + theirs["rows"] == expanded(budgets)  # rank 0 then rank 1: the round
            scored = mine["scored"] + theirs["scored"]
            assert [pid for pid, _ in scored] == expanded(budgets)
            assert all(completion[0] == toy.prompts[pid][0] for pid, completion in scored)
            # What the engine(s) made this round: B_i completions of prompt i, one request per prompt
            # and n = B_i in server mode, one completion per row in colocate mode.
            calls = [call for calls in engines for call in calls if call["version"] == k + 1]
            made = Counter()
            for call in calls:
                assert call["weights"] == call["trainer_weights"] is not None
                for prompt in call["prompts"]:
                    made[toy.prompts.index(tokenizer.decode(prompt, skip_special_tokens=True))] += call["n"]
            assert made == {int(pid): b for pid, b in budgets.items()}
            if mode == "server":
                assert len({call["n"] for call in calls}) == len(calls)
            else:
                assert len(calls) == 2 and all(call["n"] == 1 and len(call["prompts"]) == 8 for call in calls)

    full, resumed = ranks[0]["full"], ranks[0]["resumed"]
    assert [x["step"] for x in full["rounds"]] == [0, 1, 2, 3]
    assert [x["step"] for x in resumed["rounds"]] == [2, 3]
    assert any(max(x["budgets"].values()) > toy.G for x in full["rounds"][1:]), "budgets must move"
    # The resumed run generates steps 3 and 4 as the uninterrupted one did: the same budgets, from
    # the checkpoint's tracker, and the same completions scored, starting from the checkpoint's
    # weights in the engine. (Past the first epoch TRL's sampler restarts its shuffle on resume, and
    # each round here is one epoch of the four prompts: a resumed round holds its prompts in another
    # order, on other processes, so the weights after a resumed step are not compared.)
    assert [x["budgets"] for x in resumed["rounds"]] == [x["budgets"] for x in full["rounds"][2:]]
    assert [scored_in(ranks, "resumed", k) for k in (0, 1)] == [scored_in(ranks, "full", k) for k in (2, 3)]
    assert (
        engine_weights(resumed["calls"], 1)
        == engine_weights(full["calls"], 3)
        != engine_weights(full["calls"], 2)
    )
    for run in ("full", "resumed"):
        assert ranks[0][run]["final_weights"] == ranks[1][run]["final_weights"]
