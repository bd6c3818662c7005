"""README's Quick start: every command it gives runs, and its test command is the one CI runs.

The Quick start's bash blocks are read as commands (comments dropped) and each is run in its
quickest form with the same program and options: a script is parsed by ``bash -n`` and
shellcheck (the scripts themselves run for minutes: their times are in the README); ``ruff
check .`` runs as written; each ``python -m pytest ...`` runs with its own options on one small
test file, or, with ``-m``, collects the end-to-end file; ``coba-verl lab`` answers ``--help``.
A command of another kind fails `test_every_quick_start_command_runs` until a quick form is
given for it here. The by-hand TRL install is not run (it writes ``.trl-site`` from the
network); it must be, option for option, the one ``.ci/run`` makes (through ``pip_install``,
scripts/pip_install.sh: uv or pip with the same arguments).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"
#: A fast file of plain tests that a pytest command of the Quick start runs on.
SMALL_TESTS = "tests/core/test_step_line.py"
#: veRL's end-to-end runs (``-m e2e``).
E2E_FILE = "tests/cpu_backend/test_verl_e2e.py"


def _quick_start_commands() -> list[list[str]]:
    """Each command (argv, ``&&`` chains split) of the bash blocks of README's Quick start."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Quick start (CPU)", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for line in block.splitlines():
            for part in line.split("  #")[0].split("&&"):
                if part.strip():
                    commands.append(shlex.split(part))
    return commands


def _ci_commands() -> list[list[str]]:
    lines = CI.read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _script_commands() -> list[list[str]]:
    text = (ROOT / "scripts" / "quickstart.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    return [
        shlex.split(line) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def _tool(name: str) -> str:
    """A console script of this environment (beside its python), else one on PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or pytest.fail(f"{name} is not installed"))


def _run(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def _collected(output: str) -> list[str]:
    return [line for line in output.splitlines() if "::" in line]


def _check_pytest(options: list[str]) -> None:
    """README's pytest command with its options: a run on a small file, or, under ``-m`` (README:
    "only veRL's end-to-end CPU trainings, the extended ones too"), the end-to-end file collected
    with them, beside what the test command CI runs (no ``-m``) collects there."""
    python = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    if "-m" in options:
        chosen = _run([*python, *options, "--collect-only", "-q", E2E_FILE])
        default = _run([*python, "--collect-only", "-q", E2E_FILE])
        for done in (chosen, default):
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        chosen_items, default_items = _collected(chosen.stdout), _collected(default.stdout)
        assert set(default_items) < set(chosen_items)  # the e2e_extended runs, left out of CI's run
        return
    done = _run([*python, *options, "-q", SMALL_TESTS])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout), done.stdout[-2000:]


def _check(command: list[str]) -> None:
    """Run ``command`` in its quickest form; fail on a command of a kind not known here."""
    match command:
        case ["bash", script]:
            assert (ROOT / script).is_file(), script
            done = _run(["bash", "-n", script])
            assert done.returncode == 0, done.stderr
            done = _run([_tool("shellcheck"), "-x", script], timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
        case ["source", activate]:
            assert activate == ".venv/bin/activate"  # the venv scripts/quickstart.sh makes
            assert ["-m", "venv", ".venv"] in [c[-3:] for c in _script_commands()]
        case ["ruff", "check", "."]:
            done = _run([_tool("ruff"), "check", "."], timeout=120)
            assert done.returncode == 0, done.stdout[-2000:]
        case ["ruff", "format", "--check", "."]:
            done = _run([_tool("ruff"), "format", "--check", "."], timeout=120)
            assert done.returncode == 0, done.stdout[-2000:]
        case ["python", "-m", "pytest", *options]:
            _check_pytest(options)
        case ["coba-verl", "lab"]:
            done = _run([_tool("coba-verl"), "lab", "--help"], timeout=120)
            assert done.returncode == 0 and "--scenario" in done.stdout, done.stdout + done.stderr
        case ["pip", "install", *options] if "--target" in command:
            # .ci/run installs through pip_install (uv or pip, the same arguments)
            same = [c for c in _ci_commands() if c[:1] == ["pip_install"] and ".trl-site" in c]
            assert [[a for a in c[1:] if a != "--quiet"] for c in same] == [options]
        case _:
            pytest.fail(
                f"no quick form of the Quick start command {shlex.join(command)!r}: add one to _check"
            )


@pytest.mark.slow  # two pytest runs and two collections in subprocesses: 20 s to a minute and more
def test_every_quick_start_command_runs() -> None:
    commands = _quick_start_commands()
    assert ["bash", "scripts/quickstart.sh"] in commands and ["bash", ".ci/run"] in commands
    for command in commands:
        _check(command)


def test_the_test_command_readme_gives_is_the_one_ci_runs() -> None:
    ci_pytest = [c for c in _ci_commands() if c[:3] == ["python", "-m", "pytest"]]
    readme_pytest = [
        c for c in _quick_start_commands() if c[:3] == ["python", "-m", "pytest"] and "-m" not in c[3:]
    ]
    assert len(ci_pytest) == 1 and ci_pytest == readme_pytest
    assert ["ruff", "check", "."] in _ci_commands() and ["ruff", "check", "."] in _quick_start_commands()


def test_quick_start_installs_the_test_extra_as_ci_does() -> None:
    extra = ["pip_install", "--quiet", "torch==2.13.0", "-e", ".[test]"]
    assert extra in _ci_commands() and extra in _script_commands()
    installer = ["source", "scripts/pip_install.sh"]
    assert installer in _ci_commands() and installer in _script_commands()
