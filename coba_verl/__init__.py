"""coba-verl: CoBA-RL per-prompt rollout budgets for GRPO, as a veRL plugin.

The core (`coba_verl.core`) is plain numpy; the veRL glue lives in `coba_verl.verl_plugin`
and is imported only by the trainer entry point.
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
