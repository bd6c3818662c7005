"""The names veRL gives what coba-verl reads and registers, shared by every room of the veRL wing.

The launch checks (`coba_verl.verl_plugin.launch`), the trainer hooks (`coba_verl.verl_plugin.hooks`)
and the run reports (`coba_verl.verl_plugin.reports`) all speak of veRL's metric names and V1
trainer modes; they live here so that no room imports another for a name.
"""

from __future__ import annotations

#: Where veRL's validation puts the held-out metrics the step line shows (``val-core/<source>/.../mean@k``).
HELD_OUT_PREFIX = "val-core/"

#: Name under which `CobaTrainer` is registered in veRL's trainer registry. veRL's trainer base
#: treats every mode other than ``sync`` as asynchronous, so `CobaTrainer` resets the config to
#: ``sync`` before veRL reads it; this name only selects the class in ``TaskRunnerV1``.
COBA_TRAINER_MODE = "coba_sync"

#: The registered CoBA trainer for each veRL V1 mode coba-verl supports (``python -m coba_verl.main``
#: sets ``trainer.v1.trainer_mode`` to it; the trainer sets the veRL name back).
COBA_MODES: dict[str, str] = {
    "sync": COBA_TRAINER_MODE,
    "colocate_async": "coba_colocate_async",
    "separate_async": "coba_separate_async",
}


#: veRL's V1 modes whose generation runs ahead of the update, with partial rollout.
ASYNC_MODES = ("colocate_async", "separate_async")


def coba_mode(mode: str) -> str:
    """The registered CoBA trainer for veRL's V1 ``mode`` (`COBA_MODES`); a CoBA name is itself."""
    return mode if mode in COBA_MODES.values() else COBA_MODES[mode]


def verl_mode(mode: str) -> str:
    """veRL's name of a V1 mode (``coba_separate_async`` -> ``separate_async``; its own are themselves)."""
    return {coba: verl for verl, coba in COBA_MODES.items()}.get(mode, mode)
