"""``python -m coba_verl.main``: veRL's ``python -m verl.trainer.main_ppo`` with the CoBA-RL trainer.

The command's code (`coba_verl.main` only names it, so that launch lines stay short).

The config is veRL's ``ppo_trainer`` plus the ``coba`` group (``coba_verl/config/coba_trainer.yaml``),
so every veRL override works unchanged and every `CobaConfig` field is one more override::

    python -m coba_verl.main data.train_files=... actor_rollout_ref.model.path=... \\
        actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=16 coba.strategy=coba coba.kappa=11

The run goes through veRL's own ``run_ppo``. With ``trainer.use_v1=true`` (veRL's default) it is
``TaskRunnerV1``, and ``trainer.v1.trainer_mode=coba_sync`` makes it build `CobaTrainer`; with
``trainer.use_v1=false`` it is `CobaTaskRunner` (veRL's classic TaskRunner building
`CobaRayPPOTrainer`), after the row translation of `translate_config`. Either way the refusals
of `check_config`, the mandatory values (``???``) of veRL's config that the run reads and the launch
leaves unset (`coba_verl.verl_plugin.launch.mandatory_values`: ``actor_rollout_ref.rollout.name``),
the input checks of `coba_verl.verl_plugin.launch.preflight` (data files
through the check of ``python -m coba_verl.data check``, ``extra_info.index`` among them, the model folder,
the checkpoint a resume would continue) and the plugin check come before Ray starts, and a refusal
(`coba_verl.refusal.CobaRefusal`, raised here or in a Ray actor) prints as one line,
``coba-verl: <message>``, with exit status 2.
"""

from __future__ import annotations

import importlib
import logging
import os

import hydra
from omegaconf import DictConfig, open_dict

from coba_verl.core import CobaConfig
from coba_verl.refusal import CobaRefusal, exit_on_refusal
from coba_verl.verl_plugin.launch import mandatory_values, preflight
from coba_verl.verl_plugin.launch.config_bridge import check_config
from coba_verl.verl_plugin.verl_names import COBA_TRAINER_MODE, coba_mode

logger = logging.getLogger(__name__)


#: Name of our entry point in the ``verl.plugins`` group (see pyproject.toml).
PLUGIN_NAME = "coba_verl"
#: The module that entry point loads.
PLUGIN_MODULE = "coba_verl.verl_plugin.hooks.registration"


def check_plugin_loaded(mode: str = COBA_TRAINER_MODE) -> None:
    """Refuse to start when veRL's processes would not find `CobaTrainer` by name.

    ``TaskRunnerV1`` looks the trainer up inside its own Ray process, where only the
    ``verl.plugins`` entry point (installed with the package, loaded by ``import verl`` under
    ``VERL_USE_EXTERNAL_PLUGINS``) registers it. This process imported veRL under the same
    environment, so veRL's own registry answers for them; nothing here imports `CobaTrainer`.
    """
    import verl
    from verl.trainer.ppo.v1 import get_trainer_cls

    try:
        get_trainer_cls(mode)
    except ValueError:
        # veRL logs a plugin's import error at DEBUG only (verl/__init__.py) and the plugin's deferred
        # registration logs its own: register here so that its error (e.g. check_verl_api's version
        # mismatch) reaches the user as the refusal.
        try:
            importlib.import_module(PLUGIN_MODULE).register_trainers()
        except Exception as error:
            raise CobaRefusal(
                f"coba-verl's veRL plugin ({PLUGIN_MODULE}) cannot be imported, so veRL {verl.__version__} "
                f"could not register the trainer '{mode}': {type(error).__name__}: {error}"
            ) from error
        policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto")
        raise CobaRefusal(
            f"veRL {verl.__version__} has no trainer '{mode}' after loading its plugins, so "
            "its TaskRunner could not build the CoBA-RL trainer. Either "
            f"VERL_USE_EXTERNAL_PLUGINS={policy} keeps veRL from loading the '{PLUGIN_NAME}' entry point "
            f"(unset it, or add {PLUGIN_NAME} to its list), "
            "or the package is not installed with its verl.plugins entry point in the environment Ray "
            "workers use (pip install -e . in a clone)."
        ) from None


def prepare_config(config: DictConfig) -> CobaConfig:
    """Everything ``main`` does before Ray: refusals, veRL's validate_config, trainer selection.

    Returns the `CobaConfig`. V1: ``config.trainer.v1.trainer_mode`` is set to ``coba_sync``;
    classic: the config is translated to rows (`coba_verl.verl_plugin.hooks.classic.translate_config`).
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    if not config.trainer.use_v1:
        from coba_verl.verl_plugin.hooks.classic import translate_config

        translate_config(config)  # before validate_config, which must see the rows veRL will build
    coba_config = check_config(config)
    validate_config(
        config=config,
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    if config.trainer.use_v1:
        with open_dict(config):
            config.trainer.v1.trainer_mode = coba_mode(config.trainer.v1.trainer_mode)
    return coba_config


def run(config: DictConfig) -> None:
    """Check, then hand over to veRL's ``run_ppo`` with its own ``TaskRunnerV1``.

    Raises:
        CobaRefusal: a refusal of coba-verl's checks, before Ray starts.
    """
    from coba_verl.cpu import launcher

    # ours first, before veRL's TaskRunner, workers and Ray
    with mandatory_values.named_when_read(config):  # a check that meets a ??? value names them all
        check_config(config)  # also valid before translate_config: it reads the user's M and n
    mandatory_values.check_mandatory_values(config)  # e.g. actor_rollout_ref.rollout.name
    preflight.check_trl_conflict(config)
    if launcher.cpu_backend_enabled(config):
        launcher.prepare_cpu_run(config)  # before anything asks veRL for its platform
    else:
        preflight.check_accelerator(config)  # no GPU: say so before asking for data
    preflight.place_checkpoints(config)
    preflight.check_inputs(config)
    preflight.warn_resume(config)

    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    coba_config = prepare_config(config)  # checks again, silently (`check_config`)
    if config.trainer.use_v1:
        check_plugin_loaded(config.trainer.v1.trainer_mode)
    logger.info("CoBA-RL: %s", coba_config)
    if config.trainer.use_v1:
        run_ppo(config, task_runner_class=TaskRunnerV1)
    else:
        from coba_verl.verl_plugin.hooks.classic import CobaTaskRunner

        run_ppo(config, task_runner_class=CobaTaskRunner)


@hydra.main(config_path="../config", config_name="coba_trainer", version_base=None)
def main(config: DictConfig) -> None:
    """Hydra entry point: ``python -m coba_verl.main [overrides...]`` (also ``coba-verl train``).

    A `CobaRefusal` (raised here, or inside a Ray actor and carried back by Ray) is printed as
    one line, ``coba-verl: <message>``, on stderr, exit status 2; every other error keeps its
    traceback.
    """
    with exit_on_refusal():
        run(config)


if __name__ == "__main__":
    main()
