"""Hydra configs: ``coba_trainer`` (veRL ppo_trainer + the ``coba`` group) and ``coba/default``."""
