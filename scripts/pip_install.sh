# shellcheck shell=bash
# Sourced by scripts/quickstart.sh and .ci/run: `pip_install ARGS...` installs into the active
# virtual environment (or --target) with uv's `uv pip install`, which takes the same arguments and
# installs the test extra in about a quarter of pip's time, and with pip where uv cannot be had.
#
# uv itself comes from the package registry into the active environment (`pip install uv`, a few
# seconds) unless one is on PATH. uv reads no pip configuration: pip's find-links and index
# variables (PIP_FIND_LINKS, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL) are passed on as uv's. If uv
# cannot be installed, or an install with it fails, the same install runs with pip (said on
# stderr), after pip itself is brought to 24 or newer. COBA_INSTALLER=pip uses pip throughout.
#
# uv compiles the installed modules to bytecode as pip does (--compile-bytecode): uv leaves that to the
# first import by default, and where PYTHONDONTWRITEBYTECODE is set (as on many CI machines) every
# process, Ray's workers included, then compiles torch, transformers and veRL again at each start
# (measured: the import of the trainer's modules 13.8 s instead of 6.1 s, the test suite twice as long).
# COBA_BYTECODE=lazy leaves the compiling to the first import instead (uv's default): the quick start
# sets it and lets its own processes write bytecode (PYTHONDONTWRITEBYTECODE unset), so that only the
# modules a run imports are compiled, once: an install 4 s instead of 21.5 s (torch==2.13.0 -e
# ".[test]" from uv's warm cache), for about 9 s more of compiling in the run's first imports.

pip_install() {
  if [[ -z ${COBA_INSTALLER_CHOSEN:-} ]]; then
    COBA_INSTALLER_CHOSEN=pip
    if [[ ${COBA_INSTALLER:-uv} == uv ]]; then
      if command -v uv >/dev/null 2>&1 || python -m pip install --quiet uv; then
        COBA_INSTALLER_CHOSEN=uv
      else
        echo "uv could not be installed: installing with pip" >&2
      fi
    fi
  fi
  if [[ $COBA_INSTALLER_CHOSEN == uv ]]; then
    local links=${PIP_FIND_LINKS:-}
    local compile=(--compile-bytecode)
    [[ ${COBA_BYTECODE:-} == lazy ]] && compile=()
    if UV_FIND_LINKS=${UV_FIND_LINKS:-${links// /,}} UV_INDEX_URL=${UV_INDEX_URL:-${PIP_INDEX_URL:-}} \
      UV_EXTRA_INDEX_URL=${UV_EXTRA_INDEX_URL:-${PIP_EXTRA_INDEX_URL:-}} uv pip install "${compile[@]}" "$@"; then
      return 0
    fi
    echo "uv pip install $* failed: the same with pip" >&2
  fi
  if [[ -z ${COBA_PIP_UPGRADED:-} ]]; then
    python -m pip install --quiet --upgrade "pip>=24"
    COBA_PIP_UPGRADED=1
  fi
  python -m pip install "$@"
}
