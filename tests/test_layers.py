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
    "after_import": set(),
    "framework_api": {"refusal"},
    "core": {"refusal"},
    "records": {"core", "refusal"},
    "decoding": set(),
    "arithmetic": {"decoding", "records", "refusal"},
    "data": {"records", "refusal"},
    "lab": {"arithmetic", "core", "decoding", "records", "refusal"},
    "cpu": {"after_import", "decoding", "framework_api", "refusal"},
    "trl": {"core", "records", "refusal", "framework_api"},
    "openrlhf": {"core", "records", "refusal", "framework_api"},
    "verl_plugin": {"after_import", "core", "records", "cpu", "data", "refusal", "framework_api"},
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


#: The veRL wing's rooms (docs/architecture.md), named for when they run, and the rooms each may
#: import: the launch checks run before Ray (and again in the trainer's constructor, so the hooks
#: may import them), the hooks inside veRL's trainers, the reports after a run; `verl_names` holds
#: the veRL names every room reads; `main` and `estimate` are the wing's commands.
WING = PACKAGE / "verl_plugin"
WING_ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "verl_names": set(),
    "launch": {"verl_names"},
    "hooks": {"launch", "verl_names"},
    "reports": {"verl_names"},
    "main": {"launch", "hooks", "verl_names"},
    "estimate": {"launch", "hooks", "main", "verl_names"},
}


def _wing_room(name: str) -> str | None:
    parts = name.split(".")
    if parts[:2] != ["coba_verl", "verl_plugin"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


WING_MODULES = sorted(WING.rglob("*.py"))


def test_every_room_of_the_verl_wing_has_a_row():
    assert {p.relative_to(WING).parts[0].removesuffix(".py") for p in WING_MODULES} == set(WING_ALLOWED)


@pytest.mark.parametrize("path", WING_MODULES, ids=lambda p: str(p.relative_to(WING)))
def test_a_room_of_the_verl_wing_imports_only_the_rooms_it_may(path):
    room = path.relative_to(WING).parts[0].removesuffix(".py")
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # ``from coba_verl.verl_plugin import main`` imports the room ``main``, not the wing's __init__
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    rooms = {r for r in map(_wing_room, names) if r is not None} - {room}
    upward = sorted(rooms - WING_ALLOWED[room])
    assert not upward, f"{path.relative_to(WING)} ({room}) imports {upward}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_of_the_package_is_over_450_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 450
