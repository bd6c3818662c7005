"""Global capability -> Beta shape, and the adaptive saturation temperature (spec §3-4).

One function per equation, named with the spec's symbols.
"""

from __future__ import annotations

import math

import numpy as np

from coba_verl.core.config import check_kappa

#: Var of Uniform(0, 1) rounded as the release does; the adaptive tau saturates there (spec §4).
TAU_VARIANCE_SCALE = 0.1667
TAU_MIN = 3.0
TAU_SPAN = 9.0


def psi(f_bar: float) -> float:
    """F_tilde = Psi(F_bar): F_bar if F_bar > 0.5 else sigmoid(10 (F_bar - 0.5)) (spec §3) [paper].

    Below 0.5 the sigmoid lies under the identity (Psi(F_bar) < F_bar for 0.0072 < F_bar < 0.5;
    slope 2.5 at 0.5), so once the model fails less than half the time, the Beta mode, which
    equals F_tilde (`beta_shape`), moves towards hard prompts faster than F_bar falls.
    Psi(0.45) = 0.378, Psi(0.30) = 0.119.
    """
    f_bar = float(f_bar)
    if not 0.0 <= f_bar <= 1.0:
        raise ValueError(f"F_bar={f_bar} is not a failure rate in [0, 1].")
    if f_bar > 0.5:
        return f_bar
    return float(1.0 / (1.0 + np.exp(-10.0 * (f_bar - 0.5))))


def beta_shape(f_tilde: float, kappa: float) -> tuple[float, float]:
    """(alpha_t, beta_t) with alpha_t = clip(1 + (kappa - 2) F_tilde, 1, kappa - 1), beta_t = kappa - alpha_t.

    Spec §3 [paper form]. Unclipped, the Beta mode (alpha - 1) / (kappa - 2) equals F_tilde:
    exploit easy prompts while the model fails a lot, explore hard ones as it improves.
    kappa = 11, F_tilde = 0.696 -> (7.264, 3.736).
    """
    kappa = check_kappa(kappa)
    alpha = float(np.clip(1.0 + (kappa - 2.0) * float(f_tilde), 1.0, kappa - 1.0))
    return alpha, kappa - alpha


def initial_beta_shape(kappa: float) -> tuple[float, float]:
    """(alpha, beta) = (kappa - 2, 2) before the first tracker update (spec §3)."""
    return float(kappa) - 2.0, 2.0


def capability_shape(f_bar: float, kappa: float, *, reverse: bool = False) -> tuple[float, float]:
    """(alpha_t, beta_t) from the averaged failure rate: `beta_shape` of Psi(F_bar) (spec §3).

    F_bar = NaN (no step observed yet) gives the initial shape (kappa - 2, 2). ``reverse`` drives
    alpha by the success rate 1 - F_bar instead (the paper's reverse-schedule ablation). The
    tracker and `coba_verl.allocate` both take their shape from here.
    """
    if math.isnan(f_bar):
        return initial_beta_shape(kappa)
    return beta_shape(psi(1.0 - f_bar if reverse else f_bar), kappa)


def adaptive_tau(p_clipped: np.ndarray) -> float:
    """tau = 3 + 9 * clip(Var(p) / 0.1667, 0, 1) over the prompts entering the optimiser (spec §4) [release].

    A batch of alike prompts (low variance) saturates fast (tau = 3); a spread batch slowly (up to 12).
    """
    p = np.asarray(p_clipped, dtype=np.float64)
    if p.size == 0:
        return TAU_MIN
    var = float(np.var(p))
    return TAU_MIN + TAU_SPAN * float(np.clip(var / TAU_VARIANCE_SCALE, 0.0, 1.0))
