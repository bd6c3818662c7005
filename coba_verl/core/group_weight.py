"""How much each prompt group weighs in the step's policy loss (``coba.group_weight``).

Under a token- or rollout-averaged loss (veRL's ``loss_agg_mode=token-mean``, TRL's default loss,
the lab's ``agg_loss``) every rollout of a step weighs alike, so a prompt group's share of the
gradient grows with its size B_g. Under uniform GRPO every group has n rollouts and that is
harmless; under CoBA-RL a prompt at B_up = 128 weighs 64 times one at B_low = 2. The paper
changes nothing in GRPO's update (spec ``shared/spec/COBA_RL.md`` §1, §7) and the authors' release
trains with token-mean, so both keep that weighting (``proportional``); ``equal`` removes it. Neither
the spec nor a peer defines ``equal``: it is this package's option (docs/algorithm.md, "Group weight").

Every framework applies the same rule the same way: it multiplies each rollout's advantage by
`rollout_weights` before the policy loss, so the three cannot disagree about what a value means.

Notation: R rollouts in the step's batch, G prompt groups among them, B_g rollouts in group g.

    index:    (R,) group key of each rollout (any hashable-as-numpy values; rows of a group need
              not be contiguous)
    weights:  (R,) float64, one factor per rollout
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

from coba_verl.refusal import CobaRefusal

__all__ = [
    "GROUP_WEIGHTS",
    "RENAMED_GROUP_WEIGHTS",
    "AggregationModes",
    "check_aggregation",
    "check_group_weight",
    "rollout_weights",
]

logger = logging.getLogger(__name__)

#: Values of ``coba.group_weight``.
#:
#: ``proportional``: every rollout keeps its advantage (factor 1), so a group weighs in proportion
#: to its size B_g (and, under a token-averaged loss, its response lengths): the paper's and the
#: release's update.
#: ``equal``: each rollout's advantage is multiplied by (R / G) / B_g, so every group's rollouts
#: sum to the same weight R / G whatever B_g; the factor is exactly 1 when all groups have the
#: same size (uniform GRPO with total divisible by M).
GROUP_WEIGHTS: tuple[str, ...] = ("proportional", "equal")

#: Old spellings still accepted for one release, each mapped to its new name with a
#: `DeprecationWarning`. ``tokens`` was ``proportional``'s name until it was renamed so that
#: ``tokens`` means one thing in the ``coba`` group: ``budget_unit=tokens``, a token budget.
RENAMED_GROUP_WEIGHTS: dict[str, str] = {"tokens": "proportional"}

_warned_renames: set[tuple[str, str]] = set()  # (name, old value) already warned in this process


def check_group_weight(value: object, name: str = "coba.group_weight") -> str:
    """The `GROUP_WEIGHTS` value ``value`` names, else a refusal naming it and the choices.

    An old spelling (`RENAMED_GROUP_WEIGHTS`) gives its new name, with a `DeprecationWarning` and
    a WARNING log line the first time this process sees it under ``name``.
    """
    if isinstance(value, str) and value in RENAMED_GROUP_WEIGHTS:
        new = RENAMED_GROUP_WEIGHTS[value]
        if (name, value) not in _warned_renames:
            _warned_renames.add((name, value))
            message = (
                f"{name}={value!r} is deprecated and will be refused in the next release: it is now "
                f"spelt {name}={new!r} (the same update: advantages unchanged, a group weighs in "
                f"proportion to its size), so that 'tokens' only means budget_unit=tokens."
            )
            logger.warning(message)
            warnings.warn(message, DeprecationWarning, stacklevel=2)
        return new
    if not isinstance(value, str) or value not in GROUP_WEIGHTS:
        raise CobaRefusal(f"{name}={value!r} is unknown; choose one of {GROUP_WEIGHTS}.")
    return value


def rollout_weights(index: np.ndarray, group_weight: str) -> np.ndarray:
    """Per-rollout advantage factors w_r of one step's batch.

    ``proportional``: w_r = 1. ``equal``: w_r = (R / G) / B_{g(r)}, so that for every group g

        sum_{r in g} w_r = R / G        and        sum_r w_r = R,

    i.e. each group carries the same total weight and the batch's total weight is unchanged.

    Args:
        index: (R,) group key of each rollout, e.g. ``[7, 7, 3, 7, 3]`` (R = 5, G = 2).
        group_weight: one of `GROUP_WEIGHTS` (or an old spelling, see `check_group_weight`).

    Returns:
        (R,) float64, e.g. ``equal`` on the index above: ``[5/6, 5/6, 5/4, 5/6, 5/4]``.

    Raises:
        ValueError: an unknown ``group_weight``; an empty or not one-dimensional ``index``.
    """
    group_weight = check_group_weight(group_weight)
    index = np.asarray(index)
    if index.ndim != 1 or index.size == 0:
        raise ValueError(f"index must be a non-empty 1-D array of group keys, got shape {index.shape}.")
    if group_weight == "proportional":
        return np.ones(index.size, dtype=np.float64)
    _, inverse, sizes = np.unique(index, return_inverse=True, return_counts=True)
    # [7, 7, 3, 7, 3] -> inverse [1, 1, 0, 1, 0], sizes [2, 3] -> B_g per rollout [3, 3, 2, 3, 2]
    r, g = index.size, sizes.size
    return (r / g) / sizes[inverse.reshape(-1)].astype(np.float64)


@dataclass(frozen=True)
class AggregationModes:
    """A framework's loss aggregation modes, sorted by what ``coba.group_weight=equal`` does under them.

    Each framework's glue holds one, in that framework's names (veRL's ``actor.loss_agg_mode``,
    TRL's ``loss_type``, OpenRLHF's ``--actor.loss_agg_mode``); `check_aggregation` reads it.

    Attributes:
        setting: the framework's name of the mode's key, e.g. ``actor_rollout_ref.actor.loss_agg_mode``.
        exact: modes under which ``equal`` gives every group exactly the same weight (w_r = 1 / R);
            the first is the one a message suggests.
        by_length: modes that weigh each rollout by its response length (the frameworks' defaults
            among them).
        key: how the framework spells ``coba.group_weight`` (OpenRLHF: ``--coba.group_weight``).
    """

    setting: str
    exact: tuple[str, ...]
    by_length: tuple[str, ...]
    key: str = "coba.group_weight"


def check_aggregation(group_weight: str, mode: str, modes: AggregationModes) -> None:
    """Say how exact ``group_weight`` is under a framework's loss aggregation ``mode``.

    A per-group factor c_g gives group g the weight c_g * sum_{r in g} w_r, w_r the weight the
    aggregation gives rollout r (docs/algorithm.md, "Group weight"). ``proportional`` changes nothing,
    so every mode is fine. ``equal``: exact under ``modes.exact`` (w_r = 1 / R); under
    ``modes.by_length`` (w_r proportional to the response length) an
    INFO line says that a group still weighs by its mean response length, as under uniform GRPO
    (information, not a fault: a default run should not warn); any other mode is refused, since
    what a per-group advantage factor does to it is not known.

    Args:
        group_weight, mode: the configured values.
        modes: the framework's modes of each kind, and its names of the two settings.

    Raises:
        ValueError: ``equal`` with a mode in neither list, naming both values.
    """
    exact, by_length, setting, key = modes.exact, modes.by_length, modes.setting, modes.key
    group_weight = check_group_weight(group_weight, key)
    if group_weight == "proportional" or mode in exact:
        return
    if mode in by_length:
        logger.info(
            "%s=%r with %s=%r: the group-size factor B_i is removed, but this mode weighs every rollout "
            "by its tokens, so a prompt group still weighs in proportion to its mean response length (as "
            "under uniform GRPO). For exactly equal group weights set %s=%r.",
            key, group_weight, setting, mode, setting, exact[0],
        )  # fmt: skip
        return
    raise CobaRefusal(
        f"{key}={group_weight!r} is not supported with {setting}={mode!r}: coba-verl knows how per-group "
        f"advantage factors weigh groups only under {exact + by_length}. Set {setting} to one of those "
        f"({exact[0]!r} is exact), or {key}='proportional'."
    )
