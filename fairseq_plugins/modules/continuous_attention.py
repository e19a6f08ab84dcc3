"""Read side of the ∞-former's continuous memory: continuous (Gaussian) attention
over basis coefficients and the KL regulariser on its variances (Martins,
Marinho & Martins, ACL 2022, §3.2 and §3.4; docs/design/infinite-former.md §2, §5).

Each query reads the signal x̄(t) = Bᵀψ(t) under a Gaussian N(μ, σ²):
E[ψ_j] = N(μ; c_j, σ² + w_j²) in closed form (:func:`expected_basis`), used by the
LM's long-term memory (:mod:`fairseq_plugins.modules.long_term_memory`) and the
summarizer's cross-attention (:mod:`fairseq_plugins.modules.continuous_cross_attention`)
alike. Every read returns :class:`ReadStats`, which the criterion
``infinite_former_kl`` turns into the KL term (:func:`total_kl`). All of it is
meant to run in float32 with autocast off.
"""

import math
from typing import Iterable, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from fairseq_plugins.modules.continuous_signal import gaussian_density, log_smallest_normal


class ReadStats(NamedTuple):
    """The Gaussians of one continuous read (one layer, one segment), for the KL (§3.4).

    Attributes:
        mu, sigma2: ``(bsz, H, T)`` float32 means and variances.
        valid: ``(bsz,)`` bool, False for slots that read an empty memory.
    """

    mu: Tensor
    sigma2: Tensor
    valid: Tensor


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
    the same n_c centres (width-major: :func:`~fairseq_plugins.modules.continuous_signal.rbf_basis`),
    with a hand-written backward. With d_j = μ − c_j, v_k = σ² + w_k² (one per width, not
    per function) and a_j = d_j² / (2 v_k): E_j = exp(−a_j) / √(2π v_k),
    ∂E_j/∂μ = −E_j d_j / v_k and ∂E_j/∂σ² = E_j (a_j − ½) / v_k. Exponents are raised to at
    least log of the dtype's smallest normal number + 1 (:func:`log_smallest_normal`; a CPU
    computes exp into the subnormal range ~10× slower and E[ψ] changes by < 1e-35 in float32).
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
    (:meth:`~fairseq_plugins.modules.continuous_signal.ContinuousBasis.product_basis`): fewer
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


class ReadMemory(NamedTuple):
    """A memory B prepared for continuous reads (:meth:`ContinuousRead.prepare`).

    The scores s = K_h q_h / √d only enter the read through w_μᵀ s and w_σᵀ s, so the read
    needs K_hᵀ [w_μ, w_σ] / √d = W_K^h Bᵀ [w_μ, w_σ] / √d, not K itself (nor the (T, N) score
    matrix: O(T·d) per head and query instead of O(T·N·d)).

    Attributes:
        scores: ``(bsz, 2H, e)`` float32, the [w_μ, w_σ]ᵀ K_h / √d of every head on the block
            diagonal (rows 2h, 2h + 1, columns h·d … h·d + d − 1): it times a query ``(e,)`` is
            (w_μᵀ s, w_σᵀ s) of every head. (Queries go on the right: a CPU's matrix product
            is ~4× faster with the 2H rows on the left than with 2H columns on the right.)
        values: ``(bsz, H, N, d)`` float32, V = B W_V split into heads (zero for a slot
            whose memory is empty, which then reads exactly zero).
    """

    scores: Tensor
    values: Tensor


def kl_to_reference(sigma2: Tensor, sigma0: float) -> Tensor:
    """KL(N(μ, σ²) ‖ N(μ, σ₀²)) = ½ (σ²/σ₀² − log(σ²/σ₀²) − 1), elementwise (§3.4).

    Zero at σ = σ₀; dKL/dσ² = ½ (1/σ₀² − 1/σ²).
    """
    ratio = sigma2.float() / (sigma0**2)
    return 0.5 * (ratio - torch.log(ratio) - 1.0)


def total_kl(stats: Iterable[ReadStats], sigma0: float) -> Tensor:
    """Σ over reads (layers × segments) of mean_{valid slots, heads, queries} KL (§3.4).

    Returns a float32 scalar (0 when no slot had a memory).
    """
    total = None
    for read in stats:
        if bool(read.valid.any()):
            term = kl_to_reference(read.sigma2[read.valid], sigma0).mean()
            total = term if total is None else total + term
    if total is None:
        return torch.zeros(())
    return total


class ContinuousRead(nn.Module):
    """The parameters and the read shared by every continuous attention over a memory B
    (the LM's long-term memory and the summarizer's cross-attention): W_K, W_V
    (m → e, no bias), W_O (e → e, no bias), w_μ, w_σ ∈ R^N (§3.2).

    A subclass calls :meth:`build_read` in ``__init__`` (where its parameters belong in
    the creation order), sets ``num_heads``, ``head_dim``, ``embed_dim``, ``sigma2_min`` and
    ``signal`` (its :class:`~fairseq_plugins.modules.continuous_signal.ContinuousBasis`).
    """

    num_heads: int
    head_dim: int
    embed_dim: int
    sigma2_min: float

    def build_read(self, memory_dim: int, embed_dim: int, num_basis: int) -> None:
        self.k_proj = nn.Linear(memory_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(memory_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.mu_proj = nn.Parameter(torch.empty(num_basis))  # w_μ ∈ R^N
        self.sigma_proj = nn.Parameter(torch.empty(num_basis))  # w_σ ∈ R^N

    def reset_read_parameters(self) -> None:
        for lin in (self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
        nn.init.normal_(self.mu_proj, std=1.0 / math.sqrt(self.mu_proj.numel()))
        nn.init.normal_(self.sigma_proj, std=1.0 / math.sqrt(self.sigma_proj.numel()))

    def prepare(self, coefficients: Tensor, valid: Optional[Tensor] = None) -> ReadMemory:
        """The memory B ``(bsz, N, m)`` prepared for :meth:`read` (float32, autocast off); slots
        where ``valid`` ``(bsz,)`` is False get zero values (they read zeros)."""
        bsz = coefficients.size(0)
        h, d = self.num_heads, self.head_dim
        with torch.autocast(device_type=coefficients.device.type, enabled=False):
            b = coefficients.float()
            weights = torch.stack([self.mu_proj.float(), self.sigma_proj.float()]) / math.sqrt(d)  # (2, N)
            rows = F.linear(torch.matmul(weights, b), self.k_proj.weight.float())  # (bsz, 2, e): [w_μ, w_σ]ᵀ B W_Kᵀ
            diagonal = torch.eye(h, device=b.device, dtype=b.dtype).view(1, h, 1, h, 1)
            scores = (rows.view(bsz, 1, 2, h, d) * diagonal).view(bsz, 2 * h, h * d)
            values = F.linear(b, self.v_proj.weight.float())
            if valid is not None:
                values = values * valid.to(values.dtype)[:, None, None]
        return ReadMemory(scores, values.view(bsz, -1, h, d).transpose(1, 2))

    def read(self, query: Tensor, memory: ReadMemory) -> Tuple[Tensor, Tensor, Tensor]:
        """Continuous attention of queries ``(T, bsz, e)`` over a prepared memory (paper §3.2,
        eqs. 8–10): per head s = K_h q_h / √d ∈ R^N, μ = sigmoid(w_μᵀ s),
        σ² = softplus(w_σᵀ s) clamped ≥ ``sigma2_min``, z_h = V_hᵀ E_{N(μ,σ²)}[ψ] (closed form,
        :func:`expected_basis`), output W_O [z_h]_h. Runs in float32 with autocast off.

        Returns:
            ``(out (T, bsz, e) float32, mu, sigma2 (bsz, H, T) float32)``.
        """
        tgt_len, bsz, _ = query.shape
        with torch.autocast(device_type=query.device.type, enabled=False):
            centers, width_values = self.signal.product_basis(query.device)
            both = torch.bmm(memory.scores, query.float().permute(1, 2, 0)).view(bsz, self.num_heads, 2, tgt_len)
            mu = torch.sigmoid(both[:, :, 0])  # (bsz, H, T)
            sigma2 = F.softplus(both[:, :, 1]).clamp_min(self.sigma2_min)
            density = product_basis_expectation(mu, sigma2, centers, width_values)  # (bsz, H, T, N)
            z = torch.matmul(density, memory.values).permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            return F.linear(z, self.out_proj.weight.float()), mu, sigma2
