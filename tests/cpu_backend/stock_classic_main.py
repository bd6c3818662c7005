"""``python tests/cpu_backend/stock_classic_main.py --config-path D --config-name N [overrides]``.

veRL's classic ``TaskRunner`` and ``RayPPOTrainer``, unmodified (rollout.n as configured, no row
translation, no allocator; veRL's own ``TaskRunner.run``), on coba-verl's CPU backend: the
reference run that ``coba.strategy=uniform`` under ``trainer.use_v1=false`` must reproduce. The
one addition is the CPU backend's gloo workers, added to the worker mapping as
`coba_verl.verl_plugin.hooks.classic.CobaTaskRunner` adds them.
"""

from __future__ import annotations

from typing import Any

import hydra
import ray
from omegaconf import DictConfig, OmegaConf
from verl.trainer.main_ppo import run_ppo
from verl.trainer.main_ppo_v0 import TaskRunner
from verl.utils.device import auto_set_device

from coba_verl.cpu import launcher
from coba_verl.cpu.workers import use_gloo_workers


@ray.remote
class StockTaskRunner(TaskRunner.__ray_actor_class__):
    def add_actor_rollout_worker(self, config: DictConfig) -> Any:
        classes = super().add_actor_rollout_worker(config)
        if OmegaConf.select(config, "coba_cpu.enable"):
            use_gloo_workers(self.role_worker_mapping)
        return classes


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config: DictConfig) -> None:
    launcher.prepare_cpu_run(config)
    auto_set_device(config)
    run_ppo(config, task_runner_class=StockTaskRunner)


if __name__ == "__main__":
    main()
