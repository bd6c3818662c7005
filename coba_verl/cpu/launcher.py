"""Start-up settings for a veRL run on the CPU backend.

Called by ``python -m coba_verl.main`` before veRL's ``run_ppo`` starts Ray:

- `prepare_cpu_run` (``coba_cpu.enable=true``, the ``coba_cpu=cpu`` group): refuses when CUDA is
  present and ``coba_cpu.allow_with_cuda`` is false; points every process at the ``cpu``
  platform (``VERL_PLATFORM=cpu``) and at `coba_verl.cpu.registration`
  (``VERL_USE_EXTERNAL_MODULES``, which veRL imports on ``import verl``); and makes veRL's own
  ``ray.init`` start Ray with ``num_gpus`` = trainer slots + standalone rollout slots (logical)
  and ``num_cpus`` = ``coba_cpu.ray_num_cpus`` (+ what further slots reserve), so that veRL's
  placement groups fit on a laptop.
"""

from __future__ import annotations

import logging
import os

from omegaconf import DictConfig, OmegaConf, open_dict

from coba_verl.cpu import CHECKPOINT_ENGINE_BACKEND as BACKEND
from coba_verl.cpu import PLATFORM_NAME
from coba_verl.refusal import CobaRefusal

logger = logging.getLogger(__name__)

#: Module veRL imports in every process when named in ``VERL_USE_EXTERNAL_MODULES``.
REGISTRATION_MODULE = "coba_verl.cpu.registration"


def cpu_backend_enabled(config: DictConfig) -> bool:
    """True when the ``coba_cpu`` group is selected (``coba_cpu.enable=true``)."""
    return bool(OmegaConf.select(config, "coba_cpu.enable"))


def _cuda_present() -> bool:
    import torch

    return torch.cuda.is_available()


#: Warnings every veRL process prints on import where an optional engine is not installed
#: (torchtitan, veomni, automodel, mindspeed, megatron): 10 lines a process, none relevant on CPU.
QUIET_WARNINGS = "ignore::UserWarning:verl.workers.engine"


def physical_cores() -> int:
    """Physical CPU cores (logical ones where psutil cannot tell), at least 1."""
    import psutil

    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


def cpu_environment() -> dict[str, str]:
    """Environment every veRL process of a CPU run needs (driver, TaskRunner, Ray workers).

    Besides platform and plugin: ``TQ_NUM_THREADS`` at most the physical cores (TransferQueue's
    default 8 logs ``target_num_threads 8 should not exceed total physical CPU cores`` on every
    put and get of every process, hundreds of lines a step on a laptop), and ``PYTHONWARNINGS``
    silencing the optional-engine import warnings (`QUIET_WARNINGS`). A value the user already
    exported is kept.
    """
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if REGISTRATION_MODULE not in modules:
        modules.append(REGISTRATION_MODULE)
    warnings_spec = ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), QUIET_WARNINGS) if w)
    return {
        "VERL_PLATFORM": PLATFORM_NAME,
        "VERL_USE_EXTERNAL_MODULES": ",".join(modules),
        "TQ_NUM_THREADS": os.environ.get("TQ_NUM_THREADS", str(min(8, physical_cores()))),
        "PYTHONWARNINGS": warnings_spec,
    }


#: Ray settings (read by the raylet from the driver's environment) for a CPU run: no idle Python
#: Logical CPUs veRL's resource pool reserves per trainer slot: each GPU bundle asks for
#: ``max_colocate_count`` = 3 CPUs (``verl/single_controller/ray/base.py:146, 192``).
CPUS_PER_SLOT = 3


def logical_cpus(ray_num_cpus: int, slots: int, rollout_slots: int = 0) -> int:
    """Ray's logical CPUs for ``slots`` trainer slots: ``coba_cpu.ray_num_cpus`` sized for one slot,
    plus `CPUS_PER_SLOT` for each further one, plus `CPUS_PER_ROLLOUT_SLOT` for each slot of a
    standalone rollout pool (`standalone_rollout_slots`). Without them, 8 slots ask for 24 CPUs of
    a 16-CPU Ray and veRL waits for the placement group forever."""
    return ray_num_cpus + CPUS_PER_SLOT * max(slots - 1, 0) + CPUS_PER_ROLLOUT_SLOT * rollout_slots


#: workers prestarted for the first driver (Ray starts one per logical CPU, i.e. ray_num_cpus of
#: them, about 0.3 GiB each, though veRL's actors never use them).
RAY_CPU_ENVIRONMENT = {"RAY_prestart_worker_first_driver": "0"}


#: Logical CPUs of a bundle of a standalone rollout pool (``RolloutReplica.init_standalone`` asks for
#: ``max_colocate_count=2``, ``verl/workers/rollout/replica.py:203``).
CPUS_PER_ROLLOUT_SLOT = 2


def standalone_rollout_slots(config: DictConfig) -> int:
    """Slots of ``separate_async``'s standalone rollout pool (``rollout.nnodes x rollout.n_gpus_per_node``,
    one `HFServer` each), 0 in the other modes; the pool's weights go through the object-store engine.

    ``rollout.checkpoint_engine.backend=naive`` (veRL's default, which ``separate_async`` refuses) is
    set to ``ray_object_store``, the one engine that runs on CPU (`coba_verl.cpu.checkpoint_engine`).

    Raises:
        CobaRefusal: another engine (veRL's need accelerators), or a pool without a slot.
    """
    if not config.trainer.use_v1 or OmegaConf.select(config, "trainer.v1.trainer_mode") != "separate_async":
        return 0
    rollout = config.actor_rollout_ref.rollout
    backend = OmegaConf.select(rollout, "checkpoint_engine.backend")
    if backend == "naive":
        with open_dict(config):
            rollout.checkpoint_engine.backend = BACKEND
        logger.info("CPU backend: separate_async sends weights with checkpoint_engine.backend=%s", BACKEND)
    elif backend != BACKEND:
        raise CobaRefusal(
            f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend} cannot run on the CPU backend; "
            f"separate_async there needs checkpoint_engine.backend={BACKEND} (the default on CPU)."
        )
    slots = int(rollout.nnodes) * int(rollout.n_gpus_per_node)
    if slots < 1:
        raise CobaRefusal(
            f"actor_rollout_ref.rollout.nnodes={rollout.nnodes} x n_gpus_per_node={rollout.n_gpus_per_node}: "
            "separate_async needs a standalone rollout pool of at least one slot (one hf server each), "
            "e.g. actor_rollout_ref.rollout.nnodes=1 actor_rollout_ref.rollout.n_gpus_per_node=1."
        )
    return slots


def cluster_address(config: DictConfig) -> str | None:
    """The address of the running Ray cluster veRL's ``ray.init`` will join, None where it starts one.

    Ray's own rule, applied by the function ``ray.init`` calls (``canonicalize_bootstrap_address``,
    ``ray/_private/worker.py:1838``, ``ray/_private/services.py:686-721``): the address given
    (``ray_kwargs.ray_init.address``), else ``RAY_ADDRESS``, else the cluster the last
    ``ray start --head`` on this machine recorded; ``local`` (and nothing recorded) starts a fresh
    one. A Ray Client address (``ray://``) joins the cluster behind it.

    Raises:
        CobaRefusal: an address Ray cannot use (``auto`` with no cluster running, a malformed one).
    """
    from ray._private import services

    given = OmegaConf.select(config, "ray_kwargs.ray_init.address")
    named = given or os.environ.get("RAY_ADDRESS") or ""
    if named.startswith("ray://"):
        return named
    temp_dir = OmegaConf.select(config, "ray_kwargs.ray_init._temp_dir")
    try:
        return services.canonicalize_bootstrap_address(given, temp_dir)
    except (ConnectionError, ValueError) as error:
        where = f"ray_kwargs.ray_init.address={given}" if given else f"RAY_ADDRESS={named}"
        raise CobaRefusal(
            f"{where}: Ray cannot join a cluster there ({error}). Give the <ip>:<port> that "
            "`ray start --head` printed, or RAY_ADDRESS=local for a Ray of this run's own."
        ) from error


def prepare_cpu_run(config: DictConfig) -> None:
    """Refuse an accidental CPU run on a GPU machine, then set platform, plugins and Ray counts.

    Ray's counts are set only where veRL's ``ray.init`` starts Ray (`cluster_address` is None); a
    run that joins a cluster runs on the resources its nodes were started with (``ray start
    --num-gpus``: ``trainer.n_gpus_per_node`` logical GPUs on each node), and Ray refuses
    ``num_cpus`` / ``num_gpus`` there (``ray/_private/worker.py:1936-1940``).

    Raises:
        CobaRefusal: CUDA is available and ``coba_cpu.allow_with_cuda`` is false; a setting of the
            ``coba_cpu`` group was overridden to something veRL cannot run on CPU;
            ``separate_async`` with another checkpoint engine or no rollout slot (`standalone_rollout_slots`);
            a Ray address Ray cannot use (`cluster_address`).
    """
    if _cuda_present() and not config.coba_cpu.allow_with_cuda:
        raise CobaRefusal(
            "coba_cpu.enable=true (the CPU backend) was selected on a machine where torch sees CUDA. "
            "Drop +coba_cpu=cpu to train on the GPU, or set coba_cpu.allow_with_cuda=true to run on CPU "
            "anyway."
        )
    poll = OmegaConf.select(config, "coba_cpu.poll_interval_s")
    if poll is not None and not (isinstance(poll, int | float) and not isinstance(poll, bool) and poll > 0):
        raise CobaRefusal(
            f"coba_cpu.poll_interval_s={poll} must be a number of seconds > 0, or null for veRL's 2.0 s."
        )
    expected = {
        "trainer.device": "cpu",
        "actor_rollout_ref.rollout.name": "hf",
        "actor_rollout_ref.actor.strategy": "fsdp2",
    }
    for key, value in expected.items():
        got = OmegaConf.select(config, key)
        if got != value:
            raise CobaRefusal(f"{key}={got} cannot run on the CPU backend; it needs {key}={value}.")
    rollout_slots = standalone_rollout_slots(config)

    env = cpu_environment()
    os.environ.update(env)
    for key, value in RAY_CPU_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    import verl.plugin.platform.platform_manager as platform_manager

    import coba_verl.cpu.registration  # noqa: F401  (this process: platform, engine, rollout)
    from coba_verl.cpu.platform import PlatformCPU

    if platform_manager._current_platform is None or platform_manager._current_platform.device_name != "cpu":
        platform_manager.set_platform(PlatformCPU())

    slots = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    address = cluster_address(config)
    with open_dict(config):
        ray_init = config.ray_kwargs.ray_init
        env_vars = OmegaConf.select(ray_init, "runtime_env.env_vars") or {}
        ray_init.runtime_env.env_vars = {**env_vars, **env}
        if address is not None:
            logger.info(
                "CPU backend: joining the Ray cluster at %s, whose nodes must offer %d logical GPUs "
                "(trainer.n_gpus_per_node=%s on each of trainer.nnodes=%s nodes, plus %d standalone rollout "
                "slots); %s",
                address,
                slots + rollout_slots,
                config.trainer.n_gpus_per_node,
                config.trainer.nnodes,
                rollout_slots,
                env,
            )
            return
        ray_init.num_cpus = max(
            int(ray_init.num_cpus or 0),
            logical_cpus(int(config.coba_cpu.ray_num_cpus), slots, rollout_slots),
        )
        ray_init.num_gpus = slots + rollout_slots
        if OmegaConf.select(ray_init, "include_dashboard") is None:
            # Ray's dashboard and its agents take a few CPU seconds at start and a share of 2 cores
            # after: off for the Ray this launcher starts unless asked for
            # (+ray_kwargs.ray_init.include_dashboard=true).
            ray_init.include_dashboard = False
    logger.info(
        "CPU backend: Ray with %d logical CPUs, %d trainer slots and %d standalone rollout slots; %s",
        ray_init.num_cpus,
        slots,
        rollout_slots,
        env,
    )
