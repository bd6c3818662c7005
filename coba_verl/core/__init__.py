"""Core CoBA-RL maths: tracker, value functions, exact optimisers. Imports numpy only."""

from coba_verl.core.allocator import Allocation, BudgetAllocator, uniform_split
from coba_verl.core.api import allocate
from coba_verl.core.capability import adaptive_tau, beta_shape, capability_shape, psi
from coba_verl.core.config import CobaConfig
from coba_verl.core.gains import GainModel, GeometricGains, KnapsackGains
from coba_verl.core.group_weight import GROUP_WEIGHTS, rollout_weights
from coba_verl.core.knapsack import allocate_knapsack
from coba_verl.core.release import allocate_release
from coba_verl.core.solvers import check_budget, objective, solve, solve_dp, solve_heap, solve_threshold
from coba_verl.core.tracker import CapabilityTracker, scores_to_successes
from coba_verl.core.values import CobaValue, KnapsackValue, beta_density, check_pass_rates, saturation

__all__ = [
    "GROUP_WEIGHTS",
    "Allocation",
    "BudgetAllocator",
    "CapabilityTracker",
    "CobaConfig",
    "CobaValue",
    "GainModel",
    "GeometricGains",
    "KnapsackGains",
    "KnapsackValue",
    "adaptive_tau",
    "allocate",
    "allocate_knapsack",
    "allocate_release",
    "beta_density",
    "beta_shape",
    "capability_shape",
    "check_budget",
    "check_pass_rates",
    "objective",
    "psi",
    "rollout_weights",
    "saturation",
    "scores_to_successes",
    "solve",
    "solve_dp",
    "solve_heap",
    "solve_threshold",
    "uniform_split",
]
