"""CoBA-RL inside veRL 0.9.1's trainers: per-prompt rollout budgets in the V1 sync, colocate_async
and separate_async trainers (through ``__rollout_n__``, with or without DAPO) and in the classic
``RayPPOTrainer`` (as repeated rows).

The wing's rooms, named for when their code runs:

    launch/     before Ray starts (and again in the trainer's constructor): the ``coba`` node ->
                `CobaConfig` and the veRL configurations refused (`config_bridge`), veRL's own
                start-up conditions checked before Ray (`verl_start` refuses them in one line:
                every trainer's in `trainer_start`, ``separate_async``'s in `separate_async_start`,
                the checkpoint engines that load here in `checkpoint_engines`; gated by
                `verl_code`'s source digests), the driver's input checks (`preflight`).
    hooks/      inside veRL's trainers, every step: `CobaBudgets` and the registered trainers
                (`trainer`, `registration` is the ``verl.plugins`` entry point), the replay buffers
                (`replay_buffer`, `async_replay_buffer`), each session's fate (`session_fates`),
                the step's counts (`step_counts`), the group weight in veRL's advantage pass
                (`advantage`), the loader carrying the allocator (`dataloader`), the classic trainer
                (`classic`), a group's sessions (`sessions`), the step line (`progress`), the veRL
                code they rely on (`verl_guards`).
    reports/    after a run, from veRL's file logger: `run_summary` and its pictures (`run_plots`),
                both reading `metrics_file`.

At the door: `main` (``python -m coba_verl.main`` / ``coba-verl train``: the launch checks, then
veRL's ``run_ppo``), `estimate` (``coba-verl estimate``, and the reward function it wraps around the
run's own), and `verl_names` (the veRL names every room reads). tests/test_layers.py holds the
rooms to their arrows: launch imports no other room, hooks import launch (the trainer repeats its
checks), reports import neither.

Prompt ids (``extra_info.index`` -> tracker ids) and priors are the shared records'
(`coba_verl.records`), the ``coba/`` metrics the core's (`coba_verl.core.metrics`).

This package file imports nothing heavy; import the submodules you need.
"""

import warnings

# veRL warns on import for every optional engine not installed (torchtitan, veomni, megatron, ...):
# 10 lines before any message of ours, none of them relevant to a run (`coba-verl train` and
# `estimate` import this package before veRL; Ray workers: cpu.launcher).
warnings.filterwarnings("ignore", category=UserWarning, module="verl.workers.engine")
