"""`VersionFailureRates`: the global failure rate F by generating policy version, and F_bar, the
mean of its ``window`` newest complete versions (spec §3), as `CapabilityTracker` keeps them.

F is indexed by the policy version that generated the rollouts. Rollouts recorded without a
version belong to the step that commits them, so a trainer whose step both generates and trains
(the synchronous case) gets spec §3's F_t per step. A trainer whose generation runs ahead of the
update passes each rollout's generating version: F_v = 1 - mean over prompts of their success
rates among version v's rollouts (all that reached the tracker so far, over any number of
commits), and F_bar = the mean of F_v over the ``window`` newest *complete* versions. A version
is complete once no rollout of it can still arrive: the trainer says which versions may still
gain rollouts (`hold_open`), and F_bar leaves them out until then. Rollouts of one version reach
the tracker in an order that depends on their outcome (under DAPO, all-pass and all-fail groups
are evicted as soon as they finish, groups with a reward spread wait to be trained), so an
incomplete F_v is biased; averaged in with a full vote, it would move F_bar by its bias. A
rollout from a version older than the k complete ones does not enter F_bar (it still enters its
prompt's pass rate).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coba_verl.refusal import CobaRefusal

#: The F entry of the priors: the version before the first (`CapabilityTracker.set_prior`).
PRIOR_VERSION = -1
#: The version of pending rollouts recorded without one: the step that commits them.
THIS_STEP = -2


class VersionFailureRates:
    """Per generating version, the sum over prompts of their success rates and the prompt count.

    Holds the ``window`` newest complete versions (those F_bar averages) and every open one.

    Args:
        num_prompts: Size N of the prompt id space (versions and ids share one int key per pair).
        window: k, the complete versions F_bar averages.
    """

    def __init__(self, num_prompts: int, window: int) -> None:
        self.num_prompts = num_prompts
        self.window = window
        # generating version -> (sum over prompts of their success rates, prompts)
        self._by_version: dict[int, tuple[float, int]] = {}
        self._open_from: int | None = None  # versions >= this may still gain rollouts (`hold_open`)

    def set_prior(self, rates: np.ndarray) -> None:
        """The priors' success rates, one per prompt with a record, as the only entry: the version
        before the first (it leaves F_bar after k steps)."""
        self._by_version = {PRIOR_VERSION: (float(rates.sum()), int(rates.size))}

    def add(self, ids: np.ndarray, succ: np.ndarray, roll: np.ndarray, vers: np.ndarray, step: int) -> None:
        """Add a commit's rollouts, (ids, successes, rollouts, versions) columns, to F_v of the
        versions that generated them; `THIS_STEP` entries are of version ``step``.

        Per (version, prompt): the prompt's success rate among that version's rollouts of this
        commit; F_v's sums gain one rate per such pair.
        """
        vers = np.where(vers == THIS_STEP, step, vers)
        key = (vers - PRIOR_VERSION) * self.num_prompts + ids  # one int per (version, prompt)
        pairs, inv = np.unique(key, return_inverse=True)
        pair_succ = np.bincount(inv, weights=succ, minlength=pairs.size)
        pair_roll = np.bincount(inv, weights=roll, minlength=pairs.size)
        seen = pair_roll > 0
        pair_rate = pair_succ[seen] / pair_roll[seen]
        pair_version = pairs[seen] // self.num_prompts + PRIOR_VERSION
        for version in np.unique(pair_version).tolist():
            rates = pair_rate[pair_version == version]
            total, count = self._by_version.get(version, (0.0, 0))
            self._by_version[version] = (total + float(rates.sum()), count + int(rates.size))

    def hold_open(self, oldest: int | None) -> None:
        """Versions >= ``oldest`` may still gain rollouts (None: every version is complete).

        Raises:
            CobaRefusal: ``oldest`` is negative (policy versions are >= 0).
        """
        if oldest is not None and int(oldest) < 0:
            raise CobaRefusal(
                f"oldest open policy version {oldest} is negative: versions are >= 0 (or None, none open)."
            )
        self._open_from = None if oldest is None else int(oldest)

    def complete_versions(self) -> list[int]:
        """Versions with rollouts that no longer gain any, oldest first."""
        return sorted(v for v in self._by_version if self._open_from is None or v < self._open_from)

    def drop_old_versions(self) -> None:
        """Keep the k newest complete versions (those F_bar averages) and every open one."""
        for version in self.complete_versions()[: -self.window]:
            del self._by_version[version]

    @property
    def open_versions(self) -> int:
        """Versions kept that may still gain rollouts."""
        return len(self._by_version) - len(self.complete_versions())

    @property
    def f_bar_versions(self) -> tuple[int, ...]:
        """The versions F_bar averages, oldest first: the ``window`` newest complete ones."""
        return tuple(self.complete_versions()[-self.window :])

    @property
    def f_bar(self) -> float:
        """Mean of F_v over `f_bar_versions`; NaN before any version is complete."""
        rates = [self._by_version[v] for v in self.f_bar_versions]
        return float(np.mean([1.0 - total / count for total, count in rates])) if rates else float("nan")

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The entries of the tracker's state that hold F (``fail_*``) and the open versions."""
        fail_versions = sorted(self._by_version)
        return {
            "fail_versions": np.asarray(fail_versions, dtype=np.int64),
            "fail_rate_sums": np.asarray([self._by_version[v][0] for v in fail_versions], dtype=np.float64),
            "fail_prompts": np.asarray([self._by_version[v][1] for v in fail_versions], dtype=np.int64),
            "open_from": self._open_from,
        }

    def load_state_dict(self, state: dict[str, Any], steps: int, *, ring: bool, has_open: bool) -> None:
        """Restore from a tracker state that committed ``steps`` steps.

        ``ring``: the state holds a ring of the last k F_t (``fail_window``, version 2) rather than
        F_v entries (`_failure_rates_of_ring`); ``has_open``: it holds ``open_from`` (a state
        without it kept no open versions: every version in it is complete).
        """
        if ring:
            self._by_version = _failure_rates_of_ring(np.asarray(state["fail_window"], np.float64), steps)
        else:
            self._by_version = {
                int(v): (float(total), int(count))
                for v, total, count in zip(
                    state["fail_versions"], state["fail_rate_sums"], state["fail_prompts"], strict=True
                )
            }
        open_from = state["open_from"] if has_open else None
        self._open_from = None if open_from is None else int(open_from)


def _failure_rates_of_ring(ring: np.ndarray, steps: int) -> dict[int, tuple[float, int]]:
    """A version-2 state's ring of the last k F_t (slot = step % k; slot k - 1 holds the priors' F
    until step k - 1 overwrites it) as F_v entries of one prompt each: F_v = 1 - total / count."""
    k = ring.size
    out: dict[int, tuple[float, int]] = {}
    for slot in np.flatnonzero(np.isfinite(ring)).tolist():
        step = slot + ((steps - 1 - slot) // k) * k if steps > slot else PRIOR_VERSION
        out[step] = (1.0 - float(ring[slot]), 1)
    return out
