"""Shared pieces of the OpenRLHF tests: OpenRLHF on the path only inside these tests.

The test install puts OpenRLHF 0.11.2 and DeepSpeed in ``.openrlhf-site`` (``.ci/run``), apart from
the environment veRL's processes import from; vLLM and flash-attn do not install on a CPU machine,
so ``tests/openrlhf/scaffold`` holds import stubs for them (test scaffolding, never shipped). The
`orl` fixture puts both folders on ``sys.path`` for the tests of this folder only, and takes them
and the stubs off again afterwards, so that the other tests of a pytest process see neither.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPENRLHF_SITE = ROOT / ".openrlhf-site"
SCAFFOLD = Path(__file__).resolve().parent / "scaffold"
HERE = str(Path(__file__).resolve().parent)
SKIP_REASON = (
    f"OpenRLHF is not installed in {OPENRLHF_SITE}: pip install --no-deps --target .openrlhf-site "
    "openrlhf==0.11.2 deepspeed==0.19.6 (the full line is in .ci/run)"
)


@pytest.fixture(scope="module")
def orl():
    """``coba_verl.openrlhf`` imported against the OpenRLHF folder (skips when it is absent)."""
    if not (OPENRLHF_SITE / "openrlhf").is_dir():
        pytest.skip(SKIP_REASON)
    added = [p for p in (str(SCAFFOLD), str(OPENRLHF_SITE), HERE) if p not in sys.path]
    sys.path[:0] = added
    try:
        import coba_verl.openrlhf as package

        yield package
    finally:
        for p in added:
            sys.path.remove(p)
        for name in [m for m in sys.modules if m.split(".")[0] in ("vllm", "flash_attn")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def tiny_run(orl):
    import tiny_run

    return tiny_run
