"""`CapabilityTracker`: per-prompt pass rates and the global failure rate (spec §2-3), and each
prompt's recent mean response length (for the token budget and the cost metrics, docs/algorithm.md).
F by generating version lives in `coba_verl.core.failure_rates`, the input checks in `core.counts`.

State is kept in flat arrays indexed by the stable prompt id (a dataset's ``extra_info.index``),
so 10^6 prompts with a window of 3 cost about 44 MB and every operation is vectorised.

Notation: N = id space size, k = window, M = prompts in a step, R = rollouts in a call.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from coba_verl.core.capability import capability_shape, psi
from coba_verl.core.config import CobaConfig, check_kappa
from coba_verl.core.counts import _as_int_array, pass_rate_records, scores_to_successes, totals_by_id
from coba_verl.core.failure_rates import THIS_STEP, VersionFailureRates

__all__ = ["CapabilityTracker", "pass_rate_records", "scores_to_successes"]  # the last two: `core.counts`

logger = logging.getLogger(__name__)

_STATE_VERSION = 4


class CapabilityTracker:
    """Windows of per-prompt (successes, rollouts) and of the global failure rate F_t.

    Per step: any number of :meth:`record` / :meth:`record_scores` calls, then :meth:`end_step`,
    which

    * pushes each appearing prompt's step totals into its ring of its last ``window``
      appearances; p_hat_i = sum successes / sum rollouts over the ring (spec §2);
    * computes S_t = mean_i(successes_i / rollouts_i) over the step's prompts, F_t = 1 - S_t,
      F_bar = mean of the last ``window`` F_t, F_tilde = Psi(F_bar) and the Beta shape
      (alpha_t, beta_t) that drives the NEXT step's allocation (spec §3).

    F is indexed by the policy version that generated the rollouts (`VersionFailureRates`):
    rollouts recorded without a version belong to the step that commits them, so a synchronous
    trainer gets spec §3's F_t per step; a trainer whose generation runs ahead of the update passes
    each rollout's generating version and says which versions may still gain rollouts
    (`hold_open`), and F_bar averages the ``window`` newest complete ones.

    Args:
        num_prompts: Size N of the id space; ids must lie in [0, N).
        window: k, appearances per prompt and steps of F_t averaged (default: `CobaConfig`'s).
        kappa: alpha_t + beta_t (default: `CobaConfig`'s).
    """

    def __init__(
        self, num_prompts: int, window: int = CobaConfig.window, kappa: float = CobaConfig.kappa
    ) -> None:
        if int(num_prompts) != num_prompts or num_prompts < 1:
            raise ValueError(f"num_prompts={num_prompts} must be a positive integer.")
        if int(window) != window or window < 1:
            raise ValueError(f"window={window} must be an integer >= 1.")
        self.num_prompts = int(num_prompts)
        self.window = int(window)
        self.kappa = check_kappa(kappa)
        n, k = self.num_prompts, self.window
        self._succ = np.zeros((n, k), dtype=np.int32)  # (N, k) successes per appearance
        self._roll = np.zeros((n, k), dtype=np.int32)  # (N, k) rollouts per appearance, 0 = empty slot
        self._appearances = np.zeros(n, dtype=np.int64)  # (N,) total appearances; ring slot = count % k
        self._length = np.full((n, k), np.nan, dtype=np.float32)  # (N, k) mean response tokens, NaN = none
        self._failure = VersionFailureRates(n, k)  # F_v of the k newest complete versions, and open ones
        self._steps = 0
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # ids, s, r, v
        self._pending_lengths: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, tokens) per rollout

    # ------------------------------------------------------------------ recording
    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size == 0:
            return
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.num_prompts:
            bad = lo if lo < 0 else hi
            raise ValueError(f"prompt id {bad} is outside the id space [0, {self.num_prompts}).")

    def record(self, ids: Any, successes: Any, rollouts: Any, versions: Any = None) -> None:
        """Add (successes, rollouts) for prompts of the current step; ids may repeat across calls.

        ``versions``: the policy version (>= 0) that generated each entry, one int for all or one per
        entry; None: the step that commits them (see the class docstring).
        """
        ids_a = _as_int_array("ids", ids)
        vers = self._versions(versions, ids_a.size)
        self._append(ids_a, successes, rollouts, vers)

    def _append(self, ids_a: np.ndarray, successes: Any, rollouts: Any, vers: np.ndarray) -> None:
        """`record` after its versions are read: check the counts, then keep one pending entry."""
        succ = _as_int_array("successes", successes)
        roll = _as_int_array("rollouts", rollouts)
        if not (ids_a.shape == succ.shape == roll.shape):
            raise ValueError(
                f"ids, successes and rollouts must have the same length, got "
                f"{ids_a.size}, {succ.size}, {roll.size}."
            )
        self._check_ids(ids_a)
        if np.any(roll < 0) or np.any(succ < 0):
            raise ValueError(
                f"counts must be non-negative, got successes={succ.min()} rollouts={roll.min()}."
            )
        over = succ > roll
        if over.any():
            j = int(np.flatnonzero(over)[0])
            raise ValueError(f"prompt {ids_a[j]}: successes={succ[j]} exceeds rollouts={roll[j]}.")
        if ids_a.size:
            self._pending.append((ids_a.copy(), succ.copy(), roll.copy(), vers))

    @staticmethod
    def _versions(versions: Any, size: int) -> np.ndarray:
        """(size,) int64 generating versions; `THIS_STEP` for None."""
        if versions is None:
            return np.full(size, THIS_STEP, dtype=np.int64)
        vers = np.asarray(versions)
        vers = _as_int_array("versions", np.full(size, vers) if vers.ndim == 0 else vers)
        if vers.size != size:
            raise ValueError(f"versions must have one entry per record ({size}), got {vers.size}.")
        if vers.size and int(vers.min()) < 0:
            raise ValueError(f"a policy version is {int(vers.min())}: versions are >= 0.")
        return vers.copy()

    def set_prior(self, ids: Any, successes: Any, attempts: Any) -> None:
        """Seed prompts not yet drawn with a measured pass rate (successes of attempts, e.g. offline).

        Each record is one appearance of its prompt: the prompt's first allocation uses it as it
        would an observed window, and after ``window`` real appearances it has left the window,
        as an old appearance does. With window k = 3, a prior (3, 8) then steps (2, 4), (1, 4),
        (4, 4) give p_hat = 3/8, then 5/12, 6/16, 7/12. The mean failure rate of the records,
        1 - mean_i(s_i / a_i), is one entry of the F_t window (the step before the first):
        alpha_t and beta_t of the first allocation come from it, and it leaves the window after
        k steps. Calling it again replaces the records of the prompts it names and that entry.
        Prompts without a record behave as before. The records are part of `state_dict`.

        Raises:
            ValueError: lengths differ, an id is outside [0, N) or repeated, attempts <= 0,
                successes < 0 or > attempts, or a step has already been committed.
        """
        ids_a = _as_int_array("ids", ids)
        succ = _as_int_array("successes", successes)
        att = _as_int_array("attempts", attempts)
        if not (ids_a.shape == succ.shape == att.shape):
            raise ValueError(
                "ids, successes and attempts must have the same length, got "
                f"{ids_a.size}, {succ.size}, {att.size}."
            )
        self._check_ids(ids_a)
        uniq, counts = np.unique(ids_a, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(f"prompt {int(uniq[counts > 1][0])} has more than one prior record.")
        for bad, why in (
            (att <= 0, "attempts must be >= 1"),
            (succ < 0, "successes must be >= 0"),
            (succ > att, "successes exceed attempts"),
        ):
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                raise ValueError(f"prompt {ids_a[j]}: prior successes={succ[j]}, attempts={att[j]}: {why}.")
        if self._steps:
            raise ValueError(
                f"priors seed prompts before the first step; this tracker has committed {self._steps} "
                "steps (set priors when training starts, not after a resume: the checkpoint has them)."
            )
        if ids_a.size == 0:
            return
        self._succ[ids_a] = 0
        self._roll[ids_a] = 0
        self._length[ids_a] = np.nan
        self._succ[ids_a, 0] = succ
        self._roll[ids_a, 0] = att
        self._appearances[ids_a] = 1
        prior = self._appearances == 1  # every prompt holding a record (none has real observations yet)
        rate = self._succ[prior, 0] / self._roll[prior, 0]
        self._failure.set_prior(rate)  # leaves after k steps

    def record_scores(self, ids: Any, scores: Any, success_value: float = 1.0, versions: Any = None) -> None:
        """Record one entry per rollout: ``ids`` (R,) prompt id of each rollout, ``scores`` (R,),
        ``versions`` (R,) or one int: the generating policy versions (None: this step, see `record`)."""
        ids_a = _as_int_array("ids", ids)
        succ = scores_to_successes(scores, success_value)
        if ids_a.shape != succ.shape:
            raise ValueError(f"ids and scores must have the same length, got {ids_a.size} and {succ.size}.")
        self.record(ids_a, succ, np.ones_like(succ), versions)

    def record_lengths(self, ids: Any, tokens: Any) -> None:
        """Record the response length in tokens of rollouts of this step: ``ids`` (R,), ``tokens`` (R,).

        A prompt's mean length (`mean_lengths`) averages the rollouts whose length was recorded over
        the same window of appearances as its pass rate.

        Raises:
            ValueError: lengths differ, an id is outside [0, N), or a token count is negative.
        """
        ids_a = _as_int_array("ids", ids)
        tok = _as_int_array("tokens", tokens)
        if ids_a.shape != tok.shape:
            raise ValueError(f"ids and tokens must have the same length, got {ids_a.size} and {tok.size}.")
        self._check_ids(ids_a)
        if tok.size and int(tok.min()) < 0:
            raise ValueError(f"a response length is {int(tok.min())} tokens: lengths are >= 0.")
        if ids_a.size:
            self._pending_lengths.append((ids_a.copy(), tok.copy()))

    def _pending_length_totals(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, rollouts measured) of this step for each of the sorted unique ``ids``."""
        tokens = np.zeros(ids.size, dtype=np.int64)
        measured = np.zeros(ids.size, dtype=np.int64)
        if self._pending_lengths and ids.size:
            rid = np.concatenate([p[0] for p in self._pending_lengths])
            tok = np.concatenate([p[1] for p in self._pending_lengths])
            pos = np.searchsorted(ids, rid)
            hit = (pos < ids.size) & (ids[np.minimum(pos, ids.size - 1)] == rid)
            np.add.at(tokens, pos[hit], tok[hit])
            np.add.at(measured, pos[hit], 1)
        return tokens, measured

    def _pending_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """This step's records, (ids, successes, rollouts, versions), concatenated over `record` calls."""
        if not self._pending:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty
        ids, succ, roll, vers = (np.concatenate(column) for column in zip(*self._pending, strict=True))
        return ids, succ, roll, vers

    def pending_totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This step's recorded totals so far: (unique ids, successes, rollouts), sorted by id."""
        return totals_by_id(*self._pending_columns()[:3])

    def hold_open(self, oldest: int | None) -> None:
        """Versions >= ``oldest`` may still gain rollouts: F_bar leaves them out (class docstring).

        ``None``: every version is complete (a synchronous step ends with nothing in flight). A glue
        whose generation runs ahead of the update calls it before each `end_step` with the oldest
        version that generated a prompt group still in flight, since a rollout is dated to a
        version no older than its group's. The setting holds until the next call.

        Raises:
            CobaRefusal: ``oldest`` is negative (policy versions are >= 0).
        """
        self._failure.hold_open(oldest)

    def end_step(self) -> dict[str, float]:
        """Commit the step: push windows, update F_bar and the Beta shape. Returns step statistics.

        Prompts recorded with zero rollouts in total are ignored (nothing was observed). A step
        with nothing recorded leaves the state unchanged and logs a warning. ``F_t`` is the failure
        rate over all the step's rollouts; F_bar averages F_v over generating versions (class
        docstring), which is the mean of the last k F_t when every rollout is of its own step.
        """
        columns = self._pending_columns()
        ids, succ, roll = totals_by_id(*columns[:3])
        if ids.size and roll.sum() > 0:
            self._failure.add(*columns, step=self._steps)
        self._failure.drop_old_versions()
        self._pending.clear()
        keep = roll > 0
        ids, succ, roll = ids[keep], succ[keep], roll[keep]
        tokens, measured = self._pending_length_totals(ids)
        self._pending_lengths.clear()
        if ids.size == 0:
            logger.warning("CapabilityTracker.end_step() with no recorded rollouts: state unchanged.")
            return {}
        slot = self._appearances[ids] % self.window
        self._succ[ids, slot] = succ
        self._roll[ids, slot] = roll
        with np.errstate(invalid="ignore", divide="ignore"):
            self._length[ids, slot] = np.where(measured > 0, tokens / np.maximum(measured, 1), np.nan)
        self._appearances[ids] += 1

        rate = succ / roll  # (M,) per-prompt success rate of this step
        f_t = 1.0 - float(rate.mean())
        self._steps += 1
        return {
            "F_t": f_t,
            "F_bar": self.f_bar,
            "F_open_versions": float(self._failure.open_versions),
            "F_tilde": self.f_tilde,
            "alpha": self.alpha,
            "beta": self.beta,
            "all_pass_share": float(np.mean(succ == roll)),
            "all_fail_share": float(np.mean(succ == 0)),
            "prompts": float(ids.size),
            "rollouts": float(roll.sum()),
        }

    # ------------------------------------------------------------------ queries
    def window_counts(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """(M,) int64 successes and (M,) int64 rollouts over each prompt's window (0, 0: never seen)."""
        ids_a = _as_int_array("ids", ids)
        self._check_ids(ids_a)
        return self._succ[ids_a].sum(axis=1, dtype=np.int64), self._roll[ids_a].sum(axis=1, dtype=np.int64)

    def pass_rates(self, ids: Any) -> np.ndarray:
        """(M,) float64 p_hat over each prompt's window; NaN for a prompt never seen ("unknown")."""
        succ, roll = self.window_counts(ids)
        out = np.full(succ.size, np.nan)
        np.divide(succ, roll, out=out, where=roll > 0)
        return out

    def mean_lengths(self, ids: Any) -> np.ndarray:
        """(M,) float64 mean response tokens per rollout over each prompt's window (each appearance's
        mean weighted by its rollouts), at least 1 (a rollout ends with a token, so even a prompt whose
        recorded answers were all empty costs one: the token budget refuses a cost of 0); NaN where no
        length was recorded."""
        ids_a = _as_int_array("ids", ids)
        self._check_ids(ids_a)
        length = self._length[ids_a].astype(np.float64)  # (M, k)
        weight = np.where(np.isnan(length), 0, self._roll[ids_a]).astype(np.float64)
        total = np.sum(np.nan_to_num(length) * weight, axis=1)
        count = weight.sum(axis=1)
        out = np.full(ids_a.size, np.nan)
        np.divide(total, count, out=out, where=count > 0)
        return np.where(count > 0, np.maximum(out, 1.0), out)

    def last_pass_rates(self, ids: Any) -> np.ndarray:
        """(M,) float64 success rate at each prompt's last appearance only; NaN if never seen."""
        ids_a = _as_int_array("ids", ids)
        self._check_ids(ids_a)
        count = self._appearances[ids_a]
        slot = (count - 1) % self.window
        succ = self._succ[ids_a, slot].astype(np.int64)
        roll = self._roll[ids_a, slot].astype(np.int64)
        out = np.full(ids_a.size, np.nan)
        np.divide(succ, roll, out=out, where=count > 0)
        return out

    @property
    def steps(self) -> int:
        """Number of committed steps."""
        return self._steps

    @property
    def f_bar_versions(self) -> tuple[int, ...]:
        """The generating versions F_bar averages, oldest first: the ``window`` newest complete ones
        (rollouts recorded without a version: the commit index from 0; the priors: -1)."""
        return self._failure.f_bar_versions

    @property
    def f_bar(self) -> float:
        """Mean of F_v over the ``window`` newest complete generating versions (per step when rollouts
        carry no version: the last k F_t); NaN before any version is complete."""
        return self._failure.f_bar

    @property
    def f_tilde(self) -> float:
        """Psi(F_bar); NaN before the first step."""
        f = self.f_bar
        return psi(f) if np.isfinite(f) else float("nan")

    @property
    def alpha(self) -> float:
        """alpha_t for the next allocation; kappa - 2 before the first step (spec §3)."""
        return self.shape()[0]

    @property
    def beta(self) -> float:
        """beta_t = kappa - alpha_t; 2 before the first step."""
        return self.shape()[1]

    def shape(self, reverse: bool = False) -> tuple[float, float]:
        """(alpha_t, beta_t). ``reverse`` drives alpha by the success rate 1 - F_bar instead (ablation)."""
        return capability_shape(self.f_bar, self.kappa, reverse=reverse)

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Plain arrays and numbers; restores exactly with :meth:`load_state_dict`.

        Rollouts recorded but not yet committed by :meth:`end_step` are included too, each with its
        generating version.
        """
        ids, succ, roll, vers = self._pending_columns()
        length_ids = (
            np.concatenate([p[0] for p in self._pending_lengths]) if self._pending_lengths else ids[:0]
        )
        length_tokens = (
            np.concatenate([p[1] for p in self._pending_lengths]) if self._pending_lengths else ids[:0]
        )
        return {
            "version": _STATE_VERSION,
            "num_prompts": self.num_prompts,
            "window": self.window,
            "kappa": self.kappa,
            "steps": self._steps,
            "successes": self._succ.copy(),
            "rollouts": self._roll.copy(),
            "appearances": self._appearances.copy(),
            "mean_lengths": self._length.copy(),
            **self._failure.state_dict(),  # fail_versions, fail_rate_sums, fail_prompts, open_from
            "pending_ids": ids,
            "pending_successes": succ,
            "pending_rollouts": roll,
            "pending_versions": vers,
            "pending_length_ids": length_ids,
            "pending_length_tokens": length_tokens,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the window and id space must match this tracker's.

        A state of version 2 (a ring of the last k F_t, no generating versions) is read too: each
        F_t becomes F_v of its step, a prior's entry that of the version before the first. Versions 2
        and 3 hold no open versions (`hold_open`): every version they kept is complete.
        """
        state_version = int(state.get("version", -1))
        if state_version not in (2, 3, _STATE_VERSION):
            raise ValueError(
                f"tracker state version {state.get('version')} is not {_STATE_VERSION} (or 2, 3)."
            )
        for key, mine in (("num_prompts", self.num_prompts), ("window", self.window)):
            if int(state[key]) != mine:
                raise ValueError(
                    f"checkpoint tracker has {key}={int(state[key])} but this run has {key}={mine}; "
                    "resume with the same dataset and coba.window."
                )
        if float(state["kappa"]) != self.kappa:
            logger.warning("tracker kappa changes on resume: %s -> %s", state["kappa"], self.kappa)
        self._steps = int(state["steps"])
        self._succ = np.asarray(state["successes"], dtype=np.int32).copy()
        self._roll = np.asarray(state["rollouts"], dtype=np.int32).copy()
        self._appearances = np.asarray(state["appearances"], dtype=np.int64).copy()
        self._length = np.asarray(state["mean_lengths"], dtype=np.float32).copy()
        self._failure.load_state_dict(
            state, self._steps, ring=state_version == 2, has_open=state_version == _STATE_VERSION
        )
        self._pending.clear()
        self._pending_lengths.clear()
        length_ids = np.asarray(state["pending_length_ids"], dtype=np.int64)
        if length_ids.size:
            self.record_lengths(length_ids, state["pending_length_tokens"])
        pending_ids = _as_int_array("ids", state["pending_ids"])
        if pending_ids.size:
            if state_version == 2:  # no versions: every record is of the step that commits it
                versions = self._versions(None, pending_ids.size)
            else:  # the versions as recorded, `THIS_STEP` included
                versions = np.asarray(state["pending_versions"], np.int64).copy()
            self._append(pending_ids, state["pending_successes"], state["pending_rollouts"], versions)
