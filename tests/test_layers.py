"""The package's layers (docs/architecture.md): each part imports only the parts below it.

Every ``import coba_verl...`` of every module counts, the lazy ones inside functions too, so that
nothing imports upward: no glue reaches the commands layer, and the core and the ground floor
(`coba_verl.refusal`, `coba_verl.framework_api`) stand on nothing of the package's above them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "coba_verl"

#: part -> the parts it may import (a part is a folder, or a module at the package root).
ALLOWED: dict[str, set[str]] = {
    "refusal": set(),
    "framework_api": {"refusal"},
    "core": {"refusal"},
    "records": {"core", "refusal"},
    "decoding": set(),
    "arithmetic": {"decoding", "records", "refusal"},
    "data": {"records", "refusal"},
    "lab": {"arithmetic", "core", "records", "refusal"},
    "cpu": {"decoding", "framework_api", "refusal"},
    "trl": {"core", "records", "refusal", "framework_api"},
    "openrlhf": {"core", "records", "refusal", "framework_api"},
    "verl_plugin": {"core", "records", "cpu", "data", "refusal", "framework_api"},
    "main": {"verl_plugin"},
    "cli": {"__init__"},
    "__init__": {"core"},
    "config": set(),  # the Hydra config (yaml)
}


def _part(name: str) -> str | None:
    """The part a dotted module name belongs to, None outside coba_verl (``coba_verl`` itself and
    a name it defines, e.g. ``coba_verl.__version__``, are the package root, ``__init__``)."""
    parts = name.split(".")
    if parts[0] != "coba_verl":
        return None
    if len(parts) > 1 and ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "__init__"


def imported_parts(path: Path) -> set[str]:
    """The parts of coba_verl that the module at ``path`` imports."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"  # the package uses none
            if node.module == "coba_verl":  # from coba_verl import cli
                names += [f"coba_verl.{alias.name}" for alias in node.names]
            elif node.module:
                names.append(node.module)
    return {part for part in map(_part, names) if part is not None}


def part_of(path: Path) -> str:
    first = path.relative_to(PACKAGE).parts[0]
    return first.removesuffix(".py")


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_part_of_the_package_has_a_row():
    assert {part_of(p) for p in MODULES} <= set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_the_parts_below_its_own(path):
    part = part_of(path)
    upward = imported_parts(path) - ALLOWED[part] - {part}
    assert not upward, f"{path.relative_to(PACKAGE)} ({part}) imports {sorted(upward)}"
