"""Value tests for fairseq_plugins.modules.memory.continuous (the ∞-former LTM).

Every check compares the module against a reference computed here, in numpy /
scipy, from the formulas of the design notes (docs/design/infinite-former.md
§1-§5, §8) -- never against the module's own helpers.
"""

import copy
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from fairseq_plugins.modules.continuous.read import kl_to_reference
from fairseq_plugins.modules.ops.gaussian import expected_basis
from fairseq_plugins.modules.continuous.basis import (rbf_basis, ridge_regression_matrix, sticky_histogram,
                                                       sticky_positions)
from fairseq_plugins.modules.memory.continuous import LongTermMemory, LongTermMemoryState

# --------------------------------------------------------------------------
# independent numpy references
# --------------------------------------------------------------------------


def np_normal_pdf(x, mean, var):
    return np.exp(-0.5 * (x - mean) ** 2 / var) / np.sqrt(2.0 * np.pi * var)


def np_basis_params(num_basis, widths):
    """Centres evenly spaced on [0, 1] (ends included), width-major."""
    per = num_basis // len(widths)
    centers = np.tile(np.linspace(0.0, 1.0, per), len(widths))
    w = np.repeat(np.asarray(widths, dtype=np.float64), per)
    return centers, w


def np_psi(t, centers, widths):
    """(P, N) matrix ψ_j(t_p) = N(t_p; c_j, w_j²)."""
    t = np.asarray(t, dtype=np.float64)
    return np_normal_pdf(t[:, None], centers[None, :], widths[None, :] ** 2)


def np_padded_positions(pos):
    """⌊n/2⌋ extra points at spacing 1/n beyond each end of the positions."""
    n = len(pos)
    off = np.arange(1, n // 2 + 1, dtype=np.float64) / n
    return np.concatenate([pos.min() - off, pos.max() + off])


def np_ridge_lstsq(pos, targets, centers, widths, lam, pad):
    """B = argmin ||Fᵀ B − X||² + λ||B||², solved as an augmented least squares
    [Fᵀ; √λ I] B = [X; 0]; with ``pad`` the padded positions get zero targets."""
    pos = np.asarray(pos, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    rows = [np_psi(pos, centers, widths)]
    rhs = [targets]
    if pad and len(pos) >= 2:
        extra = np_padded_positions(pos)
        rows.append(np_psi(extra, centers, widths))
        rhs.append(np.zeros((len(extra), targets.shape[1])))
    n_basis = len(centers)
    rows.append(math.sqrt(lam) * np.eye(n_basis))
    rhs.append(np.zeros((n_basis, targets.shape[1])))
    sol, *_ = np.linalg.lstsq(np.concatenate(rows), np.concatenate(rhs), rcond=None)
    return sol  # (N, e)


def np_gate(x, weight, bias):
    """X ⊙ sigmoid(Conv1d(X)), kernel 3, padding 1. x: (bsz, L, e); weight (e, e, 3)."""
    bsz, length, _ = x.shape
    xp = np.concatenate([np.zeros((bsz, 1, x.shape[2])), x, np.zeros((bsz, 1, x.shape[2]))], axis=1)
    g = np.broadcast_to(bias, (bsz, length, len(bias))).copy()
    for k in range(3):
        g += np.einsum("oi,bli->blo", weight[:, :, k], xp[:, k:k + length])
    return x * (1.0 / (1.0 + np.exp(-g)))


def np_quantile_positions(hist, u):
    """Inverse CDF of the piecewise-uniform density given by a bin histogram."""
    edges = np.linspace(0.0, 1.0, len(hist) + 1)
    knots = np.concatenate([[0.0], np.cumsum(hist)])
    knots /= knots[-1]
    return np.interp(u, knots, edges)


def smooth_signal(t, phase, channels):
    """Sums of low-frequency sines/cosines, (len(t), channels)."""
    t = np.asarray(t, dtype=np.float64)
    cols = [np.sin(np.pi * (c + 1) * t + phase) + 0.5 * np.cos(2 * np.pi * (c % 2 + 1) * t - phase)
            for c in range(channels)]
    return np.stack(cols, -1)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def quad_expected_psi(mu, sigma2, c, w):
    """∫_ℝ N(t; μ, σ²) N(t; c, w²) dt by adaptive quadrature, substituting
    t = centre + std·z around the narrower of the two Gaussians (z ∈ [−40, 40])."""
    sigma = math.sqrt(sigma2)
    inv_sqrt_2pi = 1.0 / math.sqrt(2.0 * math.pi)
    if sigma <= w:
        def f(z):
            t = mu + sigma * z
            return inv_sqrt_2pi * math.exp(-0.5 * z * z) * inv_sqrt_2pi / w * math.exp(-0.5 * ((t - c) / w) ** 2)
    else:
        def f(z):
            t = c + w * z
            return inv_sqrt_2pi * math.exp(-0.5 * z * z) * inv_sqrt_2pi / sigma * math.exp(-0.5 * ((t - mu) / sigma) ** 2)
    val, _ = integrate.quad(f, -40.0, 40.0, points=[0.0], limit=500, epsabs=0.0, epsrel=1e-12)
    return val


def _as_np(t):
    return t.detach().double().numpy()


# --------------------------------------------------------------------------
# 1. E[ψ_j] and its gradients
# --------------------------------------------------------------------------


def test_rbf_basis_layout():
    c, w = rbf_basis(12, (0.01, 0.05))
    c_ref, w_ref = np_basis_params(12, (0.01, 0.05))
    assert c.dtype == torch.float64 and w.dtype == torch.float64
    np.testing.assert_allclose(c.numpy(), c_ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=0, atol=0)


_MUS = [-0.05, 0.0, 0.002, 0.37, 0.5, 0.998, 1.0, 1.1]
_SIGMA2S = [1e-8, 1e-4, 2.5e-3, 0.3]
_CENTERS = [0.0, 0.37, 0.5, 1.0]
_WIDTHS = [0.005, 0.05]


def test_expected_basis_vs_quadrature():
    cw = [(c, w) for w in _WIDTHS for c in _CENTERS]
    centers = torch.tensor([c for c, _ in cw], dtype=torch.float64)
    widths = torch.tensor([w for _, w in cw], dtype=torch.float64)
    grid = [(m, s) for m in _MUS for s in _SIGMA2S]
    mu = torch.tensor([m for m, _ in grid], dtype=torch.float64)
    sigma2 = torch.tensor([s for _, s in grid], dtype=torch.float64)
    got = expected_basis(mu, sigma2, centers, widths).numpy()
    assert got.shape == (len(grid), len(cw))
    ref = np.array([[quad_expected_psi(m, s, c, w) for c, w in cw] for m, s in grid])
    # absolute floor: values this far below the largest density are numerically zero
    np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-10 * ref.max())
    # meaningful: many entries are far from zero
    assert (ref > 1e-3).sum() > len(ref.ravel()) // 4


def test_expected_basis_integrates_over_real_line_not_unit_interval():
    # μ = c = 0 with a wide σ: half of the mass lies left of 0
    mu = torch.tensor([0.0], dtype=torch.float64)
    sigma2 = torch.tensor([0.04], dtype=torch.float64)
    got = expected_basis(mu, sigma2, torch.tensor([0.0], dtype=torch.float64),
                         torch.tensor([0.05], dtype=torch.float64)).item()
    over_r = quad_expected_psi(0.0, 0.04, 0.0, 0.05)
    over_unit, _ = integrate.quad(lambda t: np_normal_pdf(t, 0.0, 0.04) * np_normal_pdf(t, 0.0, 0.0025),
                                  0.0, 1.0, epsrel=1e-12)
    assert got == pytest.approx(over_r, rel=1e-8)
    assert abs(got - over_unit) > 0.3 * over_r


_GRAD_CASES = [
    # (μ, σ², c, w)
    (0.5, 1e-8, 0.502, 0.005),
    (0.0, 1e-4, 0.0, 0.005),
    (0.003, 1e-4, 0.0, 0.05),
    (0.999, 2.5e-3, 1.0, 0.005),
    (0.37, 2.5e-3, 0.5, 0.05),
    (1.05, 0.3, 1.0, 0.05),
    (0.2, 1e-3, 0.25, 0.01),
    (0.6, 1e-6, 0.59, 0.01),
]


@pytest.mark.parametrize("mu0,s0,c,w", _GRAD_CASES)
def test_expected_basis_gradients_vs_finite_differences_of_quadrature(mu0, s0, c, w):
    mu = torch.tensor([mu0], dtype=torch.float64, requires_grad=True)
    sigma2 = torch.tensor([s0], dtype=torch.float64, requires_grad=True)
    val = expected_basis(mu, sigma2, torch.tensor([c], dtype=torch.float64),
                         torch.tensor([w], dtype=torch.float64)).sum()
    g_mu, g_s2 = torch.autograd.grad(val, (mu, sigma2))

    scale2 = s0 + w * w
    h_mu = 1e-4 * math.sqrt(scale2)
    h_s = 1e-3 * min(s0, scale2)
    fd_mu = (quad_expected_psi(mu0 + h_mu, s0, c, w) - quad_expected_psi(mu0 - h_mu, s0, c, w)) / (2 * h_mu)
    fd_s = (quad_expected_psi(mu0, s0 + h_s, c, w) - quad_expected_psi(mu0, s0 - h_s, c, w)) / (2 * h_s)
    level = quad_expected_psi(mu0, s0, c, w)
    assert g_mu.item() == pytest.approx(fd_mu, rel=1e-4, abs=1e-6 * level / math.sqrt(scale2))
    assert g_s2.item() == pytest.approx(fd_s, rel=1e-4, abs=1e-6 * level / scale2)


def test_expected_basis_gradcheck_float64():
    torch.manual_seed(0)
    mu = torch.rand(5, dtype=torch.float64, requires_grad=True)
    sigma2 = (torch.rand(5, dtype=torch.float64) * 0.01 + 1e-4).requires_grad_()
    c, w = rbf_basis(8, (0.05, 0.1))
    assert torch.autograd.gradcheck(lambda m, s: expected_basis(m, s, c, w), (mu, sigma2))


# --------------------------------------------------------------------------
# 2. ridge regression matrix
# --------------------------------------------------------------------------


def _random_ridge_problem(seed, n=60, num_basis=32, widths=(0.02, 0.1), channels=5):
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.uniform(0.0, 1.0, n))
    x = rng.standard_normal((n, channels))
    c, w = np_basis_params(num_basis, widths)
    return pos, x, c, w


@pytest.mark.parametrize("seed,lam", [(0, 0.3), (1, 1.0), (2, 0.05)])
def test_ridge_matrix_without_padding_vs_normal_equations_and_lstsq(seed, lam):
    pos, x, c, w = _random_ridge_problem(seed)
    g = ridge_regression_matrix(torch.tensor(pos), torch.tensor(c), torch.tensor(w), lam,
                                boundary_padding=False)
    assert g.dtype == torch.float64 and g.shape == (len(pos), len(c))
    b = g.numpy().T @ x

    f = np_psi(pos, c, w).T  # (N, n)
    b_normal = np.linalg.solve(f @ f.T + lam * np.eye(len(c)), f @ x)
    b_lstsq = np_ridge_lstsq(pos, x, c, w, lam, pad=False)
    np.testing.assert_allclose(b, b_normal, rtol=0, atol=1e-8 * np.abs(b_normal).max())
    np.testing.assert_allclose(b, b_lstsq, rtol=0, atol=1e-8 * np.abs(b_lstsq).max())


@pytest.mark.parametrize("kind", ["grid_even", "grid_odd", "update_positions", "random", "wide_basis"])
def test_ridge_matrix_padding_equals_explicit_zero_padding(kind):
    lam = 0.5
    # with the wide basis every padding point (out to ±½ beyond the ends) matters
    c, w = np_basis_params(40, (0.05, 0.3) if kind == "wide_basis" else (0.01, 0.05))
    rng = np.random.default_rng(3)
    if kind in ("grid_even", "wide_basis"):
        n = 24
        pos = (np.arange(n) + 0.5) / n
    elif kind == "grid_odd":
        n = 17
        pos = (np.arange(n) + 0.5) / n
    elif kind == "update_positions":
        m, length, tau = 20, 12, 0.5
        pos = np.concatenate([tau * np.arange(1, m + 1) / m, tau + (1 - tau) * np.arange(1, length + 1) / length])
    else:
        pos = np.sort(rng.uniform(0.0, 1.0, 30))
    x = rng.standard_normal((len(pos), 4))
    g = ridge_regression_matrix(torch.tensor(pos), torch.tensor(c), torch.tensor(w), lam,
                                boundary_padding=True)
    assert g.shape == (len(pos), len(c))
    b = g.numpy().T @ x
    b_ref = np_ridge_lstsq(pos, x, c, w, lam, pad=True)
    np.testing.assert_allclose(b, b_ref, rtol=0, atol=1e-8 * np.abs(b_ref).max())
    # the padding matters: the unpadded fit is clearly different
    b_nopad = np_ridge_lstsq(pos, x, c, w, lam, pad=False)
    assert rel(b_nopad, b_ref) > 1e-3


def test_ridge_padding_of_first_fit_grid_spans_minus_half_to_three_halves():
    n = 16
    pos = (np.arange(n) + 0.5) / n
    allpos = np.sort(np.concatenate([pos, np_padded_positions(pos)]))
    np.testing.assert_allclose(allpos, (np.arange(2 * n) + 0.5) / n - 0.5, atol=1e-15)


def test_ridge_matrix_float64_matters_at_reference_settings():
    """N = 512, widths {0.005, 0.01}, λ = 0.5, L = 512 (design §1): cond ≈ 5e5,
    an fp32 solve is ~1e-2 off; the module's float64 result matches a float64
    reference to ~1e-9."""
    num_basis, widths, lam, n = 512, (0.005, 0.01), 0.5, 512
    c, w = np_basis_params(num_basis, widths)
    pos = (np.arange(n) + 0.5) / n
    f = np_psi(pos, c, w).T
    gram = f @ f.T + lam * np.eye(num_basis)
    assert np.linalg.cond(gram) > 1e5
    g_ref = np.linalg.solve(gram, f).T

    g = ridge_regression_matrix(torch.tensor(pos), torch.tensor(c), torch.tensor(w), lam,
                                boundary_padding=False).numpy()
    assert rel(g, g_ref) < 1e-9

    f32 = torch.tensor(f, dtype=torch.float32)
    g32 = torch.linalg.solve(f32 @ f32.T + lam * torch.eye(num_basis), f32).T.double().numpy()
    assert rel(g32, g_ref) > 1e-4


# --------------------------------------------------------------------------
# 3. update: first fit, contraction identity, sticky sampling
# --------------------------------------------------------------------------


def _make_ltm(embed_dim=8, heads=2, num_basis=64, widths=(0.01, 0.05), lam=0.5, tau=0.5,
              num_samples=48, sticky=False, seed=0, boundary_padding=True):
    torch.manual_seed(seed)
    return LongTermMemory(embed_dim, heads, num_basis=num_basis, basis_widths=widths,
                          ridge_penalty=lam, tau=tau, num_samples=num_samples, sticky=sticky,
                          boundary_padding=boundary_padding)


def _gate_np(ltm):
    return ltm.gate.weight.detach().double().numpy(), ltm.gate.bias.detach().double().numpy()


@pytest.mark.parametrize("boundary_padding", [True, False])
def test_first_fit_is_ridge_of_gated_chunk(boundary_padding):
    ltm = _make_ltm(boundary_padding=boundary_padding)
    length, bsz, e = 20, 2, 8
    torch.manual_seed(1)
    chunk = torch.randn(length, bsz, e)
    state = LongTermMemoryState.empty(bsz, 64, e, "cpu")
    new = ltm.update(state, chunk, torch.ones(bsz, dtype=torch.bool))
    assert new.coefficients.dtype == torch.float32 and new.coefficients.shape == (bsz, 64, e)
    assert new.valid.all()

    c, w = np_basis_params(64, (0.01, 0.05))
    xt = np_gate(_as_np(chunk).transpose(1, 0, 2), *_gate_np(ltm))  # (bsz, L, e)
    pos = (np.arange(length) + 0.5) / length
    for b in range(bsz):
        ref = np_ridge_lstsq(pos, xt[b], c, w, 0.5, pad=boundary_padding)
        assert rel(_as_np(new.coefficients[b]), ref) < 1e-4


@pytest.mark.parametrize("length", [24, 7])
def test_uniform_update_is_ridge_of_contracted_samples_and_new_chunk(length):
    """Second update (sticky off): samples of the old signal at k/M moved to τk/M,
    the gated chunk at τ + (1−τ)i/L, ridge fit with padding. L = 7 is a partial
    last segment of a different length than the first."""
    num_basis, widths, lam, tau, m, e, bsz = 64, (0.01, 0.05), 0.5, 0.6, 48, 8, 2
    ltm = _make_ltm(num_basis=num_basis, widths=widths, lam=lam, tau=tau, num_samples=m)
    torch.manual_seed(2)
    first = torch.randn(24, bsz, e)
    chunk = torch.randn(length, bsz, e)
    valid = torch.ones(bsz, dtype=torch.bool)
    s1 = ltm.update(LongTermMemoryState.empty(bsz, num_basis, e, "cpu"), first, valid)
    s2 = ltm.update(s1, chunk, valid)

    c, w = np_basis_params(num_basis, widths)
    k = np.arange(1, m + 1) / m
    xt = np_gate(_as_np(chunk).transpose(1, 0, 2), *_gate_np(ltm))
    pos = np.concatenate([tau * k, tau + (1 - tau) * np.arange(1, length + 1) / length])
    for b in range(bsz):
        old_samples = np_psi(k, c, w) @ _as_np(s1.coefficients[b])
        ref = np_ridge_lstsq(pos, np.concatenate([old_samples, xt[b]]), c, w, lam, pad=True)
        assert rel(_as_np(s2.coefficients[b]), ref) < 1e-4


@pytest.mark.parametrize("num_basis,widths,lam,tau,m,length", [
    (256, (0.005, 0.01), 0.5, 0.5, 256, 128),
    (128, (0.01, 0.05), 1.0, 0.75, 128, 64),
])
def test_contraction_identity_smooth_signal(num_basis, widths, lam, tau, m, length):
    e = 6
    ltm = _make_ltm(embed_dim=e, heads=2, num_basis=num_basis, widths=widths, lam=lam, tau=tau,
                    num_samples=m)
    with torch.no_grad():  # gate ≈ identity: sigmoid(30) = 1 − 1e-13
        ltm.gate.weight.zero_()
        ltm.gate.bias.fill_(30.0)
    pos = (np.arange(length) + 0.5) / length
    x_old = smooth_signal(pos, 0.3, e)
    x_new = smooth_signal(pos, 1.7, e)
    valid = torch.ones(1, dtype=torch.bool)
    s1 = ltm.update(LongTermMemoryState.empty(1, num_basis, e, "cpu"),
                    torch.tensor(x_old, dtype=torch.float32)[:, None], valid)
    s2 = ltm.update(s1, torch.tensor(x_new, dtype=torch.float32)[:, None], valid)

    c, w = np_basis_params(num_basis, widths)
    b1, b2 = _as_np(s1.coefficients[0]), _as_np(s2.coefficients[0])
    t = np.linspace(0.1, 0.9, 301)
    old_signal = np_psi(t, c, w) @ b1
    # the first fit itself reproduces the smooth input away from the edges
    assert rel(old_signal, smooth_signal(t, 0.3, e)) < 0.05
    # the re-fitted signal at τ·t reproduces the old signal at t
    assert rel(np_psi(tau * t, c, w) @ b2, old_signal) < 0.03
    # ... and on (τ, 1] the new chunk (away from the junction and the right edge)
    new_pos = tau + (1 - tau) * np.arange(1, length + 1) / length
    sel = (new_pos > tau + 0.1 * (1 - tau)) & (new_pos < 1 - 0.1 * (1 - tau))
    assert rel(np_psi(new_pos[sel], c, w) @ b2, x_new[sel]) < 0.05
    # sanity: without the contraction (old signal read at t, not τ·t) it does not match
    assert rel(np_psi(t, c, w) @ b2, old_signal) > 0.2


def test_sticky_update_samples_where_attention_went():
    """Sticky update at eval time: positions = inverse CDF of the attention-mass
    histogram at (k − ½)/M, then the same contraction/refit."""
    num_basis, widths, lam, tau, m, e, bsz, heads, q_len = 64, (0.01, 0.05), 0.5, 0.5, 40, 8, 2, 2, 5
    ltm = _make_ltm(num_basis=num_basis, widths=widths, lam=lam, tau=tau, num_samples=m, sticky=True)
    ltm.eval()
    torch.manual_seed(3)
    valid = torch.ones(bsz, dtype=torch.bool)
    s1 = ltm.update(LongTermMemoryState.empty(bsz, num_basis, e, "cpu"), torch.randn(16, bsz, e), valid)
    mu = torch.rand(bsz, heads, q_len) * 0.8 + 0.1
    sigma = torch.rand(bsz, heads, q_len) * 0.1 + 0.02
    s1 = LongTermMemoryState(s1.coefficients, s1.valid, mu, sigma)
    chunk = torch.randn(10, bsz, e)
    s2 = ltm.update(s1, chunk, valid)

    c, w = np_basis_params(num_basis, widths)
    bins = 128
    edges = np.linspace(0, 1, bins + 1)
    xt = np_gate(_as_np(chunk).transpose(1, 0, 2), *_gate_np(ltm))
    pos = np.concatenate([tau * np.arange(1, m + 1) / m, tau + (1 - tau) * np.arange(1, 11) / 10])
    for b in range(bsz):
        cdf = stats.norm.cdf((edges[None, :] - _as_np(mu[b]).reshape(-1, 1)) / _as_np(sigma[b]).reshape(-1, 1))
        hist = np.diff(cdf, axis=1).sum(0)
        hist /= hist.sum()
        s = np_quantile_positions(hist, (np.arange(m) + 0.5) / m)
        old_samples = np_psi(s, c, w) @ _as_np(s1.coefficients[b])
        ref = np_ridge_lstsq(pos, np.concatenate([old_samples, xt[b]]), c, w, lam, pad=True)
        assert rel(_as_np(s2.coefficients[b]), ref) < 1e-4
    # sticky sampling differs from uniform sampling here
    ltm.sticky = False
    s2_uniform = ltm.update(s1, chunk, valid)
    assert rel(_as_np(s2_uniform.coefficients), _as_np(s2.coefficients)) > 1e-2


def test_sticky_update_training_is_seeded():
    ltm = _make_ltm(sticky=True)
    ltm.train()
    torch.manual_seed(4)
    valid = torch.ones(2, dtype=torch.bool)
    s1 = ltm.update(LongTermMemoryState.empty(2, 64, 8, "cpu"), torch.randn(16, 2, 8), valid)
    s1 = LongTermMemoryState(s1.coefficients, s1.valid, torch.rand(2, 2, 5), torch.rand(2, 2, 5) * 0.1 + 0.01)
    chunk = torch.randn(8, 2, 8)
    torch.manual_seed(11)
    a = ltm.update(s1, chunk, valid).coefficients
    torch.manual_seed(11)
    b = ltm.update(s1, chunk, valid).coefficients
    torch.manual_seed(12)
    c = ltm.update(s1, chunk, valid).coefficients
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


# --------------------------------------------------------------------------
# 4. KL regulariser
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sigma0", [0.05, 0.3])
def test_kl_zero_gradient_positive(sigma0):
    zero = kl_to_reference(torch.tensor([sigma0 ** 2], dtype=torch.float64), sigma0)
    assert abs(zero.item()) < 1e-6

    s2 = torch.tensor([1e-4, 1e-3, 0.5 * sigma0 ** 2, 2 * sigma0 ** 2, 0.2, 1.5], dtype=torch.float32,
                      requires_grad=True)
    kl = kl_to_reference(s2, sigma0)
    (grad,) = torch.autograd.grad(kl.sum(), s2)
    s2n = s2.detach().double().numpy()
    np.testing.assert_allclose(grad.double().numpy(), 0.5 * (1 / sigma0 ** 2 - 1 / s2n), rtol=1e-4)
    assert (kl > 0).all()

    # KL between the two Gaussians (same μ) from torch.distributions
    p = torch.distributions.Normal(0.3, s2.detach().double().sqrt())
    q = torch.distributions.Normal(0.3, torch.full_like(p.scale, sigma0))
    ref = torch.distributions.kl_divergence(p, q)
    np.testing.assert_allclose(kl.detach().double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-7)


def test_kl_half_input_computed_in_float32():
    s2 = torch.tensor([1e-4, 0.01, 0.3], dtype=torch.float16)
    kl = kl_to_reference(s2, 0.05)
    assert kl.dtype == torch.float32
    ref = 0.5 * (s2.double() / 0.0025 - torch.log(s2.double() / 0.0025) - 1)
    np.testing.assert_allclose(kl.double().numpy(), ref.numpy(), rtol=1e-5)


# --------------------------------------------------------------------------
# 5. sticky histogram and positions
# --------------------------------------------------------------------------


def test_sticky_histogram_vs_scipy_and_normalised():
    torch.manual_seed(5)
    bsz, heads, q_len, bins = 3, 2, 7, 32
    mu = torch.rand(bsz, heads, q_len) * 1.4 - 0.2
    sigma = torch.rand(bsz, heads, q_len) * 0.2 + 1e-3
    hist = sticky_histogram(mu, sigma, bins)
    assert hist.shape == (bsz, bins) and hist.dtype == torch.float32
    np.testing.assert_allclose(hist.sum(-1).numpy(), 1.0, atol=1e-5)
    edges = np.linspace(0, 1, bins + 1)
    for b in range(bsz):
        cdf = stats.norm.cdf((edges[None, :] - _as_np(mu[b]).reshape(-1, 1)) / _as_np(sigma[b]).reshape(-1, 1))
        ref = np.diff(cdf, axis=1).sum(0)
        ref /= ref.sum()
        np.testing.assert_allclose(hist[b].numpy(), ref, atol=2e-5)


def test_sticky_histogram_no_mass_inside_is_uniform():
    mu = torch.tensor([[[5.0, -4.0]]])
    sigma = torch.tensor([[[0.01, 0.01]]])
    hist = sticky_histogram(mu, sigma, 16)
    np.testing.assert_allclose(hist.numpy(), 1.0 / 16, atol=1e-7)


@pytest.mark.parametrize("j", [0, 37, 127])
def test_narrow_gaussian_puts_all_mass_and_samples_in_its_bin(j):
    bins, m = 128, 64
    mu = torch.tensor([[[(j + 0.5) / bins]]])
    sigma = torch.tensor([[[1e-4]]])
    hist = sticky_histogram(mu, sigma, bins)
    assert hist[0, j].item() == pytest.approx(1.0, abs=1e-6)
    assert hist.sum().item() == pytest.approx(1.0, abs=1e-6)
    lo, hi = j / bins, (j + 1) / bins
    for random in (False, True):
        torch.manual_seed(6)
        pos = sticky_positions(hist, m, random=random)
        assert pos.shape == (1, m)
        assert ((pos >= lo) & (pos <= hi)).all(), (random, pos.min().item(), pos.max().item())


def test_sticky_positions_deterministic_sorted_and_match_inverse_cdf():
    rng = np.random.default_rng(7)
    bins, m = 20, 50
    hist_np = rng.uniform(0.1, 1.0, (2, bins))
    hist_np /= hist_np.sum(1, keepdims=True)
    hist = torch.tensor(hist_np, dtype=torch.float32)
    a = sticky_positions(hist, m, random=False)
    b = sticky_positions(hist, m, random=False)
    assert torch.equal(a, b)
    assert (a[:, 1:] >= a[:, :-1]).all()
    assert ((a >= 0) & (a <= 1)).all()
    u = (np.arange(m) + 0.5) / m
    for r in range(2):
        np.testing.assert_allclose(a[r].numpy(), np_quantile_positions(hist_np[r], u), atol=1e-5)


def test_sticky_positions_random_seeded_sorted_and_follow_inverse_cdf():
    rng = np.random.default_rng(8)
    hist_np = rng.uniform(0.1, 1.0, (2, 16))
    hist_np /= hist_np.sum(1, keepdims=True)
    hist = torch.tensor(hist_np, dtype=torch.float32)
    torch.manual_seed(9)
    a = sticky_positions(hist, 40, random=True)
    torch.manual_seed(9)
    u = torch.rand(2, 40).sort(-1).values  # the documented draw: sorted torch.rand
    torch.manual_seed(9)
    b = sticky_positions(hist, 40, random=True)
    c = sticky_positions(hist, 40, random=True)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert (a[:, 1:] >= a[:, :-1]).all()
    for r in range(2):
        np.testing.assert_allclose(a[r].numpy(), np_quantile_positions(hist_np[r], u[r].double().numpy()),
                                   atol=1e-5)


def test_uniform_histogram_gives_evenly_spaced_quantiles():
    bins, m = 128, 512
    hist = torch.full((1, bins), 1.0 / bins)
    hist = hist * (1 + 0.01 * torch.sin(torch.arange(bins, dtype=torch.float32)))  # uniform-ish
    hist = hist / hist.sum()
    q = (np.arange(m) + 0.5) / m
    det = sticky_positions(hist, m, random=False)[0].numpy()
    assert np.abs(det - q).max() < 2e-3
    torch.manual_seed(10)
    rnd = sticky_positions(hist, m, random=True)[0].numpy()
    assert np.abs(rnd - q).max() < 0.1  # KS bound, ~1e-8 failure probability


# --------------------------------------------------------------------------
# read (continuous attention) vs an independent numpy implementation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sigma_scale", [1.0, 300.0])
def test_read_matches_independent_computation(sigma_scale):
    """sigma_scale = 300 drives half of the σ² below the clamp 1e-4."""
    e, heads, num_basis, widths, bsz, q_len = 8, 2, 32, (0.02, 0.1), 2, 5
    d = e // heads
    ltm = _make_ltm(embed_dim=e, heads=heads, num_basis=num_basis, widths=widths)
    with torch.no_grad():
        ltm.sigma_proj.mul_(sigma_scale)
    torch.manual_seed(12)
    coeffs = torch.randn(bsz, num_basis, e) * 0.2
    state = LongTermMemoryState(coeffs, torch.ones(bsz, dtype=torch.bool))
    query = torch.randn(q_len, bsz, e)
    out, mu, sigma2 = ltm(query, state)
    assert out.shape == (q_len, bsz, e) and mu.shape == (bsz, heads, q_len) and sigma2.shape == mu.shape

    c, w = np_basis_params(num_basis, widths)
    wk, wv, wo = (_as_np(p.weight) for p in (ltm.k_proj, ltm.v_proj, ltm.out_proj))
    w_mu, w_s = _as_np(ltm.mu_proj), _as_np(ltm.sigma_proj)
    qn = _as_np(query)
    for b in range(bsz):
        bmat = _as_np(coeffs[b])
        keys, values = bmat @ wk.T, bmat @ wv.T  # (N, e)
        z = np.zeros((q_len, e))
        for h in range(heads):
            sl = slice(h * d, (h + 1) * d)
            s = qn[:, b, sl] @ keys[:, sl].T / math.sqrt(d)  # (T, N)
            mu_ref = 1 / (1 + np.exp(-(s @ w_mu)))
            s2_ref = np.maximum(np.logaddexp(0.0, s @ w_s), 1e-4)
            np.testing.assert_allclose(_as_np(mu[b, h]), mu_ref, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(_as_np(sigma2[b, h]), s2_ref, rtol=1e-5, atol=1e-7)
            dens = np_normal_pdf(mu_ref[:, None], c[None], s2_ref[:, None] + w[None] ** 2)
            z[:, sl] = dens @ values[:, sl]
        ref = z @ wo.T
        assert rel(_as_np(out[:, b]), ref) < 1e-4
    if sigma_scale > 1:
        assert (sigma2 == 1e-4).float().mean() > 0.2


def test_read_gradients_match_the_formula_with_k_v_and_scores_formed():
    """The read never forms K (its scores come from [w_μ, w_σ]ᵀ B W_Kᵀ): its gradients (query,
    B and every read parameter, cotangents on the output, μ and σ²) equal float64 autograd of
    the paper's formula written out with K = B W_K, V = B W_V, the (T, N) scores per head,
    E[ψ] over the full basis and W_O."""
    e, heads, num_basis, widths, bsz, q_len = 8, 2, 16, (0.02, 0.1), 2, 6
    d = e // heads
    ltm = _make_ltm(embed_dim=e, heads=heads, num_basis=num_basis, widths=widths)
    torch.manual_seed(31)
    coeffs = (torch.randn(bsz, num_basis, e) * 0.5).requires_grad_()
    query = torch.randn(q_len, bsz, e, requires_grad=True)
    cot = [torch.randn(q_len, bsz, e), torch.randn(bsz, heads, q_len), torch.randn(bsz, heads, q_len)]
    params = [ltm.k_proj.weight, ltm.v_proj.weight, ltm.out_proj.weight, ltm.mu_proj, ltm.sigma_proj]
    got = ltm(query, LongTermMemoryState(coeffs, torch.ones(bsz, dtype=torch.bool)))
    got_grads = torch.autograd.grad(sum((g * c).sum() for g, c in zip(got, cot)), [query, coeffs] + params)

    centers, w = rbf_basis(num_basis, widths)
    q64, b64 = query.detach().double().requires_grad_(), coeffs.detach().double().requires_grad_()
    wk, wv, wo, w_mu, w_s = (p.detach().double().requires_grad_() for p in params)
    keys, values = b64 @ wk.t(), b64 @ wv.t()  # (bsz, N, e)
    zs, mus, s2s = [], [], []
    for h in range(heads):
        sl = slice(h * d, (h + 1) * d)
        scores = torch.einsum("tbd,bnd->btn", q64[..., sl], keys[..., sl]) / math.sqrt(d)  # (bsz, T, N)
        mu = torch.sigmoid(scores @ w_mu)
        s2 = torch.nn.functional.softplus(scores @ w_s).clamp_min(1e-4)
        zs.append(expected_basis(mu, s2, centers, w) @ values[..., sl])  # (bsz, T, d)
        mus.append(mu)
        s2s.append(s2)
    out = (torch.cat(zs, dim=-1) @ wo.t()).transpose(0, 1)
    ref = (out, torch.stack(mus, 1), torch.stack(s2s, 1))
    ref_grads = torch.autograd.grad(sum((r * c.double()).sum() for r, c in zip(ref, cot)),
                                    [q64, b64, wk, wv, wo, w_mu, w_s])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-5)
    for g, r in zip(got_grads, ref_grads):
        assert rel(_as_np(g), _as_np(r)) < 1e-4


# --------------------------------------------------------------------------
# 6. cost flat in context
# --------------------------------------------------------------------------


def _step(ltm, state, chunk, query, valid):
    state = ltm.update(state, chunk, valid)
    out, mu, sigma2 = ltm(query, state)
    return LongTermMemoryState(state.coefficients, state.valid, mu, sigma2.sqrt()).detach(), out


def _state_bytes(state):
    return sum(t.numel() * t.element_size() for t in (state.coefficients, state.valid, state.mu, state.sigma))


def test_state_size_flat_in_context():
    """The state after 50 segments has the size it had after one (the cost per segment is
    measured by fairseq-longmem bench, not here)."""
    e, heads, num_basis, m, length, bsz = 64, 4, 128, 128, 64, 2
    ltm = _make_ltm(embed_dim=e, heads=heads, num_basis=num_basis, num_samples=m, sticky=True)
    ltm.eval()
    torch.manual_seed(13)
    chunks = torch.randn(50, length, bsz, e)
    query = torch.randn(length, bsz, e)
    valid = torch.ones(bsz, dtype=torch.bool)
    state = LongTermMemoryState.empty(bsz, num_basis, e, "cpu")
    snapshots = {}
    with torch.no_grad():
        for i in range(50):
            state, out = _step(ltm, state, chunks[i], query, valid)
            assert torch.isfinite(state.coefficients).all() and torch.isfinite(out).all()
            if i + 1 in (1, 50):
                snapshots[i + 1] = state
    s1, s50 = snapshots[1], snapshots[50]
    assert s1.coefficients.shape == s50.coefficients.shape == (bsz, num_basis, e)
    assert s1.mu.shape == s50.mu.shape == (bsz, heads, length)
    assert _state_bytes(s1) == _state_bytes(s50)
    # the memory after 50 segments is not zero / degenerate
    assert s50.coefficients.abs().mean() > 1e-3



# --------------------------------------------------------------------------
# 7. fp32 memory math under .half() and autocast
# --------------------------------------------------------------------------


def test_half_module_keeps_memory_math_in_float32():
    e, heads, num_basis, bsz = 16, 2, 64, 2
    mod32 = _make_ltm(embed_dim=e, heads=heads, num_basis=num_basis, num_samples=64)
    mod32.eval()
    mod16 = copy.deepcopy(mod32).half()
    assert mod16.gate.weight.dtype == torch.float16
    torch.manual_seed(14)
    c1, c2, query = torch.randn(32, bsz, e), torch.randn(32, bsz, e), torch.randn(8, bsz, e)
    valid = torch.ones(bsz, dtype=torch.bool)

    def run(mod, dtype):
        st = LongTermMemoryState.empty(bsz, num_basis, e, "cpu")
        st = mod.update(st, c1.to(dtype), valid)
        out1, mu, s2 = mod(query.to(dtype), st)
        st = LongTermMemoryState(st.coefficients, st.valid, mu, s2.sqrt())
        st = mod.update(st, c2.to(dtype), valid)
        out2, mu2, s22 = mod(query.to(dtype), st)
        return st, out1, out2, mu2, s22

    st16, o1, o2, mu16, s16 = run(mod16, torch.float16)
    assert st16.coefficients.dtype == torch.float32
    assert mu16.dtype == torch.float32 and s16.dtype == torch.float32
    assert o1.dtype == torch.float16 and o2.dtype == torch.float16
    for t in (st16.coefficients, o1, o2, mu16, s16):
        assert torch.isfinite(t).all()

    st32, _, p2, mu32, _ = run(mod32, torch.float32)
    assert rel(_as_np(st16.coefficients), _as_np(st32.coefficients)) < 1e-2
    assert rel(_as_np(o2), _as_np(p2)) < 2e-2
    # with the same fp16-rounded weights and inputs, a float32 module gives the same
    # coefficients: the half module did its memory math in float32
    mod32r = copy.deepcopy(mod16).float()
    st = LongTermMemoryState.empty(bsz, num_basis, e, "cpu")
    ref = mod32r.update(st, c1.half().float(), valid).coefficients
    got = mod16.update(st, c1.half(), valid).coefficients
    assert rel(_as_np(got), _as_np(ref)) < 1e-6


def test_autocast_bfloat16_keeps_memory_math_in_float32():
    e, heads, num_basis, bsz = 16, 2, 64, 2
    ltm = _make_ltm(embed_dim=e, heads=heads, num_basis=num_basis, num_samples=64)
    ltm.eval()
    torch.manual_seed(15)
    c1, c2, query = torch.randn(32, bsz, e), torch.randn(32, bsz, e), torch.randn(8, bsz, e)
    valid = torch.ones(bsz, dtype=torch.bool)

    def run():
        st = ltm.update(LongTermMemoryState.empty(bsz, num_basis, e, "cpu"), c1, valid)
        out, mu, s2 = ltm(query, st)
        st = ltm.update(LongTermMemoryState(st.coefficients, st.valid, mu, s2.sqrt()), c2, valid)
        out, mu, s2 = ltm(query, st)
        return st.coefficients, out, mu, s2

    ref = run()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        got = run()
    for g in got:
        assert g.dtype == torch.float32
    for g, r in zip(got, ref):
        assert rel(_as_np(g), _as_np(r)) < 1e-6


# --------------------------------------------------------------------------
# 8. batch slots
# --------------------------------------------------------------------------


def test_reset_empties_only_selected_slots():
    torch.manual_seed(16)
    coeffs = torch.randn(4, 10, 6)
    state = LongTermMemoryState(coeffs.clone(), torch.tensor([True, True, False, True]))
    state.reset_(torch.tensor([True, False, False, True]))
    assert torch.equal(state.valid, torch.tensor([False, True, False, False]))
    assert (state.coefficients[0] == 0).all() and (state.coefficients[3] == 0).all()
    assert torch.equal(state.coefficients[1], coeffs[1])
    assert torch.equal(state.coefficients[2], coeffs[2])


def test_invalid_slot_reads_exactly_zero():
    ltm = _make_ltm()
    torch.manual_seed(17)
    state = LongTermMemoryState(torch.randn(3, 64, 8), torch.tensor([True, False, True]))
    out, _, _ = ltm(torch.randn(4, 3, 8), state)
    assert (out[:, 1] == 0).all()
    assert (out[:, 0].abs() > 0).any() and (out[:, 2].abs() > 0).any()


def test_update_with_invalid_chunk_keeps_slot_unchanged():
    ltm = _make_ltm()
    torch.manual_seed(18)
    valid = torch.ones(3, dtype=torch.bool)
    s1 = ltm.update(LongTermMemoryState.empty(3, 64, 8, "cpu"), torch.randn(12, 3, 8), valid)
    before = s1.coefficients.clone()
    s2 = ltm.update(s1, torch.randn(12, 3, 8), torch.tensor([True, False, True]))
    assert torch.equal(s2.coefficients[1], before[1])
    assert not torch.allclose(s2.coefficients[0], before[0])
    assert not torch.allclose(s2.coefficients[2], before[2])
    # an empty slot with an invalid chunk stays empty (and zero)
    s0 = LongTermMemoryState.empty(2, 64, 8, "cpu")
    s3 = ltm.update(s0, torch.randn(12, 2, 8), torch.tensor([False, True]))
    assert torch.equal(s3.valid, torch.tensor([False, True]))
    assert (s3.coefficients[0] == 0).all()


def test_update_gradient_reaches_gate_not_old_memory():
    """The new B is differentiable w.r.t. the gate (through the new chunk only);
    the old coefficients are detached (no backpropagation through time)."""
    ltm = _make_ltm()
    torch.manual_seed(19)
    valid = torch.ones(2, dtype=torch.bool)
    s1 = ltm.update(LongTermMemoryState.empty(2, 64, 8, "cpu"), torch.randn(12, 2, 8), valid)
    old = s1.coefficients.detach().clone().requires_grad_()
    ltm.zero_grad()
    s2 = ltm.update(LongTermMemoryState(old, s1.valid), torch.randn(12, 2, 8), valid)
    s2.coefficients.pow(2).sum().backward()
    assert old.grad is None
    assert ltm.gate.weight.grad is not None and ltm.gate.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("widths", [(0.01, 0.05), (0.02,), (0.005, 0.01, 0.1)])
def test_product_basis_expectation_equals_autograd_of_the_formula(widths):
    """The read's E[ψ] (σ² + w² once per width, hand-written backward) against
    :func:`expected_basis` over the full basis of :func:`rbf_basis` (plain autograd): values
    and gradients, float64, plus gradcheck."""
    from fairseq_plugins.modules.ops.gaussian import product_basis_expectation
    from fairseq_plugins.modules.continuous.basis import ContinuousBasis
    torch.manual_seed(21)
    n = 4 * len(widths)
    centers, w = (t.double() for t in rbf_basis(n, widths))
    basis_centers, width_values = ContinuousBasis(n, widths).product_basis("cpu", torch.float64)
    assert torch.equal(basis_centers, centers) and torch.equal(width_values[torch.arange(n) // 4], w)
    mu = (torch.rand(2, 3, 5, dtype=torch.float64) * 1.2 - 0.1).requires_grad_()
    sigma2 = (torch.rand(2, 3, 5, dtype=torch.float64) * 0.01 + 1e-4).requires_grad_()
    cotangent = torch.randn(2, 3, 5, n, dtype=torch.float64)
    ref = expected_basis(mu, sigma2, centers, w)
    got = product_basis_expectation(mu, sigma2, basis_centers, width_values)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-300)  # both raise subnormals to ~6e-308
    for g, r in zip(torch.autograd.grad((got * cotangent).sum(), (mu, sigma2)),
                    torch.autograd.grad((ref * cotangent).sum(), (mu, sigma2))):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda m, s: product_basis_expectation(m, s, basis_centers, width_values),
                                    (mu, sigma2))


def _training_peak_bytes(segments, length, e=32, heads=4, num_basis=32):
    """Peak of live bytes (the profiler's memory events) over ``segments`` training steps of the
    memory (update + read, forward + backward per segment, as the LM trains)."""
    from torch.profiler import ProfilerActivity, profile

    ltm = _make_ltm(embed_dim=e, heads=heads, num_basis=num_basis, num_samples=num_basis, sticky=True)
    ltm.train()
    torch.manual_seed(0)
    chunks = torch.randn(segments, length, 1, e)
    query = torch.randn(length, 1, e, requires_grad=True)
    state = ltm.empty_state(1, "cpu")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for i in range(segments):
            step = ltm.step(query, state, chunks[i])
            (step.out.square().sum() + step.stats.mu.sum() + step.stats.sigma2.sum()).backward()
            state = step.state
            del step
    events = sorted((ev.start_ns(), ev.nbytes()) for ev in prof.profiler.kineto_results.events()
                    if ev.name() == "[memory]")
    live = peak = 0
    for _, n in events:
        live += n
        peak = max(peak, live)
    return peak


def test_training_peak_memory_is_flat_in_the_stream_and_linear_in_the_segment():
    """Per token, the memory's training peak does not grow with the tokens consumed (4 vs 16
    segments) and grows at most linearly with the segment length (L vs 4L)."""
    short, long_ = _training_peak_bytes(4, 64), _training_peak_bytes(16, 64)
    assert long_ <= 1.1 * short, (short, long_)
    wide = _training_peak_bytes(4, 256)
    assert wide <= 4.4 * short, (short, wide, wide / short)
