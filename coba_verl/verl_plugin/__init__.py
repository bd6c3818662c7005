"""CoBA-RL inside veRL 0.9's V1 trainer: per-prompt rollout budgets through ``__rollout_n__``.

Modules:
    config_bridge  ``coba`` config node -> `CobaConfig`; the refused veRL configurations.
    prompt_ids     ``extra_info.index`` -> dense tracker ids.
    dataloader     `CobaDataLoader`: veRL's training loader, checkpointing the allocator in data.pt.
    metrics        the ``coba/`` scalars logged through veRL's Tracking.
    trainer        `CobaTrainer` (registered as ``trainer.v1.trainer_mode=coba_sync``).
    registration   target of the ``verl.plugins`` entry point; imports `trainer`.

This package file imports nothing heavy; import the submodules you need.
"""
