"""Numeric pins from the spec (§3-4): Psi, the Beta shape, its mode, tau, and the marginal gain."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from coba_verl.core.capability import adaptive_tau, beta_shape, initial_beta_shape, psi
from coba_verl.core.values import CobaValue, beta_density, saturation


def test_psi_pins_from_the_spec():
    assert psi(0.45) == pytest.approx(0.378, abs=5e-4)
    assert psi(0.30) == pytest.approx(0.119, abs=5e-4)
    assert psi(0.7) == 0.7  # identity above one half
    assert psi(0.5) == pytest.approx(0.5)  # continuous at the switch


def test_beta_shape_at_kappa_11_and_f_tilde_0_696():
    alpha, beta = beta_shape(0.696, 11.0)
    assert alpha == pytest.approx(7.26, abs=5e-3)
    assert beta == pytest.approx(3.74, abs=5e-3)
    assert alpha + beta == pytest.approx(11.0)


@pytest.mark.parametrize("f_tilde", [0.0, 0.1, 0.35, 0.5, 0.8, 1.0])
def test_beta_mode_equals_f_tilde(f_tilde):
    alpha, beta = beta_shape(f_tilde, 11.0)
    if alpha > 1 and beta > 1:
        assert (alpha - 1) / (alpha + beta - 2) == pytest.approx(f_tilde)
        grid = np.linspace(1e-4, 1 - 1e-4, 200001)
        assert grid[np.argmax(stats.beta.pdf(grid, alpha, beta))] == pytest.approx(f_tilde, abs=1e-3)
    assert 1.0 <= alpha <= 10.0


def test_shape_before_the_first_update_is_kappa_minus_two_and_two():
    assert initial_beta_shape(11.0) == (9.0, 2.0)
    assert initial_beta_shape(7.0) == (5.0, 2.0)


def test_psi_rejects_values_outside_the_unit_interval():
    with pytest.raises(ValueError, match="F_bar=1.2"):
        psi(1.2)


def test_adaptive_tau_spans_three_to_twelve():
    assert adaptive_tau(np.full(10, 0.4)) == 3.0
    assert adaptive_tau(np.array([0.01, 0.99] * 5)) == 12.0  # Var = 0.2401 > 0.1667, clipped
    mid = np.array([0.2, 0.6])
    assert adaptive_tau(mid) == pytest.approx(3 + 9 * 0.04 / 0.1667)


def test_marginal_gain_matches_value_difference_and_strictly_decreases():
    p = np.array([0.01, 0.1, 0.5, 0.9, 0.99])
    value = CobaValue(7.26, 3.74, tau=6.0)
    gains = value.gains(p)
    b = np.arange(2, 129)
    table = np.stack([gains.gain(np.full(p.size, x)) for x in b])  # (B, M)
    diffs = np.stack([gains.value(np.full(p.size, x + 1)) - gains.value(np.full(p.size, x)) for x in b])
    np.testing.assert_allclose(table, diffs, rtol=1e-9, atol=1e-15)
    assert np.all(np.diff(table, axis=0) < 0)
    # V = eta * BetaPdf, straight from the spec's formulas.
    direct = saturation(np.full(p.size, 16), p, 6.0) * stats.beta.pdf(p, 7.26, 3.74)
    np.testing.assert_allclose(gains.value(np.full(p.size, 16)), direct, rtol=1e-12)


def test_p_is_clipped_before_the_value():
    value = CobaValue(3.0, 8.0, tau=5.0)
    at_zero = value.gains(np.array([0.0])).value(np.array([10]))
    at_clip = value.gains(np.array([0.01])).value(np.array([10]))
    np.testing.assert_allclose(at_zero, at_clip)
    assert at_zero[0] > 0  # the clip keeps zero-pass prompts in play


def test_beta_density_matches_scipy():
    p = np.linspace(0.01, 0.99, 99)
    for alpha, beta in [(1.0, 1.0), (9.0, 2.0), (7.26, 3.74), (1.0, 10.0), (2.0, 9.0)]:
        np.testing.assert_allclose(beta_density(p, alpha, beta), stats.beta.pdf(p, alpha, beta), rtol=1e-10)
