"""`coba_verl.after_import`: a registration deferred to the import of the module that holds the
registry, and what veRL's processes import because of coba-verl (the trainer and the CPU engine
only where veRL's own code imports their packages)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coba_verl import after_import as hooks


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throwaway importable package ``watched_pkg`` with a module ``mod``."""
    root = tmp_path / "watched_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "watched_pkg.mod"
    for name in ("watched_pkg.mod", "watched_pkg"):
        sys.modules.pop(name, None)
    hooks._PENDING.pop("watched_pkg.mod", None)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, hooks._AfterImportFinder)]


def test_function_waits_for_the_import_and_runs_once_after_the_module_code(package):
    seen = []
    hooks.after_import(package, lambda: seen.append(sys.modules[package].VALUE))
    assert seen == [] and package not in sys.modules and hooks.pending() == [package]
    import importlib

    module = importlib.import_module(package)
    assert seen == [41]  # ran after the module's code, before the import returned
    assert hooks.pending() == [] and not any(isinstance(f, hooks._AfterImportFinder) for f in sys.meta_path)
    assert module.__spec__.origin.endswith("mod.py")  # the spec Python would have used
    assert "exec_module" not in vars(module.__spec__.loader)  # the loader is left as it was
    importlib.reload(module)
    assert seen == [41]


def test_function_runs_at_once_for_a_module_already_imported(package):
    import importlib

    importlib.import_module(package)
    seen = []
    hooks.after_import(package, lambda: seen.append(True))
    assert seen == [True] and hooks.pending() == []


def test_two_functions_on_one_module_share_one_finder_and_run_in_order(package):
    import importlib

    seen = []
    hooks.after_import(package, lambda: seen.append("a"))
    hooks.after_import(package, lambda: seen.append("b"))
    assert sum(isinstance(f, hooks._AfterImportFinder) for f in sys.meta_path) == 1
    importlib.import_module(package)
    assert seen == ["a", "b"]


def test_a_failing_function_is_logged_and_does_not_fail_the_import(package, caplog):
    import importlib

    def broken() -> None:
        raise RuntimeError("registry moved")

    hooks.after_import(package, broken)
    with caplog.at_level(logging.ERROR, logger="coba_verl.after_import"):
        module = importlib.import_module(package)
    assert module.VALUE == 41
    assert "broken, run after importing watched_pkg.mod, failed" in caplog.text
    assert "RuntimeError: registry moved" in caplog.text


def test_a_module_no_finder_finds_runs_the_function_at_once(caplog):
    seen = []
    hooks.after_import("no_such_package_xyz", lambda: seen.append(True))
    with caplog.at_level(logging.WARNING, logger="coba_verl.after_import"):
        with pytest.raises(ModuleNotFoundError):
            __import__("no_such_package_xyz")
    assert seen == [True] and hooks.pending() == []
    assert "no_such_package_xyz cannot be watched" in caplog.text


_PROCESS = textwrap.dedent(
    """
    import json, sys
    import verl
    after_verl = {
        "trainer": "coba_verl.verl_plugin.hooks.trainer" in sys.modules,
        "engine": "verl.workers.engine" in sys.modules,
        "plugin": "coba_verl.verl_plugin.hooks.registration" in sys.modules,
        "cpu": "coba_verl.cpu.registration" in sys.modules,
    }
    from verl.workers.engine.base import EngineRegistry
    engines = EngineRegistry._engines["language_model"]
    cpu_engine = {b: engines[b]["cpu"].__name__ for b in ("fsdp", "fsdp2")}
    from verl.trainer.ppo.v1 import get_trainer_cls
    print(json.dumps({"after_verl": after_verl, "cpu_engine": cpu_engine,
                      "trainer": get_trainer_cls("coba_sync").__name__}))
    """
)


def test_veRL_processes_import_trainer_and_engine_only_with_the_package_that_looks_them_up():
    """As in every Ray worker of the CPU backend: ``import verl`` loads the plugin and the CPU
    registration but neither veRL's trainer stack nor its engines; importing those packages (as the
    TaskRunner and the FSDP actor do before their lookups) registers what they look up."""
    from coba_verl.cpu.launcher import cpu_environment

    env = {**__import__("os").environ, **cpu_environment(), "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    done = subprocess.run(
        [sys.executable, "-c", _PROCESS], env=env, capture_output=True, text=True, timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["after_verl"] == {"trainer": False, "engine": False, "plugin": True, "cpu": True}
    assert found["cpu_engine"] == {"fsdp": "FSDPEngineWithLMHead", "fsdp2": "FSDPEngineWithLMHead"}
    assert found["trainer"] == "CobaTrainer"


def test_a_failed_import_keeps_the_function_waiting_for_the_next_attempt(package, tmp_path):
    import importlib

    source = tmp_path / "watched_pkg" / "mod.py"
    source.write_text("raise ImportError('not yet')\n")
    seen = []
    hooks.after_import(package, lambda: seen.append(sys.modules[package].VALUE))
    with pytest.raises(ImportError, match="not yet"):
        importlib.import_module(package)
    assert seen == [] and hooks.pending() == [package]
    source.write_text("VALUE = 7\n")
    importlib.invalidate_caches()
    sys.modules.pop(package, None)
    importlib.import_module(package)
    assert seen == [7] and hooks.pending() == []


def test_a_module_whose_loader_is_a_shared_class_is_never_wrapped(caplog):
    """A builtin module's loader is a class that loads every builtin: the function runs at once and
    the class is left as it was."""
    import importlib
    import importlib.machinery

    name = next((n for n in sys.builtin_module_names if n not in sys.modules), None)
    if name is None:
        pytest.skip("every builtin module is already imported")
    before = vars(importlib.machinery.BuiltinImporter)["exec_module"]
    seen = []
    hooks.after_import(name, lambda: seen.append(True))
    with caplog.at_level(logging.WARNING, logger="coba_verl.after_import"):
        importlib.import_module(name)
    assert seen == [True] and hooks.pending() == []
    assert vars(importlib.machinery.BuiltinImporter)["exec_module"] is before
    assert f"{name} cannot be watched" in caplog.text
