"""Which Ray a run uses: the suite's own for every test launch, a cluster's where a run joins one.

Fast checks (no Ray started) of what the multi-node test relies on: the suite-wide
``RAY_ADDRESS=local`` of tests/conftest.py keeps every other test's ``ray.init()`` off a cluster that
``ray start`` recorded on this machine, and a CPU run that joins a cluster leaves Ray's resource
counts to the cluster's nodes (`coba_verl.cpu.launcher.cluster_address`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from ray._private import services

from coba_verl.cpu import launcher
from coba_verl.refusal import CobaRefusal

REPO = Path(__file__).resolve().parents[2]
RECORDED = "10.0.0.7:6379"  # not this machine (Ray rewrites 127.0.0.1 to its node address)


def recorded_cluster(folder: Path) -> str:
    """A Ray temp folder in which ``ray start --head`` recorded a cluster (its ``ray_current_cluster``)."""
    (folder / "ray_current_cluster").write_text(RECORDED)
    return str(folder)


def test_a_test_launch_starts_its_own_ray_where_ray_start_recorded_a_cluster(tmp_path, monkeypatch):
    temp_dir = recorded_cluster(tmp_path)
    # ray.init()'s own resolution (ray/_private/worker.py:1838): None means "start a fresh Ray"
    assert services.canonicalize_bootstrap_address(None, temp_dir) is None
    monkeypatch.delenv("RAY_ADDRESS")  # without the suite's default it would join the recorded cluster
    assert services.canonicalize_bootstrap_address(None, temp_dir) == RECORDED


def test_a_subprocess_of_a_test_inherits_the_suites_own_ray():
    code = "import os; print(os.environ.get('RAY_ADDRESS'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "local"


def tiny_config(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "recipes/tiny_cpu/config"), version_base=None):
        return compose(config_name="tiny", overrides=list(overrides))


@pytest.fixture
def cpu_run(monkeypatch):
    """`launcher.prepare_cpu_run` on a machine without CUDA, its environment changes undone afterwards."""
    monkeypatch.setattr(launcher, "_cuda_present", lambda: False)
    monkeypatch.setattr(os, "environ", os.environ.copy())
    return launcher.prepare_cpu_run


TWO_NODES = ("trainer.nnodes=2", "trainer.n_gpus_per_node=1")


def test_a_cpu_run_of_its_own_starts_ray_with_a_gpu_slot_for_each_trainer_rank(cpu_run):
    config = tiny_config(*TWO_NODES)
    cpu_run(config)
    assert config.ray_kwargs.ray_init.num_gpus == 2
    assert config.ray_kwargs.ray_init.num_cpus == launcher.logical_cpus(config.coba_cpu.ray_num_cpus, 2)


@pytest.mark.parametrize("how", ["RAY_ADDRESS", "ray_init.address"])
def test_a_cpu_run_joining_a_cluster_leaves_ray_counts_to_the_clusters_nodes(cpu_run, monkeypatch, how):
    """Ray refuses num_cpus / num_gpus when it joins a cluster (ray/_private/worker.py:1936-1940)."""
    overrides = TWO_NODES
    if how == "RAY_ADDRESS":
        monkeypatch.setitem(os.environ, "RAY_ADDRESS", RECORDED)
    else:
        overrides = (*TWO_NODES, f"+ray_kwargs.ray_init.address={RECORDED}")
    config = tiny_config(*overrides)
    assert launcher.cluster_address(config) == RECORDED
    cpu_run(config)
    ray_init = config.ray_kwargs.ray_init
    assert ray_init.num_cpus is None and "num_gpus" not in ray_init
    assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"  # the workers' environment still travels


def test_a_cpu_run_with_an_address_ray_cannot_use_is_refused_naming_it(cpu_run, monkeypatch):
    monkeypatch.setitem(os.environ, "RAY_ADDRESS", "head-without-port")
    refusal = "RAY_ADDRESS=head-without-port: Ray cannot join.*RAY_ADDRESS=local"
    with pytest.raises(CobaRefusal, match=refusal):
        cpu_run(tiny_config(*TWO_NODES))
