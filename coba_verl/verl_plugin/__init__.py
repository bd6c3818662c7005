"""CoBA-RL inside veRL 0.9.1's trainers: per-prompt rollout budgets in the V1 sync, colocate_async
and separate_async trainers (through ``__rollout_n__``, with or without DAPO) and in the classic
``RayPPOTrainer`` (as repeated rows).

Modules:
    config_bridge  ``coba`` config node -> `CobaConfig`; the refused veRL configurations.
    dataloader     `CobaDataLoader`: veRL's training loader, checkpointing the allocator in data.pt.
    trainer        `CobaBudgets` in `CobaTrainer` (V1 sync, ``trainer_mode=coba_sync``),
                   `CobaColocateAsyncTrainer` (``coba_colocate_async``) and `CobaSeparateAsyncTrainer`
                   (``coba_separate_async``); the step's rollout ledger.
    replay_buffer  `CobaReplayBuffer` / `CobaReplayBufferAsync`: veRL's buffers, showing the tracker
                   every group they clear; with budgets an update trains exactly M x n rollouts.
    sessions       a V1 group's sessions from its trajectory keys.
    classic        `CobaRayPPOTrainer` and `CobaTaskRunner`: the classic trainer (``trainer.use_v1=false``).
    index_reward   a reward wrapper recording each sample's prompt index (``coba-verl estimate``).
    progress       the step's line and a progress count over veRL's validation loop.
    run_summary    a short summary of a run, read from veRL's file logger.
    registration   target of the ``verl.plugins`` entry point; imports `trainer`.
    main           ``python -m coba_verl.main`` / ``coba-verl train``: checks, then veRL's ``run_ppo``.
    estimate       ``coba-verl estimate``: each training prompt's pass rate, measured by veRL.
    preflight      what the driver checks before Ray starts, and the one-line refusal.

Prompt ids (``extra_info.index`` -> tracker ids) and priors are the shared records'
(`coba_verl.records`), the ``coba/`` metrics the core's (`coba_verl.core.metrics`).

This package file imports nothing heavy; import the submodules you need.
"""

import warnings

# veRL warns on import for every optional engine not installed (torchtitan, veomni, megatron, ...):
# 10 lines before any message of ours, none of them relevant to a run (`coba-verl train` and
# `estimate` import this package before veRL; Ray workers: cpu.launcher).
warnings.filterwarnings("ignore", category=UserWarning, module="verl.workers.engine")
