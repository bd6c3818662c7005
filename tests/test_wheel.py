"""The package as users get it: the wheel and sdist ``uv build`` makes, the wheel installed with the
veRL extra in a fresh virtual environment outside the source tree, and what must then work there.

``uv build`` makes the sdist and builds the wheel from it (so a file the sdist leaves out is missing
from the wheel too). The wheel must hold the Hydra configs (``coba_verl/config/**.yaml``), every
module of the source tree and the LICENSE. ``uv pip install "<wheel>[verl]" torch==2.13.0`` then
installs it into a fresh venv in ``tmp_path``, with pip's find-links and index variables passed on as
uv's, as ``scripts/pip_install.sh`` does (so torch is the CPU build CI installs). From a working
directory outside the source tree, with none of this environment's paths, the installed copy must:
be what ``import coba_verl`` loads; be found by veRL's own plugin loader (``import verl`` loads the
``verl.plugins`` entry points) with the CoBA trainer registered; compose ``coba_trainer`` with the
``coba`` and ``coba_cpu`` groups from its package data; run ``coba-verl --help``; and print a refusal
as its one line, exit status 2, before Ray.

Cost with uv's cache warm (as in CI, after ``.ci/run``'s installs), on 2 cores at a load of about 3:
21 s in all (the build 1.7 s, the install 3.3 s, the two processes that import veRL side by side 16 s).
Skipped where no ``uv`` can be found (``.ci/run`` installs it; ``COBA_INSTALLER=pip`` may leave it out).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "coba_verl"
VERSION_LINE = "__version__ = "

#: Run in the fresh venv's python, in tmp_path; fails with an AssertionError naming what is wrong.
_CHECK = """
import importlib.metadata as md, os, sys
from pathlib import Path

venv = Path(sys.argv[1]).resolve()
plugin = "coba_verl.verl_plugin.hooks.registration"

# veRL's own loader: `import verl` loads every verl.plugins entry point (verl/__init__.py).
import verl
assert plugin in sys.modules, "import verl did not load coba-verl's plugin (veRL logs why at DEBUG only)"
from verl.trainer.ppo.v1 import get_trainer_cls
trainer = get_trainer_cls("coba_sync")
assert trainer.__name__ == "CobaTrainer", trainer

import coba_verl
where = Path(coba_verl.__file__).resolve()
assert where.is_relative_to(venv), f"coba_verl imported from {where}, not from the fresh venv {venv}"
assert Path(sys.modules[trainer.__module__].__file__).resolve().is_relative_to(venv)
dist = md.distribution("coba-verl")
assert dist.version == coba_verl.__version__ == sys.argv[2], (dist.version, coba_verl.__version__)
assert '"editable": true' not in (dist.read_text("direct_url.json") or ""), "an editable install"

found = [e for e in md.entry_points(group="verl.plugins") if e.name == "coba_verl"]
assert [e.value for e in found] == [plugin], found
assert found[0].load() is sys.modules[plugin]
from coba_verl.verl_plugin.main import check_plugin_loaded
check_plugin_loaded()

# The config groups from the installed package data, as `coba-verl train` and the recipes find them.
from hydra import compose, initialize_config_module
with initialize_config_module(config_module="coba_verl.config", version_base=None):
    cfg = compose(config_name="coba_trainer", overrides=["coba.strategy=uniform", "+coba_cpu=cpu"])
assert cfg.coba.strategy == "uniform", cfg.coba
assert cfg.coba_cpu.enable is True and cfg.trainer.device == "cpu"
assert cfg.algorithm.adv_estimator == "grpo" and "actor_rollout_ref" in cfg  # veRL's ppo_trainer
from coba_verl.verl_plugin.launch.config_bridge import coba_config_from  # as a run builds its CobaConfig
assert coba_config_from(cfg).size_refills is False  # auto, uniform: veRL's own DAPO
print("CHECKED", where)
"""


def _uv() -> str | None:
    """The uv of this environment (``.ci/run`` installs it into .venv-ci) or of PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def _env(bindir: Path | None = None) -> dict[str, str]:
    """This environment's variables without its Python paths, pip's find-links and indexes as uv's."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "VERL_USE_EXTERNAL_PLUGINS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    for uv_name, pip_name in (
        ("UV_FIND_LINKS", "PIP_FIND_LINKS"),
        ("UV_INDEX_URL", "PIP_INDEX_URL"),
        ("UV_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL"),
    ):
        value = env.get(uv_name) or env.get(pip_name, "")
        if value:  # scripts/pip_install.sh: uv's find-links are comma-separated, pip's space-separated
            env[uv_name] = value.replace(" ", ",") if uv_name == "UV_FIND_LINKS" else value
    if bindir is not None:
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _version() -> str:
    init = (PACKAGE / "__init__.py").read_text(encoding="utf-8")
    line = next(x for x in init.splitlines() if x.startswith(VERSION_LINE))
    return line.removeprefix(VERSION_LINE).strip().strip("\"'")


def _timed(step: str, times: dict[str, float], *args, **kwargs) -> subprocess.CompletedProcess:
    start = time.monotonic()
    done = subprocess.run(*args, capture_output=True, text=True, **kwargs)
    times[step] = time.monotonic() - start
    return done


@pytest.mark.slow
def test_the_wheel_installed_with_the_verl_extra_works_outside_the_source_tree(tmp_path: Path) -> None:
    uv = _uv()
    if uv is None:
        pytest.skip("no uv here (.ci/run installs it; pip install uv)")
    times: dict[str, float] = {}
    version = _version()

    # 1. The sdist and the wheel, as `uv build` makes them (the wheel from the sdist).
    dist = tmp_path / "dist"
    built = _timed("build", times, [uv, "build", "--quiet", "--out-dir", str(dist), str(ROOT)],
                   cwd=tmp_path, env=_env(), timeout=600)  # fmt: skip
    assert built.returncode == 0, f"uv build: {built.stderr[-4000:]}"
    wheels = list(dist.glob(f"coba_verl-{version}-py3-none-any.whl"))
    sdists = list(dist.glob(f"coba_verl-{version}.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"coba_verl-{version}.dist-info/METADATA").decode()
    configs = {p.relative_to(ROOT).as_posix() for p in (PACKAGE / "config").rglob("*.yaml")}
    assert {"coba_verl/config/coba_trainer.yaml", "coba_verl/config/coba/default.yaml"} <= configs
    assert configs <= names, f"config files missing from the wheel: {sorted(configs - names)}"
    modules = {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert modules <= names, f"modules missing from the wheel: {sorted(modules - names)}"
    license_file = f"coba_verl-{version}.dist-info/licenses/LICENSE"
    assert license_file in names, "no LICENSE in the wheel's dist-info"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(license_file) == (ROOT / "LICENSE").read_bytes()
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata

    # 2. A fresh venv outside the source tree, the wheel with the veRL extra (torch: the CPU build).
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    bindir = env_dir / "bin"
    env = _env(bindir)
    done = _timed("install", times,
                  [uv, "pip", "install", "--quiet", "--python", str(bindir / "python"), f"{wheel}[verl]",
                   "torch==2.13.0"], cwd=tmp_path, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, f"uv pip install {wheel.name}[verl]: {done.stderr[-4000:]}"

    # 3. What users then run, in a folder that is not the source tree. The refusal (a process that
    # imports veRL, as the check does) runs beside the check: the two take about half the time.
    work = tmp_path / "work"
    work.mkdir()
    start = time.monotonic()
    refusing = subprocess.Popen(  # before Ray: one line, `coba-verl: ...`, exit 2 (tests/test_preflight.py)
        [str(bindir / "coba-verl"), "train", "coba.min_rollouts=abc"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        ran = _timed("plugin+config", times, [str(bindir / "python"), "-c", _CHECK, str(env_dir), version],
                     cwd=work, env=env, timeout=600)  # fmt: skip
        helped = _timed("--help", times, [str(bindir / "coba-verl"), "--help"], cwd=work, env=env,
                        timeout=120)  # fmt: skip
        out, err = refusing.communicate(timeout=600)
        times["refusal"] = time.monotonic() - start
    finally:
        if refusing.poll() is None:
            refusing.kill()
            refusing.communicate()
    assert ran.returncode == 0, f"in the fresh venv:\n{ran.stdout[-2000:]}{ran.stderr[-4000:]}"
    assert "CHECKED" in ran.stdout
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert helped.stdout.startswith("usage: coba-verl"), helped.stdout[:500]
    lines = err.splitlines()
    assert refusing.returncode == 2, f"coba-verl train exit {refusing.returncode}:\n{err[-4000:]}"
    assert lines and lines[-1].startswith("coba-verl: "), err[-4000:]
    assert "coba.min_rollouts='abc'" in lines[-1] and "Traceback" not in err, err[-4000:]
    assert "Ray instance" not in out + err
    print("wheel check: " + ", ".join(f"{step} {took:.1f} s" for step, took in times.items()))
