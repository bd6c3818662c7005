"""Target of the ``verl.plugins`` entry point ``coba_verl``.

``import verl`` imports every ``verl.plugins`` entry point, in every process that imports veRL
(driver, ``TaskRunnerV1`` actor, workers). Importing this module registers `CobaTrainer` in veRL's
trainer registry under ``trainer.v1.trainer_mode=coba_sync``, which is what ``TaskRunnerV1`` looks
up inside its Ray actor. Nothing else is registered or patched.

veRL logs plugin import errors at DEBUG level only; ``tests/verl_plugin`` checks in a fresh
interpreter that ``import verl`` leaves the trainer registered.
"""

from coba_verl.verl_plugin.trainer import CobaTrainer

__all__ = ["CobaTrainer"]
