"""Packaging: the base install is the numpy-only core, and each extra brings what its modules import.

The static checks read pyproject.toml and every module's imports (ast, lazy ones included) and walk
the requirements of the extra that module belongs to through the installed packages' metadata. The
install lines README gives then run for real, each in a fresh virtual environment that imports what
the line promises: the core's always (about 20 s); the others when ``COBA_INSTALL_LINES`` names them
(comma-separated, or ``all``): CI sets ``trl`` (about 2 min); ``verl`` and ``lab`` take about 4 min
each and run by hand.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import time
import venv
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "coba_verl"
#: Where the test install puts TRL, apart from the environment veRL runs in (tests/trl/conftest.py).
TRL_SITE = ROOT / ".trl-site"
#: Where the test install puts OpenRLHF, apart as well (tests/openrlhf/conftest.py).
OPENRLHF_SITE = ROOT / ".openrlhf-site"
PROJECT = "coba-verl"

#: Which install brings each part of the package: "" is the base install (numpy only).
EXTRA_OF = {
    "coba_verl": "",
    "coba_verl.cli": "",
    "coba_verl.config": "",
    "coba_verl.core": "",
    "coba_verl.records": "",
    "coba_verl.main": "verl",
    "coba_verl.verl_plugin": "verl",
    "coba_verl.cpu": "verl",
    "coba_verl.data": "verl",
    "coba_verl.lab": "lab",
    "coba_verl.arithmetic": "trl",  # torch, transformers, tokenizers: the lab's and veRL's bring them too
    "coba_verl.decoding": "trl",  # torch and transformers
    "coba_verl.trl": "trl",
    "coba_verl.openrlhf": "openrlhf",
}
#: Scripts and test folders outside the package, and the extras they run with.
SCRIPT_EXTRAS = {
    "examples/trl_grpo_coba.py": ("trl",),
    "bench": ("test",),
    "tests": ("test",),
    "tests/trl": ("test", "trl"),  # TRL from .trl-site
    "tests/openrlhf": ("test", "openrlhf"),  # OpenRLHF from .openrlhf-site
}
#: Imports that are probes, not needs: (module, imported top-level name).
PROBES = {
    # refuses an FSDP run when a TRL without the value head is there
    ("coba_verl.verl_plugin.launch.preflight", "trl"),
}


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _package_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


@cache
def _imports(path: Path) -> list[str]:
    """Every absolute module name ``path`` imports, at module level or inside functions.

    ``from a import b`` yields ``a`` and, where ``a.b`` is one of the package's modules, ``a.b``.
    """
    modules = _package_modules()
    name = _module_name(path) if path.is_relative_to(PACKAGE) else ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
    return out


def _third_party(names: Iterable[str]) -> set[str]:
    tops = {n.split(".")[0] for n in names}
    return {t for t in tops if t not in sys.stdlib_module_names and t != "coba_verl" and t != "__future__"}


def _reach(starts: Iterable[str]) -> set[str]:
    """The package's modules that importing ``starts`` can load (parents included), lazily or not."""
    modules = _package_modules()
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            mod = ".".join(parts[:i])
            if mod in modules and mod not in seen:
                seen.add(mod)
                todo += [n for n in _imports(modules[mod]) if n.startswith("coba_verl")]
    return seen


def _needs(starts: Iterable[str]) -> dict[str, set[str]]:
    """Third-party top-level name -> the package's modules that import it, over all that ``starts`` load."""
    out: dict[str, set[str]] = {}
    for mod in sorted(_reach(starts)):
        for top in _third_party(_imports(_package_modules()[mod])):
            if (mod, top) not in PROBES:
                out.setdefault(top, set()).add(mod)
    return out


def _starts(extra: str) -> list[str]:
    return [m for m in _package_modules() if EXTRA_OF[_part(m)] == extra]


def _part(module: str) -> str:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in EXTRA_OF:
            return ".".join(parts[:i])
    raise AssertionError(f"{module} is in no part of EXTRA_OF: say which install brings it")


@cache
def _distributions() -> dict[str, metadata.Distribution]:
    """Installed distributions by canonical name, TRL's apart folder included."""
    path = [*sys.path, str(TRL_SITE), str(OPENRLHF_SITE)]
    out: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=path):
        out.setdefault(canonicalize_name(dist.metadata["Name"] or ""), dist)
    return out


_NOT_MODULES = (".dist-info", ".egg-info", ".pth", ".so")


@cache
def _top_level_names() -> dict[str, set[str]]:
    """Import name -> canonical names of the installed distributions that provide it."""
    out: dict[str, set[str]] = {}
    for name, dist in _distributions().items():
        tops = (dist.read_text("top_level.txt") or "").split()
        if not tops:
            firsts = {f.parts[0] for f in dist.files or [] if f.parts}
            tops = [f.removesuffix(".py") for f in firsts if f != ".." and not f.endswith(_NOT_MODULES)]
        for top in tops:
            out.setdefault(top, set()).add(name)
    return out


def _requirements(extras: Iterable[str]) -> list[Requirement]:
    project = _pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def _closure(extras: Iterable[str]) -> set[str]:
    """Canonical names of every distribution the install with ``extras`` brings (per installed metadata)."""
    seen: set[str] = set()
    own: set[str] = set()
    todo = _requirements(extras)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == PROJECT:  # an extra that includes another of ours, e.g. lab -> coba-verl[verl]
            new = set(req.extras) - own
            own |= new
            todo += _requirements(new)
            continue
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        dist = _distributions().get(name)
        for text in (dist.requires or []) if dist else []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in [*req.extras, ""]):
                todo.append(sub)
    return {k.partition("[")[0] for k in seen}


def _uncovered(needs: dict[str, set[str]], extras: Iterable[str]) -> dict[str, list[str]]:
    brought = _closure(extras)
    return {
        top: sorted(mods) for top, mods in needs.items() if not _top_level_names().get(top, set()) & brought
    }


def test_base_install_is_numpy_only() -> None:
    deps = [canonicalize_name(Requirement(r).name) for r in _pyproject()["project"]["dependencies"]]
    assert deps == ["numpy"]


def test_core_and_the_package_root_import_numpy_and_the_standard_library_only() -> None:
    needs = _needs(_starts(""))
    assert set(needs) == {"numpy"}, needs
    loads = {m for m in _reach(_starts("")) if EXTRA_OF[_part(m)]}
    assert not loads, f"the base install loads modules of an extra: {loads}"


def test_every_module_belongs_to_an_extra_that_exists() -> None:
    extras = set(_pyproject()["project"]["optional-dependencies"])
    for module in _package_modules():
        assert EXTRA_OF[_part(module)] in extras | {""}, module


@pytest.mark.parametrize("extra", ["verl", "lab", "trl", "openrlhf"])
def test_each_extra_brings_what_its_modules_import(extra: str) -> None:
    if extra == "trl" and "trl" not in _distributions():
        pytest.skip('TRL is not installed here (pip install --no-deps --target .trl-site "trl>=1.16,<1.17")')
    if extra == "openrlhf" and "openrlhf" not in _distributions():
        pytest.skip("OpenRLHF is not installed here (.ci/run installs it into .openrlhf-site)")
    starts = _starts(extra)
    needs = _needs(starts)
    for script, extras in SCRIPT_EXTRAS.items():
        if extra in extras and (ROOT / script).is_file():
            for top, mods in _needs(n for n in _imports(ROOT / script) if n.startswith("coba_verl")).items():
                needs.setdefault(top, set()).update(mods)
            for top in _third_party(_imports(ROOT / script)):
                needs.setdefault(top, set()).add(script)
    assert not _uncovered(needs, [extra]), f"imported but not brought by coba-verl[{extra}]"


def test_the_trl_install_reaches_no_verl_module() -> None:
    """coba_verl.trl and the TRL example load nothing that needs veRL (they run where veRL is not)."""
    example = [n for n in _imports(ROOT / "examples/trl_grpo_coba.py") if n.startswith("coba_verl")]
    reached = _reach([*_starts("trl"), *example])
    assert {EXTRA_OF[_part(m)] for m in reached} <= {"", "trl", "lab"}
    needs = _needs(reached)
    assert not {"verl", "hydra", "omegaconf", "ray", "scipy", "matplotlib"} & set(needs), needs


def test_the_trl_extra_brings_no_verl() -> None:
    assert PROJECT not in {canonicalize_name(r.name) for r in _requirements(["trl"])}
    if "trl" in _distributions():
        assert "verl" not in _closure(["trl"])


def test_the_veRL_extras_bring_no_trl() -> None:
    """veRL 0.9.1's FSDP engine fails to build where TRL 1.16 is importable."""
    for extra in ("verl", "lab", "test"):
        assert "trl" not in _closure([extra]), extra


def test_the_test_suite_and_bench_import_only_what_their_installs_bring() -> None:
    local = {p.stem for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py")}  # own modules
    for folder, extras in SCRIPT_EXTRAS.items():
        missing = [e for e in ("trl", "openrlhf") if e in extras and e not in _distributions()]
        if not (ROOT / folder).is_dir() or missing:
            continue
        others = [ROOT / f for f, _ in SCRIPT_EXTRAS.items() if f != folder and f.startswith(folder + "/")]
        needs: dict[str, set[str]] = {}
        for path in (ROOT / folder).rglob("*.py"):
            if any(path.is_relative_to(o) for o in others):
                continue
            for top in _third_party(_imports(path)) - local:
                needs.setdefault(top, set()).add(str(path.relative_to(ROOT)))
        assert not _uncovered(needs, extras), f"{folder}: imported but not in coba-verl[{','.join(extras)}]"


def test_trl_spec_is_the_same_in_the_extra_and_in_ci() -> None:
    """CI installs TRL apart (.trl-site) with the spec the ``trl`` extra pins."""
    spec = next(r for r in _requirements(["trl"]) if r.name == "trl").specifier
    found = re.search(r'--target \.trl-site "trl([^"]*)"', (ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert found, ".ci/run installs no TRL into .trl-site"
    assert SpecifierSet(found[1]) == spec


def test_readme_names_only_extras_that_exist() -> None:
    extras = set(_pyproject()["project"]["optional-dependencies"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = {e for group in re.findall(r"(?:coba-verl|\.)\[([a-z,\-]+)\]", readme) for e in group.split(",")}
    assert named <= extras, named - extras


# ---------------------------------------------------------------- the install lines, in fresh venvs

_CORE = """
import importlib.metadata as md, importlib.util, sys
import coba_verl, coba_verl.core
from coba_verl import allocate
budgets = allocate([0.0, 0.5, 1.0, float("nan")], total_budget=32, min_rollouts=2, max_rollouts=16)
assert int(budgets.sum()) == 32, budgets
names = {d.metadata["Name"].lower() for d in md.distributions()} - {"pip", "setuptools", "wheel"}
assert names == {"coba-verl", "numpy"}, names
loaded = {m.split(".")[0] for m in sys.modules if not m.startswith("_")} - set(sys.stdlib_module_names)
assert loaded <= {"coba_verl", "numpy"}, loaded
"""
_TRL = """
import importlib.util, sys, tempfile
import coba_verl, coba_verl.core, coba_verl.arithmetic.hf_dataset
from coba_verl.trl import CobaGRPOTrainer
for absent in ("verl", "hydra", "ray"):
    assert importlib.util.find_spec(absent) is None, absent + " is installed"
spec = importlib.util.spec_from_file_location("trl_grpo_coba", {example!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
with tempfile.TemporaryDirectory() as out:
    example.main(["--steps", "2", "--n-train", "8", "--n-eval", "8", "--eval-steps", "2",
                  "--prompts-per-step", "4", "--num-generations", "4", "--max-rollouts", "8",
                  "--warm-steps", "0", "--hidden-size", "32", "--threads", "0", "--output-dir", out])
"""
_VERL = """
import importlib.metadata as md, importlib.util
import coba_verl.main, coba_verl.verl_plugin.hooks.registration, coba_verl.cpu.registration, coba_verl.data
assert importlib.util.find_spec("trl") is None, "TRL is installed beside veRL"
assert any(e.name == "coba_verl" for e in md.entry_points(group="verl.plugins"))
"""
_LAB = (
    _VERL
    + """
import coba_verl.lab.experiment
"""
)
#: name -> (README's pip arguments, run in the repository root; what must then work elsewhere).
LINES = {
    "core": ("-e .", _CORE),
    "trl": ('torch==2.13.0 -e ".[trl]"', _TRL),
    "verl": ('torch==2.13.0 -e ".[verl]"', _VERL),
    "lab": ('torch==2.13.0 -e ".[lab]"', _LAB),
}
_OPT_IN = {n.strip() for n in os.environ.get("COBA_INSTALL_LINES", "").split(",") if n.strip()}


@pytest.mark.slow
@pytest.mark.parametrize("line", list(LINES))
def test_install_line_in_a_fresh_venv(line: str, tmp_path: Path) -> None:
    if line != "core" and not _OPT_IN & {line, "all"}:
        pytest.skip(f"minutes: COBA_INSTALL_LINES={line} runs it (CI: trl)")
    args, check = LINES[line]
    check = check.replace("{example!r}", repr(str(ROOT / "examples" / "trl_grpo_coba.py")))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    start = time.monotonic()
    done = subprocess.run(
        [str(bindir / "python"), "-m", "pip", "install", "--quiet", *shlex.split(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    took = time.monotonic() - start
    assert done.returncode == 0, f"pip install {args}: {done.stderr[-4000:]}"
    ran = subprocess.run(  # not in the repository root, whose coba_verl would shadow what was installed
        [str(bindir / "python"), "-c", check],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, f"after pip install {args}:\n{ran.stdout[-2000:]}{ran.stderr[-4000:]}"
    for argv in (["--version"], ["train", "--help"]):  # the console script works on every install
        cmd = subprocess.run([str(bindir / "coba-verl"), *argv], env=env, capture_output=True, text=True)
        assert cmd.returncode == 0, f"coba-verl {' '.join(argv)}: {cmd.stderr[-2000:]}"
    print(f"pip install {args}: {took:.0f} s in a fresh venv")
