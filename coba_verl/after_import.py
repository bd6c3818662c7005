"""Run a function once a module has finished importing, without importing it (a post-import hook).

veRL imports every ``verl.plugins`` entry point and every ``VERL_USE_EXTERNAL_MODULES`` module in
every process that imports veRL: the driver, the TaskRunner and each Ray worker (the FSDP actor,
the rollout server, the reward and agent-loop workers). What coba-verl registers there is looked up
in one or two of those processes only (the trainer classes by the TaskRunner, the CPU engine by
the actor), yet registering it eagerly imports veRL's trainer or engine package, about a second of
CPU each, in all of them. `after_import` defers such a registration to the moment veRL's own code
imports the package that holds the registry, so a process that never imports it never pays:

- the module already imported: the function runs now;
- otherwise a finder at the front of ``sys.meta_path`` waits for the module's import, lets the
  finders behind it find the module as usual, and runs the function right after the module's code
  has executed (before the import statement that asked for it returns); the finder then removes
  itself. The module's spec and loader are the ones Python would have used.

A function that raises is logged as an error with its traceback and does not fail the import of
veRL's module (a process that never looks the registration up keeps working; the one that does
fails at its lookup with veRL's own message, and the log above it says why).
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["after_import", "pending"]

logger = logging.getLogger(__name__)


def _run(name: str, function: Callable[[], None]) -> None:
    try:
        function()
    except Exception:
        label = getattr(function, "__qualname__", repr(function))
        logger.exception("coba-verl: %s, run after importing %s, failed", label, name)


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the watched module's import it wraps the real loader's exec_module."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.functions: list[Callable[[], None]] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        _remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        loader = None if spec is None else spec.loader
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            # no module, or a loader shared by many modules (a class: builtins, frozen modules)
            _PENDING.pop(self.name, None)
            for function in self.functions:  # nothing to wait for: as if no hook had been asked
                logger.warning("coba-verl: %s cannot be watched; running %s now", fullname, function)
                _run(fullname, function)
            return spec
        original = loader.exec_module
        functions = self.functions

        def exec_module(module: ModuleType) -> None:
            del loader.exec_module  # back to the class's method for any later use of this loader
            try:
                original(module)
            except BaseException:
                sys.meta_path.insert(0, self)  # the import failed: watch the next attempt
                raise
            _PENDING.pop(fullname, None)
            for function in functions:
                _run(fullname, function)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


#: module name -> its finder, while the module has not been imported.
_PENDING: dict[str, _AfterImportFinder] = {}


def _remove(finder: _AfterImportFinder) -> None:
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def after_import(name: str, function: Callable[[], None]) -> None:
    """Call ``function()`` once the module ``name`` has been imported: now if it already has been,
    else right after its import executes it. A module imported in the middle of its own code
    (``name`` is being imported now) runs ``function`` now, as an eager registration would."""
    if name in sys.modules:
        _run(name, function)
        return
    finder = _PENDING.get(name)
    if finder is None:
        finder = _PENDING[name] = _AfterImportFinder(name)
        sys.meta_path.insert(0, finder)
    finder.functions.append(function)


def pending() -> list[str]:
    """The modules whose import is still awaited (for logs and tests)."""
    return sorted(_PENDING)
