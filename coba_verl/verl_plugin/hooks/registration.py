"""Target of the ``verl.plugins`` entry point ``coba_verl``.

``import verl`` imports every ``verl.plugins`` entry point, in every process that imports veRL
(driver, ``TaskRunnerV1`` actor, workers). Importing this module registers the three CoBA
trainers in veRL's trainer registry, one per V1 mode (`verl_names.COBA_MODES`): `CobaTrainer`
as ``trainer.v1.trainer_mode=coba_sync``, `CobaColocateAsyncTrainer` as ``coba_colocate_async``
and `CobaSeparateAsyncTrainer` as ``coba_separate_async``, which is what ``TaskRunnerV1`` looks up
inside its Ray actor, and sets the level of the ``coba_verl`` loggers (``COBA_LOGGING_LEVEL``,
default INFO). Nothing else is registered or patched.

veRL logs plugin import errors at DEBUG level only; ``tests/verl_plugin`` checks in a fresh
interpreter that ``import verl`` leaves the trainer registered.
"""

import logging
import os

from coba_verl.verl_plugin.hooks.trainer import (
    CobaColocateAsyncTrainer,
    CobaSeparateAsyncTrainer,
    CobaTrainer,
)

# veRL sets the root logger to WARNING in every process (verl/__init__.py); coba-verl's INFO lines
# (one per step: budgets, alpha/beta, scores) show through its handlers, as veRL's own loggers do
# with VERL_LOGGING_LEVEL. COBA_LOGGING_LEVEL=WARNING silences them.
_LEVEL = os.environ.get("COBA_LOGGING_LEVEL", "INFO").upper()
try:
    logging.getLogger("coba_verl").setLevel(_LEVEL)
except ValueError:  # an unknown name must not fail the plugin's import (veRL would hide it)
    logging.getLogger("coba_verl").setLevel(logging.INFO)
    logging.getLogger(__name__).warning("COBA_LOGGING_LEVEL=%s is not a logging level; using INFO", _LEVEL)

__all__ = ["CobaColocateAsyncTrainer", "CobaSeparateAsyncTrainer", "CobaTrainer"]
