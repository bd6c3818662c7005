"""Shared pieces of the OpenRLHF tests: OpenRLHF on the path only inside these tests.

The test install puts OpenRLHF 0.11.2 and DeepSpeed in ``.openrlhf-site`` (``.ci/run``), apart from
the environment veRL's processes import from; vLLM and flash-attn do not install on a CPU machine,
so ``tests/openrlhf/scaffold`` holds import stubs for them (test scaffolding, never shipped). The
`orl` fixture puts both folders on ``sys.path`` for the tests of this folder only, and takes them
and the stubs off again afterwards, so that the other tests of a pytest process see neither.

Accelerate decides at import whether DeepSpeed is there (``accelerate.utils`` defines
``DeepSpeedSchedulerWrapper``, which OpenRLHF imports, only then). When an earlier test of the same
process imported it without DeepSpeed on the path (any test that loads veRL, e.g. the lab's), the
fixture swaps the accelerate modules: OpenRLHF's tests see an accelerate imported with DeepSpeed
there, the other tests keep the one they had.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPENRLHF_SITE = ROOT / ".openrlhf-site"
SCAFFOLD = Path(__file__).resolve().parent / "scaffold"
HERE = str(Path(__file__).resolve().parent)
SKIP_REASON = (
    f"OpenRLHF is not installed in {OPENRLHF_SITE}: pip install --no-deps --target .openrlhf-site "
    "openrlhf==0.11.2 deepspeed==0.19.6 (the full line is in .ci/run)"
)


#: The accelerate modules imported with DeepSpeed on the path, kept between OpenRLHF test modules.
_ACCELERATE_WITH_DEEPSPEED: dict[str, ModuleType] = {}


def _swap_accelerate(into: dict[str, ModuleType]) -> dict[str, ModuleType]:
    """Take the accelerate modules out of ``sys.modules`` and put ``into`` in; return those taken."""
    taken = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "accelerate"}
    for name in taken:
        del sys.modules[name]
    sys.modules.update(into)
    return taken


@pytest.fixture(scope="module")
def orl():
    """``coba_verl.openrlhf`` imported against the OpenRLHF folder (skips when it is absent)."""
    if not (OPENRLHF_SITE / "openrlhf").is_dir():
        pytest.skip(SKIP_REASON)
    added = [p for p in (str(SCAFFOLD), str(OPENRLHF_SITE), HERE) if p not in sys.path]
    sys.path[:0] = added
    outside = _swap_accelerate(_ACCELERATE_WITH_DEEPSPEED)
    try:
        import coba_verl.openrlhf as package

        yield package
    finally:
        _ACCELERATE_WITH_DEEPSPEED.clear()
        _ACCELERATE_WITH_DEEPSPEED.update(_swap_accelerate(outside))
        for p in added:
            sys.path.remove(p)
        for name in [m for m in sys.modules if m.split(".")[0] in ("vllm", "flash_attn")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def tiny_run(orl):
    import tiny_run

    return tiny_run
