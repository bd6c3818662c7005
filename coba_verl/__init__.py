"""coba-verl: CoBA-RL per-prompt rollout budgets for GRPO: a veRL plugin, a TRL trainer and an
OpenRLHF entry point.

Importing this package loads the core only (`coba_verl.core`, plain numpy), which is all the base
install (``pip install -e .`` in a clone) brings. Each other part comes with an extra:

    coba-verl[verl]   coba_verl.verl_plugin, coba_verl.main (``coba-verl train``), coba_verl.cpu,
                      coba_verl.data (``coba-verl data``)
    coba-verl[lab]    coba_verl.lab (``coba-verl lab``); brings veRL too
    coba-verl[trl]    coba_verl.trl; TRL without veRL, in an environment of its own
    coba-verl[openrlhf]  coba_verl.openrlhf (``python -m coba_verl.openrlhf.train``); OpenRLHF
                      without veRL, in an environment of its own
    coba-verl[test]   the test suite and linters (veRL and the lab; TRL and OpenRLHF go apart)
"""

from coba_verl.core import (
    Allocation,
    BudgetAllocator,
    CapabilityTracker,
    CobaConfig,
    CobaValue,
    KnapsackValue,
)
from coba_verl.core.api import allocate

__version__ = "0.1.0"

__all__ = [
    "Allocation",
    "BudgetAllocator",
    "CapabilityTracker",
    "CobaConfig",
    "CobaValue",
    "KnapsackValue",
    "allocate",
    "__version__",
]
