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
from typing import Iterable, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from fairseq_plugins.modules.continuous_signal import gaussian_density


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


class _ExpectedBasis(torch.autograd.Function):
    """:func:`expected_basis` with a hand-written backward (what autograd derives, in fewer
    passes over ``(..., N)``): with v = σ² + w², d = μ − c and E = N(μ; c, v),
    ∂E/∂μ = −E d / v and ∂E/∂σ² = ½ E (d²/v − 1) / v. The basis gets no gradient."""

    @staticmethod
    def forward(ctx, mu: Tensor, sigma2: Tensor, centers: Tensor, widths: Tensor) -> Tensor:
        inv_var = (sigma2.unsqueeze(-1) + widths * widths).reciprocal()  # (..., N)
        diff = mu.unsqueeze(-1) - centers
        scaled = diff * inv_var
        density = torch.exp(-0.5 * diff * scaled) * (inv_var.sqrt() * (1.0 / math.sqrt(2.0 * math.pi)))
        ctx.save_for_backward(density, scaled, inv_var)
        return density

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        density, scaled, inv_var = ctx.saved_tensors
        weighted = grad * density
        grad_mu = -(weighted * scaled).sum(-1)
        grad_sigma2 = 0.5 * (weighted * (scaled * scaled - inv_var)).sum(-1)
        return grad_mu, grad_sigma2, None, None


def expected_basis_fused(mu: Tensor, sigma2: Tensor, centers: Tensor, widths: Tensor) -> Tensor:
    """:func:`expected_basis` for the read (same values; the basis ``centers``, ``widths`` must
    not need gradients): fewer passes forward and backward."""
    if centers.requires_grad or widths.requires_grad:
        return expected_basis(mu, sigma2, centers, widths)
    return _ExpectedBasis.apply(mu, sigma2, centers, widths)


def continuous_attention(q: Tensor, keys: Tensor, values: Tensor, w_mu: Tensor, w_sigma: Tensor,
                         centers: Tensor, widths: Tensor, sigma2_min: float) -> Tuple[Tensor, Tensor, Tensor]:
    """Continuous attention of queries over basis coefficients (paper §3.2, eqs. 8–10).

    Scores s = K_h q / √d ∈ R^N, μ = sigmoid(w_μᵀ s), σ² = softplus(w_σᵀ s)
    clamped ≥ ``sigma2_min``, and z_h = V_hᵀ E_{N(μ,σ²)}[ψ] (closed form,
    :func:`expected_basis`). Call it in float32 with autocast off.

    Args:
        q: ``(bsz, H, T, d)`` queries per head.
        keys, values: ``(bsz, H, N, d)``, K = B W_K and V = B W_V split into heads.
        w_mu, w_sigma: ``(N,)`` the projections w_μ, w_σ (shared by heads).
        centers, widths: ``(N,)`` the basis.
    Returns:
        ``(z, mu, sigma2)``: ``z`` ``(bsz, H, T, d)``; ``mu``, ``sigma2`` ``(bsz, H, T)``.
    """
    # the scores only enter through w_μᵀ s and w_σᵀ s, so (q Kᵀ) w = q (Kᵀ w): the (T, N) score
    # matrix is never formed (O(T·d) instead of O(T·N·d) per head, forward and backward)
    proj = torch.stack([w_mu, w_sigma], dim=-1) / math.sqrt(q.size(-1))  # (N, 2)
    both = torch.matmul(q, torch.matmul(keys.transpose(-1, -2), proj))  # (bsz, H, T, 2)
    mu = torch.sigmoid(both[..., 0])  # (bsz, H, T)
    sigma2 = F.softplus(both[..., 1]).clamp_min(sigma2_min)
    density = expected_basis_fused(mu, sigma2, centers, widths)  # (bsz, H, T, N)
    return torch.matmul(density, values), mu, sigma2


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

    def memory_keys_values(self, coefficients: Tensor) -> Tuple[Tensor, Tensor]:
        """K = B W_K and V = B W_V split into heads: ``(bsz, H, N, d)`` each, float32."""
        bsz = coefficients.size(0)
        h, d = self.num_heads, self.head_dim
        with torch.autocast(device_type=coefficients.device.type, enabled=False):
            b = coefficients.float()
            keys = F.linear(b, self.k_proj.weight.float()).view(bsz, -1, h, d).transpose(1, 2)
            values = F.linear(b, self.v_proj.weight.float()).view(bsz, -1, h, d).transpose(1, 2)
        return keys, values

    def read(self, q: Tensor, keys: Tensor, values: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Continuous attention of float32 queries ``(bsz, H, T, d)`` over K, V, then W_O.

        Returns ``(out (T, bsz, e) float32, mu, sigma2 (bsz, H, T))``.
        """
        bsz, _, tgt_len, _ = q.shape
        with torch.autocast(device_type=q.device.type, enabled=False):
            centers, widths = self.signal.basis(q.device)
            z, mu, sigma2 = continuous_attention(q, keys, values, self.mu_proj.float(), self.sigma_proj.float(),
                                                 centers, widths, self.sigma2_min)  # z: (bsz, H, T, d)
            z = z.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            return F.linear(z, self.out_proj.weight.float()), mu, sigma2
