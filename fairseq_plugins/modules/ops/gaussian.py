"""The Gaussian functions of the continuous memory and their custom autograd op
(Martins, Marinho & Martins, ACL 2022, §3.1-§3.2; docs/design/infinite-former.md §1-§2).

* :func:`gaussian_density` N(x; mean, var) and :func:`evaluate_basis` ψ(t), the basis
  evaluated at positions (both clamped above the dtype's subnormal range,
  :func:`log_smallest_normal`);
* :func:`product_basis_expectation`: E_{t∼N(μ, σ²)}[ψ(t)] in closed form (eq. 10) with a
  hand-written backward, beside :func:`expected_basis`, the same expectation written
  out with plain autograd: its reference in tests/core/test_long_term_memory.py.
"""

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def log_smallest_normal(dtype: torch.dtype) -> float:
    """log of the smallest positive normal number of ``dtype``, plus 1 (−86.3 in float32 and
    bfloat16, −707.4 in float64; float16, whose smallest normal number 6e-5 is not negligible,
    gets float32's): exponents are clamped there so that exp never enters the subnormal range,
    where a CPU's exp is much slower (docs/benchmark.md) and which no sum of densities can
    tell from zero."""
    if dtype == torch.float16:
        dtype = torch.float32
    return math.log(torch.finfo(dtype).tiny) + 1.0  # the margin keeps exp's rounding above it


def gaussian_density(x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """N(x; mean, var) elementwise (broadcasting), computed in log space; values below the
    smallest normal number of the dtype are raised to it (:func:`log_smallest_normal`)."""
    exponent = -0.5 * (x - mean) ** 2 / var - 0.5 * torch.log(var) - _LOG_SQRT_2PI
    return exponent.clamp_min(log_smallest_normal(exponent.dtype)).exp()


def evaluate_basis(t: Tensor, centers: Tensor, widths: Tensor) -> Tensor:
    """ψ(t): the basis evaluated at positions ``t`` of shape ``(..., P)``.

    Returns a tensor of shape ``(..., P, N)`` with ψ_j(t) = N(t; c_j, w_j²).
    """
    return gaussian_density(t.unsqueeze(-1), centers, widths**2)


def expected_basis(mu: Tensor, sigma2: Tensor, centers: Tensor, widths: Tensor) -> Tensor:
    """E_{t∼N(μ, σ²)}[ψ_j(t)] = N(μ; c_j, σ² + w_j²) (paper eq. 10).

    The integral is over ℝ (not truncated to [0, 1]). Plain autograd through
    this expression gives the exact gradient w.r.t. μ and σ².

    Args:
        mu, sigma2: ``(...)`` Gaussian means and variances.
    Returns:
        ``(..., N)``.
    """
    return gaussian_density(mu.unsqueeze(-1), centers, sigma2.unsqueeze(-1) + widths**2)


class _ProductBasisExpectation(torch.autograd.Function):
    """:func:`expected_basis` for a basis whose N functions are n_w widths, each combined with
    the same n_c centres (width-major: :func:`~fairseq_plugins.modules.continuous.basis.rbf_basis`),
    with a hand-written backward. With d_j = μ − c_j, v_k = σ² + w_k² (one per width, not
    per function) and a_j = d_j² / (2 v_k): E_j = exp(−a_j) / √(2π v_k),
    ∂E_j/∂μ = −E_j d_j / v_k and ∂E_j/∂σ² = E_j (a_j − ½) / v_k. Exponents are raised to at
    least log of the dtype's smallest normal number + 1 (:func:`log_smallest_normal`: a CPU
    computes exp into the subnormal range much more slowly, and E[ψ] changes by < 1e-35 in
    float32).
    The basis gets no gradient."""

    @staticmethod
    def forward(ctx, mu: Tensor, sigma2: Tensor, centers: Tensor, width_values: Tensor) -> Tensor:
        diff = mu.unsqueeze(-1) - centers  # (..., N)
        inv_var = (sigma2.unsqueeze(-1) + width_values * width_values).reciprocal()  # (..., n_w)
        exponent = (diff * diff).unflatten(-1, (width_values.numel(), -1)).mul_((-0.5 * inv_var).unsqueeze(-1))  # −a
        density = exponent.clamp_min(log_smallest_normal(exponent.dtype)).exp_()  # (..., n_w, n_c)
        density.mul_((inv_var.sqrt() * (1.0 / math.sqrt(2.0 * math.pi))).unsqueeze(-1))
        ctx.save_for_backward(density, diff, exponent, inv_var)
        return density.flatten(-2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        density, diff, exponent, inv_var = ctx.saved_tensors
        scaled = (grad.view_as(density) * density).mul_(inv_var.unsqueeze(-1))  # g E / v
        grad_mu = -(scaled.flatten(-2) * diff).sum(-1)
        grad_sigma2 = -(scaled * exponent).sum((-2, -1)) - 0.5 * scaled.sum((-2, -1))
        return grad_mu, grad_sigma2, None, None


def product_basis_expectation(mu: Tensor, sigma2: Tensor, centers: Tensor, width_values: Tensor) -> Tensor:
    """:func:`expected_basis` (same values but below ~1e-35) for a basis of n_w widths
    ``width_values`` ``(n_w,)`` each combined with the same centres, width-major: ``centers``
    ``(N,)`` is the grid repeated n_w times and function j has width ``width_values[j // (N // n_w)]``
    (:meth:`~fairseq_plugins.modules.continuous.basis.ContinuousBasis.product_basis`): fewer
    passes over ``(..., N)`` forward and backward. The basis must not need gradients.

    Args:
        mu, sigma2: ``(...)``.
    Returns:
        ``(..., N)``.
    Raises:
        ValueError: if ``centers`` or ``width_values`` requires gradients.
    """
    if centers.requires_grad or width_values.requires_grad:
        raise ValueError("product_basis_expectation: the basis must not require gradients")
    return _ProductBasisExpectation.apply(mu, sigma2, centers, width_values)
