"""Read side of the ∞-former's continuous memory: continuous (Gaussian) attention
over basis coefficients and the KL regulariser on its variances (Martins,
Marinho & Martins, ACL 2022, §3.2 and §3.4; docs/design/infinite-former.md §2, §5).

Each query reads the signal x̄(t) = Bᵀψ(t) under a Gaussian N(μ, σ²) placed by one of two
reads (:data:`READS`, ``--memory-read``): ``location``, the paper's (μ = sigmoid(w_μᵀ s),
σ² = softplus(w_σᵀ s), eq. 9), or two reads that go beyond the paper (docs/infinite-former.md,
"Content reads"), both addressed by p = softmax(s) over the N basis scores (the continuous
analogue of the Neural Turing Machine's content addressing, Graves et al. 2014, §3.3.1):

* ``content``: one Gaussian at μ = Σ_j p_j c_j, the mean of the basis centres under p, of
  variance σ² = Σ_j p_j (c_j − μ)², their spread;
* ``mixture``: the density Σ_j p_j N(t; c_j, w_j²), a mixture of the basis functions' own
  Gaussians, so that a query can read several places at once and every basis function's score
  gets a gradient: E[ψ_i] = Σ_j p_j Φ_ji with Φ_ji = N(c_j; c_i, w_j² + w_i²) (a constant of the
  basis), and the read is pᵀ Φ V — softmax attention over the N rows of Φ V. Its reported μ and
  σ² are the mixture's mean and variance (for the sticky memories and the KL).
E[ψ_j] = N(μ; c_j, σ² + w_j²) in closed form (:func:`expected_basis`), used by the
LM's long-term memory (:mod:`fairseq_plugins.modules.memory.continuous`) and the
summarizer's cross-attention (:mod:`fairseq_plugins.modules.attention.continuous_cross`)
alike. Every read returns :class:`ReadStats`, which the criterion
``infinite_former_kl`` turns into the KL term (:func:`total_kl`). All of it is
meant to run in float32 with autocast off.
"""

import math
from typing import Iterable, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.config import READS  # the --memory-read choices, one option vocabulary with the models'
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.ops.gaussian import product_basis_expectation


def check_read(read: str) -> str:
    """``read`` if it is one of :data:`READS`; else ConfigError naming the choices."""
    if str(read) not in READS:
        raise ConfigError(f"--memory-read must be one of {', '.join(READS)}, got {read!r}")
    return str(read)


class ReadStats(NamedTuple):
    """The Gaussians of one continuous read (one layer, one segment), for the KL (§3.4).

    Attributes:
        mu, sigma2: ``(bsz, H, T)`` float32 means and variances.
        valid: ``(bsz,)`` bool, False for slots that read an empty memory.
    """

    mu: Tensor
    sigma2: Tensor
    valid: Tensor


class ReadMemory(NamedTuple):
    """A memory B prepared for continuous reads (:meth:`ContinuousRead.prepare`).

    The scores s = K_h q_h / √d only enter the read through w_μᵀ s and w_σᵀ s, so the read
    needs K_hᵀ [w_μ, w_σ] / √d = W_K^h Bᵀ [w_μ, w_σ] / √d, not K itself (nor the (T, N) score
    matrix: O(T·d) per head and query instead of O(T·N·d)).

    The content reads need every score, so for them ``scores`` holds the keys themselves (and
    for the mixture read ``values`` holds Φ V, what each basis function's own Gaussian reads).

    Attributes:
        scores: location read: ``(bsz, 2H, e)`` float32, the [w_μ, w_σ]ᵀ K_h / √d of every head
            on the block diagonal (rows 2h, 2h + 1, columns h·d … h·d + d − 1): it times a query
            ``(e,)`` is (w_μᵀ s, w_σᵀ s) of every head. (Queries go on the right: a CPU's matrix
            product is faster with the 2H rows on the left than with 2H columns on the right;
            docs/benchmark.md.) Content reads: ``(bsz, H, N, d)`` float32, the keys K_h / √d.
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


def content_placement(scores: Tensor, centers: Tensor, sigma2_min: float) -> Tuple[Tensor, Tensor]:
    """The content read's Gaussian (module docstring): p = softmax(s) over the N basis
    functions, μ = Σ_j p_j c_j, σ² = Σ_j p_j (c_j − μ)² clamped ≥ ``sigma2_min``.

    Args:
        scores: ``(..., N)`` the basis scores s = K_h q_h / √d; centers: ``(N,)`` c_j in [0, 1].
    Returns:
        ``(mu, sigma2)``, each ``(...)``, in ``scores``' dtype.
    """
    p = torch.softmax(scores, dim=-1)
    mu = torch.matmul(p, centers)
    spread = torch.matmul(p, centers * centers) - mu * mu  # E[c²] − E[c]², ≥ 0 up to rounding
    return mu, spread.clamp_min(sigma2_min)


def mixture_moments(weights: Tensor, centers: Tensor, widths: Tensor, sigma2_min: float) -> Tuple[Tensor, Tensor]:
    """Mean and variance of the mixture Σ_j p_j N(c_j, w_j²) (``weights`` p ``(..., N)``):
    μ = Σ_j p_j c_j, σ² = Σ_j p_j (c_j² + w_j²) − μ² clamped ≥ ``sigma2_min``."""
    mu = torch.matmul(weights, centers)
    second = torch.matmul(weights, centers * centers + widths * widths)
    return mu, (second - mu * mu).clamp_min(sigma2_min)


class ContinuousRead(nn.Module):
    """The parameters and the read shared by every continuous attention over a memory B
    (the LM's long-term memory and the summarizer's cross-attention): W_K, W_V
    (m → e, no bias), W_O (e → e, no bias) and, for the location read, w_μ, w_σ ∈ R^N (§3.2).

    A subclass calls :meth:`build_read` in ``__init__`` (where its parameters belong in
    the creation order), sets ``num_heads``, ``head_dim``, ``embed_dim``, ``sigma2_min`` and
    ``signal`` (its :class:`~fairseq_plugins.modules.continuous.basis.ContinuousBasis`).
    """

    num_heads: int
    head_dim: int
    embed_dim: int
    sigma2_min: float
    read_kind: str = "location"

    def build_read(self, memory_dim: int, embed_dim: int, num_basis: int, read: str = "location") -> None:
        """Create W_K, W_V, W_O and (``read`` = ``"location"``) w_μ, w_σ.

        Raises:
            ConfigError: an unknown ``read`` (:data:`READS`).
        """
        self.read_kind = check_read(read)
        self.k_proj = nn.Linear(memory_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(memory_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        if self.read_kind == "location":
            self.mu_proj = nn.Parameter(torch.empty(num_basis))  # w_μ ∈ R^N
            self.sigma_proj = nn.Parameter(torch.empty(num_basis))  # w_σ ∈ R^N

    def upgrade_state_dict_named(self, state_dict, name: str) -> None:
        """A checkpoint keeps the read it was trained with: one that holds w_μ (``NAME.mu_proj``) was
        trained with the paper's read, so a module built with another read (a checkpoint saved
        before ``--memory-read`` existed, loaded where the model's default read is another) becomes
        the location read before its parameters are loaded."""
        prefix = f"{name}." if name else ""
        if self.read_kind != "location" and prefix + "mu_proj" in state_dict:
            num_basis = state_dict[prefix + "mu_proj"].numel()
            self.read_kind = "location"
            self.mu_proj = nn.Parameter(torch.zeros(num_basis, device=self.k_proj.weight.device))
            self.sigma_proj = nn.Parameter(torch.zeros(num_basis, device=self.k_proj.weight.device))

    def reset_read_parameters(self) -> None:
        for lin in (self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
        if self.read_kind == "location":
            nn.init.normal_(self.mu_proj, std=1.0 / math.sqrt(self.mu_proj.numel()))
            nn.init.normal_(self.sigma_proj, std=1.0 / math.sqrt(self.sigma_proj.numel()))

    def prepare(self, coefficients: Tensor, valid: Optional[Tensor] = None) -> ReadMemory:
        """The memory B ``(bsz, N, m)`` prepared for :meth:`read` (float32, autocast off); slots
        where ``valid`` ``(bsz,)`` is False get zero values (they read zeros)."""
        bsz = coefficients.size(0)
        h, d = self.num_heads, self.head_dim
        with torch.autocast(device_type=coefficients.device.type, enabled=False):
            b = coefficients.float()
            values = F.linear(b, self.v_proj.weight.float())
            if valid is not None:
                values = values * valid.to(values.dtype)[:, None, None]
            values = self.mixed(values.view(bsz, -1, h, d).transpose(1, 2))  # Φ V for the mixture read
            if self.read_kind != "location":
                keys = F.linear(b, self.k_proj.weight.float()) / math.sqrt(d)
                return ReadMemory(keys.view(bsz, -1, h, d).transpose(1, 2), values)
            weights = torch.stack([self.mu_proj.float(), self.sigma_proj.float()]) / math.sqrt(d)  # (2, N)
            rows = F.linear(torch.matmul(weights, b), self.k_proj.weight.float())  # (bsz, 2, e): [w_μ, w_σ]ᵀ B W_Kᵀ
            diagonal = torch.eye(h, device=b.device, dtype=b.dtype).view(1, h, 1, h, 1)
            scores = (rows.view(bsz, 1, 2, h, d) * diagonal).view(bsz, 2 * h, h * d)
        return ReadMemory(scores, values)

    def locate(self, query: Tensor, memory: ReadMemory) -> Tuple[Tensor, Tensor]:
        """Where each query's Gaussian goes: ``(mu, sigma2)`` ``(bsz, H, T)`` float32 for queries
        ``(T, bsz, e)`` (the read of :attr:`read_kind`, see the module docstring; σ² clamped
        ≥ ``sigma2_min``). Runs in float32 with autocast off."""
        tgt_len, bsz, _ = query.shape
        with torch.autocast(device_type=query.device.type, enabled=False):
            if self.read_kind == "content":
                centers, _ = self.signal.product_basis(query.device)
                return content_placement(self.basis_scores(query, memory), centers, self.sigma2_min)
            both = torch.bmm(memory.scores, query.float().permute(1, 2, 0)).view(bsz, self.num_heads, 2, tgt_len)
            return torch.sigmoid(both[:, :, 0]), F.softplus(both[:, :, 1]).clamp_min(self.sigma2_min)

    def basis_scores(self, query: Tensor, memory: ReadMemory) -> Tensor:
        """s = K_h q_h / √d ``(bsz, H, T, N)`` float32 of queries ``(T, bsz, e)`` (content reads)."""
        tgt_len, bsz, _ = query.shape
        q = query.float().view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        return torch.matmul(q, memory.scores.transpose(-1, -2))

    def expectation(self, mu: Tensor, sigma2: Tensor) -> Tensor:
        """E_{N(μ,σ²)}[ψ] ``(bsz, H, T, N)`` float32 (closed form, :func:`expected_basis`)."""
        centers, width_values = self.signal.product_basis(mu.device)
        return product_basis_expectation(mu, sigma2, centers, width_values)

    def read(self, query: Tensor, memory: ReadMemory) -> Tuple[Tensor, Tensor, Tensor]:
        """Continuous attention of queries ``(T, bsz, e)`` over a prepared memory (paper §3.2,
        eqs. 8–10): per head s = K_h q_h / √d ∈ R^N, (μ, σ²) from :meth:`locate` (the paper's
        μ = sigmoid(w_μᵀ s), σ² = softplus(w_σᵀ s), or the content read), clamped
        σ² ≥ ``sigma2_min``, z_h = V_hᵀ E_{N(μ,σ²)}[ψ] (closed form, :func:`expected_basis`),
        output W_O [z_h]_h. Runs in float32 with autocast off.

        Returns:
            ``(out (T, bsz, e) float32, mu, sigma2 (bsz, H, T) float32)``.
        """
        tgt_len, bsz, _ = query.shape
        with torch.autocast(device_type=query.device.type, enabled=False):
            weights, mu, sigma2 = self.read_weights(query, memory)
            z = torch.matmul(weights, memory.values).permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            return F.linear(z, self.out_proj.weight.float()), mu, sigma2

    def read_weights(self, query: Tensor, memory: ReadMemory) -> Tuple[Tensor, Tensor, Tensor]:
        """``(weights (bsz, H, T, N), mu, sigma2 (bsz, H, T))`` float32: what multiplies the
        prepared values — E_{N(μ,σ²)}[ψ] for the Gaussian reads, p for the mixture read (whose
        values are Φ V, :meth:`mixed`) — and the read's Gaussian (or the mixture's moments)."""
        if self.read_kind == "mixture":
            weights = torch.softmax(self.basis_scores(query, memory), dim=-1)  # p (bsz, H, T, N)
            centers, widths = self.signal.basis(query.device)
            return (weights,) + mixture_moments(weights, centers, widths, self.sigma2_min)
        mu, sigma2 = self.locate(query, memory)  # (bsz, H, T)
        return self.expectation(mu, sigma2), mu, sigma2

    def mixed(self, rows: Tensor) -> Tensor:
        """``rows`` ``(..., N, d)`` as the read weighs them: Φ rows for the mixture read (what each
        basis function's own Gaussian reads of them), ``rows`` unchanged for the others."""
        return torch.matmul(self.signal.overlap(rows.device), rows) if self.read_kind == "mixture" else rows
