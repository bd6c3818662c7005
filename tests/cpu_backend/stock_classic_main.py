"""``python tests/cpu_backend/stock_classic_main.py --config-path D --config-name N [overrides]``.

veRL's classic ``RayPPOTrainer``, unmodified (rollout.n as configured, no row translation, no
allocator), on coba-verl's CPU backend: the reference run that ``coba.strategy=uniform`` under
``trainer.use_v1=false`` must reproduce. Only the TaskRunner's trainer class differs from
`coba_verl.verl_plugin.classic.CobaTaskRunner`, which also supplies the CPU backend's workers.
"""

from __future__ import annotations

import hydra
import ray
from omegaconf import DictConfig
from verl.trainer.main_ppo import run_ppo
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.device import auto_set_device

from coba_verl.cpu import launcher
from coba_verl.verl_plugin.classic import CobaTaskRunner


@ray.remote
class StockTaskRunner(CobaTaskRunner.__ray_actor_class__):
    trainer_class = RayPPOTrainer


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config: DictConfig) -> None:
    launcher.prepare_cpu_run(config)
    auto_set_device(config)
    run_ppo(config, task_runner_class=StockTaskRunner)


if __name__ == "__main__":
    main()
