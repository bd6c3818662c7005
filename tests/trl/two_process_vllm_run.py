"""CoBA rounds through TRL's vLLM generation on two CPU processes, then a resume; run by
``test_trl_two_processes.py`` as

    accelerate launch --multi_gpu --num_processes 2 tests/trl/two_process_vllm_run.py OUT_DIR MODE

with MODE ``server`` or ``colocate`` (``--multi_gpu`` selects torchrun's launcher; training runs with
``use_cpu=True``). The engine is conftest.py's recording stand-in behind TRL's own
``VLLMGeneration`` (`install_fake_vllm`): in server mode one, on the main process, answers the rows
of both; in colocate mode each process has its own.

Two runs: ``full`` trains 4 steps and checkpoints after 2; ``resumed`` is a new trainer resuming from
that checkpoint. Each process writes ``OUT_DIR/rank<r>.json`` holding, per run, its rounds (the step
they were generated at, the budgets as {prompt id: B_i}, this process's rows as prompt ids, and the
(prompt id, completion) pairs its reward function scored), the calls its engine recorded (none on
rank 1 in server mode) and the digest of the final weights. The four prompts and rewards are the
ones of ``conftest.py`` (this script's folder is first on ``sys.path``); each round has 16 rows, 8
per process.

One harness detail: resuming on several CPU processes, transformers 5.10 loads the optimiser state
with ``map_location=args.device``, which is ``cpu:<index>`` there, and torch cannot restore storage
to that location name (on GPUs it is ``cuda:<rank>`` and loads). `cpu_map_location` maps it to ``cpu``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from conftest import (
    PROMPTS,
    TINY,
    G,
    cpu_grpo_config,
    four_prompts,
    install_fake_vllm,
    mixed_reward,
    weights_digest,
)

from coba_verl.arithmetic.model import build_model_for
from coba_verl.arithmetic.tokenizer import transformers_tokenizer
from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer

MAX_STEPS = 4
CHECKPOINT = 2


def cpu_map_location(load: Any) -> Any:
    """``torch.load`` with a ``cpu:<index>`` map_location read as ``cpu`` (module docstring)."""

    def wrapped(*args: Any, map_location: Any = None, **kwargs: Any) -> Any:
        if isinstance(map_location, (str, torch.device)) and torch.device(map_location).type == "cpu":
            map_location = "cpu"
        return load(*args, map_location=map_location, **kwargs)

    return wrapped


def run(out_dir: Path, mode: str, engines: list, name: str, resume_from: str | None = None) -> dict[str, Any]:
    tokenizer = transformers_tokenizer()
    config = cpu_grpo_config(
        out_dir / name,
        per_device_train_batch_size=len(PROMPTS) * G // 2,
        max_steps=MAX_STEPS,
        save_strategy="steps",
        save_steps=CHECKPOINT,
        use_vllm=True,
        vllm_mode=mode,
    )
    scored: list[list[tuple[int, str]]] = []

    def recorded_reward(completions, prompt_id, **kwargs):
        scored.append(list(zip(prompt_id, completions, strict=True)))
        return mixed_reward(completions, prompt_id, **kwargs)

    before = len(engines)
    trainer = CobaGRPOTrainer(
        model=build_model_for(tokenizer, TINY, seed=0),
        reward_funcs=recorded_reward,
        args=config,
        train_dataset=four_prompts(),
        processing_class=tokenizer,
        coba_config=CobaConfig(max_rollouts=10),
    )
    engine = engines[before] if len(engines) > before else None  # none on rank 1 in server mode
    if engine is not None:
        engine.trainer_model = trainer.model
    rounds: list[dict[str, Any]] = []
    plan_round = trainer._plan_round

    def plan_spy(inputs):
        plan = plan_round(inputs)
        rounds.append(
            {
                "step": trainer.state.global_step,
                "budgets": dict(zip(plan.ids.tolist(), plan.allocation.budgets.tolist(), strict=True)),
                "rows": [row["prompt_id"] for row in plan.local_rows],
            }
        )
        return plan

    trainer._plan_round = plan_spy
    trainer.train(resume_from_checkpoint=resume_from)
    for record, pairs in zip(rounds, scored, strict=True):
        record["scored"] = pairs
    trainer.accelerator.wait_for_everyone()  # the checkpoint is complete before anyone resumes from it
    return {
        "rounds": rounds,
        "calls": [] if engine is None else engine.calls,
        "final_weights": weights_digest(trainer.model.named_parameters()),
        "world": trainer.accelerator.num_processes,
        "rank": trainer.accelerator.process_index,
    }


def main(out_dir: Path, mode: str) -> None:
    engines = install_fake_vllm(setattr, transformers_tokenizer().eos_token_id)
    torch.load = cpu_map_location(torch.load)
    full = run(out_dir, mode, engines, "full")
    resumed = run(out_dir, mode, engines, "resumed", str(out_dir / "full" / f"checkpoint-{CHECKPOINT}"))
    (out_dir / f"rank{full['rank']}.json").write_text(json.dumps({"full": full, "resumed": resumed}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
