"""What ``python -m coba_verl.main`` checks before Ray starts, and how it reports its refusals.

Ray takes half a minute to start and then hides an early mistake under worker logs, so the
driver looks first, with nothing heavier than pyarrow:

- `check_trl_conflict`: an FSDP run where TRL 1.16 is importable (veRL's FSDP engine imports a
  class TRL has removed) stops before Ray starts, not minutes later in every actor worker.
- `check_accelerator`: a GPU recipe that would start a fresh Ray on a machine without GPUs stops
  at once with a message, instead of waiting forever for a placement group Ray cannot satisfy; a
  launch that attaches to a running Ray cluster (the head of a multi-node run) goes on
  (`ray_starts_fresh`: Ray's own rule for what ``ray.init()`` attaches to).
- `place_checkpoints`: ``trainer.default_local_dir: null`` (the tiny CPU recipe) puts
  checkpoints next to the training data, one folder per experiment::

      data.train_files=/d/tiny_cpu/train.parquet, experiment tiny-cpu
        -> /d/tiny_cpu/checkpoints/tiny-cpu

- `check_inputs`: every local data file, a local-looking model path and ``coba.prior_file``
  exist (the tiny recipe's message names ``python -m coba_verl.arithmetic.tiny``), the prior file
  reads through the trainer's own reader (`coba_verl.records.priors.read_prior_file`: every line
  a JSON record with valid counts or pass rate), and the data files pass the check of
  ``python -m coba_verl.data check`` (`coba_verl.data.check_files`, the
  one home of those rules): parquet, with rows and the columns veRL reads, and training rows
  whose ``extra_info.index`` values follow `coba_verl.records.prompt_ids.INDEX_RULE` (CoBA-RL keys
  pass rates by them), duplicates included.
- `warn_resume`: veRL's ``resume_mode=auto`` resumes the latest checkpoint under
  ``trainer.default_local_dir`` and says so at INFO only; this says it at WARNING, with the
  step, the folder and how to start fresh. Whether the checkpoint was written for the same
  prompts and model is checked where its state is read (`CobaDataLoader.load_coba_state`).

Each check refuses with a `coba_verl.refusal.CobaRefusal`, which the entry points print as one
line, ``coba-verl: <message>``, exit status 2 (`coba_verl.refusal.exit_on_refusal`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from coba_verl.core.config import CobaConfig
from coba_verl.records.priors import read_prior_file
from coba_verl.records.saved_state import local_model_path
from coba_verl.refusal import CobaRefusal

__all__ = [
    "check_accelerator",
    "check_data_files",
    "check_inputs",
    "check_trl_conflict",
    "data_files",
    "is_remote",
    "place_checkpoints",
    "ray_starts_fresh",
    "warn_resume",
]

logger = logging.getLogger(__name__)

#: The reward path that marks the tiny CPU recipe (its data come from `coba_verl.arithmetic.tiny`).
TINY_REWARD_PATH = "pkg://coba_verl.arithmetic.tiny"
#: Where a run without GPUs can go instead.
CPU_RECIPE_HINT = (
    "To see the pipeline run on CPU, use the tiny CPU recipe (python -m coba_verl.arithmetic.tiny, then "
    "bash recipes/tiny_cpu/run.sh) or add +coba_cpu=cpu to a config for a tiny model."
)
#: veRL's checkpoint tracker file inside ``trainer.default_local_dir``.
TRACKER_FILE = "latest_checkpointed_iteration.txt"


def ray_starts_fresh(config: DictConfig) -> bool:
    """Whether veRL's ``ray.init(**ray_kwargs.ray_init)`` would start a fresh Ray on this machine,
    rather than attach to a running cluster, decided by Ray's own rule
    (``ray/_private/services.py``: ``canonicalize_bootstrap_address``, ``get_ray_address_from_environment``):

    - ``ray_kwargs.ray_init.address``, else ``RAY_ADDRESS`` when set and not empty: ``local`` is a
      fresh Ray, any other address (a ``ray://`` client's included) a cluster's;
    - none (or ``auto``): the cluster of the latest ``ray start`` on this machine, whose address Ray
      reads from ``<temp dir>/ray_current_cluster`` (``ray_init._temp_dir``, else Ray's default:
      ``$RAY_TMPDIR/ray``, ``$TMPDIR/ray``, ``/tmp/ray``); a fresh Ray where there is none.

    The last case is Ray's private function's to decide; a Ray without it is refused, not guessed.

    Raises:
        CobaRefusal: no address is set and this Ray has no ``canonicalize_bootstrap_address``.
    """
    ray_init = OmegaConf.select(config, "ray_kwargs.ray_init") or {}
    address = ray_init.get("address") or None
    effective = address if address not in (None, "auto") else os.environ.get("RAY_ADDRESS") or address
    if effective not in (None, "auto"):
        return str(effective) == "local"
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError as error:
        import ray

        raise CobaRefusal(
            f"cannot tell whether ray.init() starts a fresh Ray here or attaches to a cluster started with "
            f"ray start: no address is set, and this Ray ({ray.__version__}) has no "
            f"ray._private.services.canonicalize_bootstrap_address, the rule coba-verl asks ({error}). Set "
            "+ray_kwargs.ray_init.address to the cluster's address (or RAY_ADDRESS), or to local for a "
            "fresh Ray on this machine."
        ) from None
    try:
        return canonicalize_bootstrap_address(address, ray_init.get("_temp_dir")) is None
    except (ConnectionError, ValueError):
        return False


def check_accelerator(config: DictConfig) -> None:
    """Refuse a GPU run that would start a fresh Ray on a machine without GPUs (it would wait forever).

    A run that attaches to a running Ray cluster is left to veRL, its GPUs may be on other nodes:
    ``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS`` naming one, or neither set on a machine where
    ``ray start`` has started one (the launch of docs/recipes.md: ``ray start`` on every node,
    then the launcher on the head). Which one ``ray.init()`` does is Ray's rule (`ray_starts_fresh`);
    ``RAY_ADDRESS=local`` is a fresh Ray.

    Raises:
        CobaRefusal: no CUDA/NPU device is visible and ``ray.init()`` would start a fresh Ray, or
            where it would start cannot be told (`ray_starts_fresh`).
    """
    import torch
    from verl.utils.device import is_npu_available

    if torch.cuda.is_available() or is_npu_available:
        return
    if not ray_starts_fresh(config):
        return
    why = (
        "RAY_ADDRESS=local starts a fresh Ray here"
        if os.environ.get("RAY_ADDRESS") == "local"
        else "ray.init() would start a fresh Ray here (no RAY_ADDRESS, no ray_kwargs.ray_init.address, "
        "and no cluster started on this machine with ray start)"
    )
    raise CobaRefusal(
        f"no GPU found: torch sees no CUDA device, {why}, and this run asks for trainer.n_gpus_per_node="
        f"{config.trainer.n_gpus_per_node} x trainer.nnodes={config.trainer.nnodes} GPUs with rollout "
        f"'{config.actor_rollout_ref.rollout.name}'. Ray would wait forever for them. On a cluster, run "
        "ray start on every node first (docs/recipes.md), or set RAY_ADDRESS to the head's address. "
        f"{CPU_RECIPE_HINT}"
    )


def check_trl_conflict(config: DictConfig) -> None:
    """Refuse an FSDP run where a TRL without the PPO value head is importable.

    veRL 0.9.1's FSDP engine imports ``AutoModelForCausalLMWithValueHead`` from TRL whenever TRL
    is installed (``verl/models/transformers/monkey_patch.py``); TRL 1.16 has removed it, so every
    actor worker would fail to build, minutes into the run, inside Ray.

    Raises:
        CobaRefusal: naming the TRL version and what to do.
    """
    import importlib.util

    if OmegaConf.select(config, "actor_rollout_ref.actor.strategy") not in ("fsdp", "fsdp2"):
        return
    if importlib.util.find_spec("trl") is None:
        return
    import trl

    if hasattr(trl, "AutoModelForCausalLMWithValueHead"):
        return
    try:  # where veRL looks first
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401

        return
    except ImportError:
        pass
    raise CobaRefusal(
        f"TRL {trl.__version__} is installed in this environment: veRL 0.9.1's FSDP engine imports TRL's "
        "AutoModelForCausalLMWithValueHead whenever TRL is importable, and this TRL no longer has it, so "
        "every actor worker would fail to build. Train with veRL from an environment without TRL "
        "(pip uninstall trl; coba-verl's TRL integration belongs in a separate environment)."
    )


def data_files(value: Any) -> list[str]:
    """``data.train_files`` / ``data.val_files`` as a list of strings (a str or a list in veRL)."""
    if value is None:
        return []
    if isinstance(value, ListConfig | list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def is_remote(path: str) -> bool:
    return "://" in path  # hdfs://, s3://, ...: veRL copies them; nothing to check here


def _is_tiny(config: DictConfig) -> bool:
    return OmegaConf.select(config, "reward.custom_reward_function.path") == TINY_REWARD_PATH


def place_checkpoints(config: DictConfig) -> None:
    """``trainer.default_local_dir: null`` -> ``<first training file's folder>/checkpoints/<experiment>``."""
    if OmegaConf.select(config, "trainer.default_local_dir") is not None:
        return
    train = data_files(config.data.train_files)
    if not train or is_remote(train[0]):
        raise CobaRefusal(
            f"trainer.default_local_dir=null puts checkpoints next to data.train_files, but "
            f"data.train_files={train} has no local folder; set trainer.default_local_dir."
        )
    data_dir = Path(train[0]).expanduser().resolve().parent
    folder = data_dir / "checkpoints" / str(config.trainer.experiment_name)
    with open_dict(config):
        config.trainer.default_local_dir = str(folder)
    logger.info("checkpoints: %s", folder)


def _missing_file_message(key: str, path: str, config: DictConfig) -> str:
    if _is_tiny(config):
        folder = Path(path).expanduser().parent
        return (
            f"{key}={path} does not exist. Write the tiny CPU recipe's data and model first: "
            f"python -m coba_verl.arithmetic.tiny --output-dir {folder}"
        )
    return (
        f"{key}={path} does not exist. Prepare it (e.g. python -m coba_verl.data <dataset> --output-dir "
        f"DIR, see python -m coba_verl.data --help) or point {key} at an existing parquet file."
    )


def check_data_files(config: DictConfig) -> None:
    """Refuse missing or unusable training and validation files (the data part of `check_inputs`).

    The contents are checked by `coba_verl.data.check_files` (what ``python -m coba_verl.data
    check`` runs), without scoring the gold answers (a run may bring its own reward function):
    the training files together as training rows, the validation files as evaluation rows. Remote
    files (``hdfs://``, ``s3://``) are left to veRL.

    Raises:
        CobaRefusal: naming the file (and the row) and the fix.
    """
    from coba_verl.data.checks import FILE_RULES, check_files

    prompt_key = str(OmegaConf.select(config, "data.prompt_key", default="prompt"))
    source_key = str(OmegaConf.select(config, "data.reward_fn_key", default="data_source"))
    for key, training in (("data.train_files", True), ("data.val_files", False)):
        paths = [path for path in data_files(OmegaConf.select(config, key)) if not is_remote(path)]
        for path in paths:
            if not Path(path).expanduser().is_file():
                raise CobaRefusal(_missing_file_message(key, path, config))
        problems = check_files(
            paths, score_gold=False, training=training, prompt_key=prompt_key, data_source_key=source_key
        )
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CobaRefusal(
                f"{key}: {problems[0].rstrip('.')}{more}. {FILE_RULES} python -m coba_verl.data check "
                f"{' '.join(paths)} lists every problem; python -m coba_verl.data writes such files."
            )


def check_inputs(config: DictConfig) -> None:
    """Refuse missing or unusable data files (`check_data_files`), a missing local model, and a
    prior file that is missing or that the trainer's reader (`read_prior_file`) refuses: a line
    that is not a JSON record, a pass rate outside [0, 1], counts that are no successes/attempts.
    Whether its indices are the training set's is left to the trainer, which holds the dataset.

    Raises:
        CobaRefusal: naming the file (and the row) and the fix.
    """
    check_data_files(config)
    model = str(OmegaConf.select(config, "actor_rollout_ref.model.path"))
    local = local_model_path(model)
    if local is not None and not (local / "config.json").is_file():
        what = "does not exist" if not local.exists() else "has no config.json"
        fix = (
            "Write the tiny CPU recipe's data and model first: "
            f"python -m coba_verl.arithmetic.tiny --output-dir {local.parent}"
            if _is_tiny(config)
            else "Point it at a model folder (with config.json) or a hub id such as Qwen/Qwen2.5-7B-Instruct."
        )
        raise CobaRefusal(f"actor_rollout_ref.model.path={model} {what}. {fix}")
    prior_file = OmegaConf.select(config, "coba.prior_file")
    if prior_file is not None:
        weight = OmegaConf.select(config, "coba.prior_weight", default=CobaConfig.prior_weight)
        read_prior_file(str(prior_file), int(weight), "coba.prior_file")


def warn_resume(config: DictConfig) -> None:
    """Log at WARNING the checkpoint veRL will resume (step and folder) and how to start fresh instead."""
    trainer = config.trainer
    mode = str(trainer.resume_mode)
    if mode == "disable":
        return
    if mode == "resume_path" and trainer.resume_from_path:
        folder = Path(str(trainer.resume_from_path)).expanduser()
    else:
        base = Path(str(trainer.default_local_dir)).expanduser()
        tracker = base / TRACKER_FILE
        if not tracker.is_file():
            return
        folder = base / f"global_step_{int(tracker.read_text().strip())}"
        if not folder.is_dir():
            return
    logger.warning(
        "resuming from step %s of %s (trainer.resume_mode=%s): the model, optimizer, data position and "
        "CoBA-RL pass rates continue from there. Set trainer.resume_mode=disable to start fresh, or "
        "another trainer.experiment_name / trainer.default_local_dir.",
        folder.name.removeprefix("global_step_"),
        folder,
        mode,
    )
