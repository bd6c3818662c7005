"""Which of veRL's checkpoint engines load in this environment, read from veRL's source, nothing imported.

veRL's ``verl/checkpoint_engine/__init__.py`` imports each engine module inside ``try: ... except
ImportError`` (and records the error), so an engine name (``@CheckpointEngineRegistry.register("nccl")``)
is in veRL's registry only where a module registering it imports. In veRL 0.9.1: ``nccl``, ``nixl`` and
``delta_sharded`` import ``cupy`` (veRL's extra ``verl[cupy-cu130]``, which ``verl[vllm]`` does not
bring), ``nixl`` also ``nixl``, ``mooncake`` ``mooncake`` and vLLM or SGLang, ``kimi_ckpt_engine``
``checkpoint_engine``, and the HCCL engine, which registers ``nccl`` on Ascend, vLLM and ``torch_npu``.

`engine_modules` reads those conditions from the source: a module's top-level imports (an import in
``try`` with another in its ``except ImportError``: either; in ``with``: as any), those of the modules
of the package it imports, and a module-level ``if ...: raise ImportError`` whose source digest is in
`KNOWN_GUARDS`. `missing_for` checks them with ``importlib.util.find_spec``, which finds a package as
the import would, without importing it. A module whose guard is not known is left to veRL (its names
count as loading), said once at WARNING.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import re
import sys
from pathlib import Path
from typing import NamedTuple

from coba_verl.verl_plugin.launch.verl_code import verl_code_is_known, verl_folder

logger = logging.getLogger(__name__)

#: The folder of veRL's checkpoint engines, under the ``verl`` package.
FOLDER = "checkpoint_engine"
#: A module-level ``if ...: raise ImportError`` of an engine module, by the sha256 of its source: the
#: packages it needs and the `VERL_START_CODE` rule of the veRL code it calls. veRL 0.9.1's HCCL engine
#: (``hccl_checkpoint_engine.py:36-37``) needs ``torch.npu``, which ``torch_npu`` adds to torch
#: (``is_torch_npu_available(check_device=False)``, ``utils/device.py:37-58``).
KNOWN_GUARDS: dict[str, tuple[tuple[str, ...], str]] = {
    "ac09f326325ec16d024b37c3dffbfc10e8054584f26c011b85fd128bd56add8c": (("torch_npu",), "npu_guard"),
}

#: Packages a module needs: each group is one package or its alternatives (any one of them).
Needs = tuple[tuple[str, ...], ...]


class EngineModule(NamedTuple):
    """One of veRL's checkpoint engine modules that its package imports."""

    path: str  # under the ``verl`` package
    names: tuple[str, ...]  # the engine names it registers
    needs: Needs  # the packages it imports (at its top, or in modules of the package it imports)
    unknown_guard: str | None  # a module-level ``raise ImportError`` whose condition is not known


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    """``handler`` catches an ImportError (by that name, a parent of it, or bare)."""
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    caught = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    return handler.type is None or any(isinstance(t, ast.Name) and t.id in caught for t in types)


def _raises_import_error(statements: list[ast.stmt]) -> bool:
    """One of ``statements`` raises ImportError or ModuleNotFoundError."""
    return any(
        isinstance(s, ast.Raise)
        and s.exc is not None
        and isinstance(getattr(s.exc, "func", s.exc), ast.Name)
        and getattr(s.exc, "func", s.exc).id in ("ImportError", "ModuleNotFoundError")
        for s in statements
    )


def _outside(package: str) -> bool:
    """``package`` is neither veRL nor in Python's standard library: one an install may lack."""
    return package != "verl" and package not in sys.stdlib_module_names


def _either(first: Needs, second: Needs) -> Needs:
    """The needs of ``first`` or ``second`` (an import that falls back to another on ImportError)."""
    if not first or not second:
        return ()
    return tuple(tuple(dict.fromkeys(a + b)) for a in first for b in second)


class _Reader:
    """Reads what the modules of veRL's checkpoint-engine package need at import."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.unknown: str | None = None
        self.read: set[Path] = set()

    def module_files(self, base: Path, dotted: str) -> list[Path]:
        """The files an import of ``dotted`` (relative to the folder ``base``) runs, packages first."""
        files, folder = [], base
        for part in dotted.split(".") if dotted else ():
            if (folder / part / "__init__.py").is_file():
                folder = folder / part
                files.append(folder / "__init__.py")
            elif (folder / f"{part}.py").is_file():
                files.append(folder / f"{part}.py")
        return files

    def file_needs(self, path: Path) -> Needs:
        """What importing the file at ``path`` needs (nothing again for a file read before)."""
        if path in self.read:
            return ()
        self.read.add(path)
        source = path.read_text(encoding="utf-8")
        return self.statements(ast.parse(source).body, path, source)

    def statements(self, body: list[ast.stmt], path: Path, source: str) -> Needs:
        """What running ``body``, module-level statements of ``path``, needs."""
        needs: list[tuple[str, ...]] = []
        for node in body:
            if isinstance(node, ast.Import):
                needs += [(top,) for a in node.names if _outside(top := a.name.split(".")[0])]
            elif isinstance(node, ast.ImportFrom):
                needs += self.import_from(node, path)
            elif isinstance(node, ast.With):
                needs += self.statements(node.body, path, source)
            elif isinstance(node, ast.Try):
                tried = self.statements(node.body, path, source)
                for handler in node.handlers:
                    reraises = any(isinstance(s, ast.Raise) for s in handler.body)
                    if _catches_import_error(handler) and not reraises:
                        tried = _either(tried, self.statements(handler.body, path, source))
                needs += tried
                needs += self.statements(node.orelse + node.finalbody, path, source)
            elif isinstance(node, ast.If) and _raises_import_error(node.body):
                needs += self.guard(ast.get_source_segment(source, node) or "")
        return tuple(needs)

    def import_from(self, node: ast.ImportFrom, path: Path) -> list[tuple[str, ...]]:
        """What ``from ... import ...`` in ``path`` needs: the package, or the needs of the modules of
        veRL's checkpoint-engine package it runs."""
        module = node.module or ""
        if node.level == 0 and not module.startswith(f"verl.{FOLDER}"):
            top = module.split(".")[0]
            return [(top,)] if _outside(top) else []
        if node.level == 0:
            base, dotted = self.root, module.removeprefix("verl.")
        else:
            base, dotted = path.parents[node.level - 1], module
        files = self.module_files(base, dotted)
        if node.module is None or (files and files[-1].name == "__init__.py"):  # from . import a, b
            folder = files[-1].parent if files else base
            files += [f for alias in node.names for f in self.module_files(folder, alias.name)]
        return [group for file in files for group in self.file_needs(file)]

    def guard(self, segment: str) -> list[tuple[str, ...]]:
        """What the module-level guard ``segment`` needs, by `KNOWN_GUARDS`; else noted as unknown."""
        known = KNOWN_GUARDS.get(hashlib.sha256(segment.encode()).hexdigest())
        if known is not None and verl_code_is_known(known[1]):
            return [(package,) for package in known[0]]
        self.unknown = segment
        return []


def _registered_names(tree: ast.AST) -> tuple[str, ...]:
    """The names given with ``@CheckpointEngineRegistry.register("<name>")`` to classes of ``tree``."""
    names = []
    for node in ast.walk(tree):
        for decorator in node.decorator_list if isinstance(node, ast.ClassDef) else ():
            func = decorator.func if isinstance(decorator, ast.Call) else None
            if (
                isinstance(func, ast.Attribute) and func.attr == "register"
                and isinstance(func.value, ast.Name) and func.value.id == "CheckpointEngineRegistry"
                and decorator.args and isinstance(decorator.args[0], ast.Constant)
                and isinstance(decorator.args[0].value, str)
            ):  # fmt: skip
                names.append(decorator.args[0].value)
    return tuple(names)


@functools.cache
def engine_modules() -> tuple[EngineModule, ...]:
    """The engine modules veRL's checkpoint-engine package imports (its ``__init__`` and the modules
    that imports), each with the names it registers and what it needs to import; () without veRL."""
    root = verl_folder()
    if root is None or not (root / FOLDER / "__init__.py").is_file():
        return ()
    package = root / FOLDER
    files = [package / "__init__.py"]
    for node in ast.walk(ast.parse(files[0].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            files += [f for f in _Reader(root).module_files(package, node.module) if f not in files]
    modules = []
    for path in files:
        names = _registered_names(ast.parse(path.read_text(encoding="utf-8")))
        if names:
            reader = _Reader(root)
            needs = reader.file_needs(path)
            relative = path.relative_to(root).as_posix()
            modules.append(EngineModule(relative, names, tuple(dict.fromkeys(needs)), reader.unknown))
    return tuple(modules)


def engine_names() -> tuple[str, ...]:
    """Every engine name veRL's checkpoint-engine modules register, sorted."""
    return tuple(sorted({name for module in engine_modules() for name in module.names}))


def package_found(name: str) -> bool:
    """``name`` is a package an import would find here (``importlib.util.find_spec``, nothing imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class Missing(NamedTuple):
    """The packages an engine module needs and does not find here."""

    groups: Needs
    module: EngineModule

    def __str__(self) -> str:
        """``a``, ``a or b``, joined by ``and``."""
        return " and ".join(" or ".join(group) for group in self.groups)


def missing_for(name: str) -> Missing | None:
    """None where veRL registers the engine ``name`` here (a module registering it imports, or its
    condition is left to veRL); else what is missing for the module that misses the fewest packages.
    ``name`` is one that `engine_names` lists."""
    candidates = []
    for module in engine_modules():
        if name not in module.names:
            continue
        if module.unknown_guard is not None:
            _say_guard_unknown(module.path)
            return None
        missing = tuple(group for group in module.needs if not any(package_found(p) for p in group))
        if not missing:
            return None
        candidates.append(Missing(missing, module))
    return min(candidates, key=lambda m: len(m.groups)) if candidates else None


def _preferred(name: str) -> tuple[bool, str]:
    return name != "nccl", name  # veRL's own order of its engines for separate_async (``:68-70``)


def loading_engines() -> tuple[str, ...]:
    """The engine names veRL registers here: ``nccl`` first, then by name."""
    return tuple(sorted((n for n in engine_names() if missing_for(n) is None), key=_preferred))


def weight_sync_engine() -> tuple[str, Missing | None] | None:
    """The engine other than ``naive`` to send weights to a standalone rollout pool with: the first
    that loads here (missing None), or else the one missing the fewest packages, with what it misses;
    None where veRL registers no other engine."""
    loading = [name for name in loading_engines() if name != "naive"]
    if loading:
        return loading[0], None
    others = [(missing_for(n), n) for n in engine_names() if n != "naive"]
    others = [(missing, n) for missing, n in others if missing is not None]
    if not others:
        return None
    missing, name = min(others, key=lambda pair: (len(pair[0].groups), *_preferred(pair[1])))
    return name, missing


def install_hint(missing: Missing) -> str:
    """How to install the first package of ``missing``: the extra of veRL that brings it, read from
    veRL's own requirements, or else pip's name for it."""
    package = missing.groups[0][0]
    try:
        version = importlib.metadata.version("verl")
        requirements = importlib.metadata.requires("verl") or []
    except importlib.metadata.PackageNotFoundError:
        version, requirements = None, []
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.\-]+).*extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if match is None:
            continue
        project = match.group(1).lower().replace("_", "-")
        if project == package.replace("_", "-") or project.startswith(f"{package.replace('_', '-')}-"):
            return f'pip install "verl[{match.group(2)}]=={version}"'
    return f"pip install {package.replace('_', '-')}"


@functools.cache
def _say_guard_unknown(path: str) -> None:
    logger.warning(
        "veRL's verl/%s stops its own import on a condition coba-verl does not know: coba-verl leaves the "
        "checkpoint engines it registers to veRL, which looks them up inside Ray.",
        path,
    )
