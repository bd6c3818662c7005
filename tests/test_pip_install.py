"""``scripts/pip_install.sh``: installs with uv when it can be had, with pip otherwise, with the same
arguments; pip's find-links and index variables reach uv. Driven with stand-in ``uv`` and ``python``
commands that record how they were called (nothing is installed, nothing is fetched)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pip_install.sh"


def _stand_in(folder: Path, name: str, status: int) -> None:
    """A command ``name`` that appends its arguments and uv's variables to ``calls`` and exits ``status``."""
    path = folder / name
    path.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "{name} $* | links=${{UV_FIND_LINKS-unset}} extra=${{UV_EXTRA_INDEX_URL-unset}}" \\\n'
        f'  >> "{folder}/calls"\n'
        f"exit {status}\n",
        encoding="utf-8",
    )
    path.chmod(0o755)


def _install(tmp_path: Path, *, uv: int | None, installer: str | None = None, **env: str) -> list[str]:
    """Source the script and call ``pip_install --quiet -e .[test]`` twice; the stand-ins' calls.

    ``uv``: the stand-in uv's exit status, or None for no uv on PATH (and ``pip install uv`` fails).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if uv is not None:
        _stand_in(bin_dir, "uv", uv)
    python = bin_dir / "python"  # 'python -m pip install uv' fails: no uv to be had
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "python $*" >> "{bin_dir}/calls"\n'
        '[[ "$*" == "-m pip install --quiet uv" ]] && exit 1\nexit 0\n',
        encoding="utf-8",
    )
    python.chmod(0o755)
    variables = {"PATH": f"{bin_dir}:/usr/bin:/bin", **env}
    if installer:
        variables["COBA_INSTALLER"] = installer
    done = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "{SCRIPT}"; pip_install --quiet -e ".[test]"; '
         'pip_install --no-deps --target .trl-site "trl>=1.16,<1.17"'],  # fmt: skip
        env=variables, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return (bin_dir / "calls").read_text(encoding="utf-8").splitlines()


def test_uv_installs_with_the_same_arguments_compiled_to_bytecode_and_pips_find_links_and_index(tmp_path):
    calls = _install(
        tmp_path, uv=0, PIP_FIND_LINKS="/opt/wheels /srv/more", PIP_EXTRA_INDEX_URL="file:///opt/pypi/simple"
    )
    assert calls == [
        "uv pip install --compile-bytecode --quiet -e .[test] | links=/opt/wheels,/srv/more extra=file:///opt/pypi/simple",
        "uv pip install --compile-bytecode --no-deps --target .trl-site trl>=1.16,<1.17 "
        "| links=/opt/wheels,/srv/more extra=file:///opt/pypi/simple",
    ]


def test_lazy_bytecode_leaves_compiling_to_the_first_import(tmp_path):
    """``COBA_BYTECODE=lazy`` (the quick start's): uv without ``--compile-bytecode``, nothing else changed."""
    calls = _install(tmp_path, uv=0, COBA_BYTECODE="lazy")
    assert calls == [
        "uv pip install --quiet -e .[test] | links= extra=",
        "uv pip install --no-deps --target .trl-site trl>=1.16,<1.17 | links= extra=",
    ]


def test_without_uv_pip_installs_once_upgraded(tmp_path):
    calls = _install(tmp_path, uv=None)
    assert calls == [
        "python -m pip install --quiet uv",  # uv tried once, from the registry
        "python -m pip install --quiet --upgrade pip>=24",
        "python -m pip install --quiet -e .[test]",
        "python -m pip install --no-deps --target .trl-site trl>=1.16,<1.17",
    ]


def test_a_failed_uv_install_is_redone_with_pip(tmp_path):
    calls = _install(tmp_path, uv=1)
    assert [c.split(" |")[0] for c in calls] == [
        "uv pip install --compile-bytecode --quiet -e .[test]",
        "python -m pip install --quiet --upgrade pip>=24",
        "python -m pip install --quiet -e .[test]",
        "uv pip install --compile-bytecode --no-deps --target .trl-site trl>=1.16,<1.17",
        "python -m pip install --no-deps --target .trl-site trl>=1.16,<1.17",
    ]


def test_coba_installer_pip_never_calls_uv(tmp_path):
    calls = _install(tmp_path, uv=0, installer="pip")
    assert not [c for c in calls if c.startswith("uv ")]
    assert calls[-1] == "python -m pip install --no-deps --target .trl-site trl>=1.16,<1.17"
