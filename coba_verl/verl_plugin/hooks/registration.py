"""Target of the ``verl.plugins`` entry point ``coba_verl``.

``import verl`` imports every ``verl.plugins`` entry point, in every process that imports veRL
(driver, ``TaskRunnerV1`` actor, workers). Importing this module sets the level of the
``coba_verl`` loggers (``COBA_LOGGING_LEVEL``, default INFO) and arranges that the three CoBA
trainers enter veRL's trainer registry, one per V1 mode (`verl_names.COBA_MODES`): `CobaTrainer`
as ``trainer.v1.trainer_mode=coba_sync``, `CobaColocateAsyncTrainer` as ``coba_colocate_async``
and `CobaSeparateAsyncTrainer` as ``coba_separate_async``, which is what ``TaskRunnerV1`` looks up
inside its Ray actor. Nothing else is registered or patched.

The registration waits for veRL's V1 trainer package (`TRAINER_PACKAGE`, where the registry and
``get_trainer_cls`` live): `register_trainers` runs right after that package is imported, or at
once where it already is (`coba_verl.after_import`). A worker that never imports it (the FSDP
actor, the rollout server, the reward worker) no longer imports the trainers and veRL's trainer
stack with them (about a second of CPU each, in each such process). A process that looks a trainer
up has imported the package first, so it finds them registered.

veRL logs plugin import errors at DEBUG level only, and an error of the deferred registration is
logged as an error (`coba_verl.after_import`); ``coba_verl.verl_plugin.main.check_plugin_loaded``
calls `register_trainers` again before Ray starts, so its error stops the launch with its own
message. ``tests/verl_plugin`` checks in a fresh interpreter that the trainer is registered.
"""

import importlib
import logging
import os

from coba_verl.after_import import after_import

__all__ = ["TRAINER_MODULE", "TRAINER_PACKAGE", "register_trainers"]

#: veRL's package holding ``register_trainer`` / ``get_trainer_cls`` (``verl/trainer/ppo/v1``).
TRAINER_PACKAGE = "verl.trainer.ppo.v1"
#: The module whose ``register_trainer`` decorators register the three trainers as it imports.
TRAINER_MODULE = "coba_verl.verl_plugin.hooks.trainer"


def register_trainers() -> None:
    """Import `TRAINER_MODULE` (a no-op once imported); its import errors propagate."""
    importlib.import_module(TRAINER_MODULE)


# veRL sets the root logger to WARNING in every process (verl/__init__.py); coba-verl's INFO lines
# (one per step: budgets, alpha/beta, scores) show through its handlers, as veRL's own loggers do
# with VERL_LOGGING_LEVEL. COBA_LOGGING_LEVEL=WARNING silences them.
_LEVEL = os.environ.get("COBA_LOGGING_LEVEL", "INFO").upper()
try:
    logging.getLogger("coba_verl").setLevel(_LEVEL)
except ValueError:  # an unknown name must not fail the plugin's import (veRL would hide it)
    logging.getLogger("coba_verl").setLevel(logging.INFO)
    logging.getLogger(__name__).warning("COBA_LOGGING_LEVEL=%s is not a logging level; using INFO", _LEVEL)

after_import(TRAINER_PACKAGE, register_trainers)
