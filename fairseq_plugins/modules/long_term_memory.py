"""The ∞-former's unbounded long-term memory (LTM).

Martins, Marinho & Martins, "∞-former: Infinite Memory Transformer", ACL 2022
(arXiv 2109.00301), §3. Notation follows the paper:

* ψ(t) ∈ R^N: N normalised Gaussian radial basis functions on [0, 1];
* B ∈ R^{N×e}: the memory, coefficients of a ridge-regression fit
  (penalty λ) of past hidden states placed on [0, 1];
* each query reads the signal x̄(t) = Bᵀψ(t) under a Gaussian N(μ, σ²)
  (continuous attention, closed form E[ψ_j] = N(μ; c_j, σ² + w_j²));
* after every segment the old signal is sampled at M points, contracted to
  (0, τ], the L new (gated) vectors are appended on (τ, 1] and B is re-fitted;
* "sticky memories" sample the old signal where the previous segment's
  attention put its mass (D histogram bins);
* the KL regulariser KL(N(μ, σ²) ‖ N(μ, σ₀²)) keeps σ² from collapsing.

All memory math (ridge matrices, the fit, θ = (μ, σ²), E[ψ], the KL) runs in
float32 even when the model is in fp16 or under autocast; the ridge matrices
are computed in float64 and cast. Shapes use fairseq's time-first order:
``(T, B, C)`` is (time, batch, channels); ``bsz`` is the batch size (the
paper's B is always called ``coefficients`` in code to avoid the clash).
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


# --------------------------------------------------------------------------
# Basis functions and closed-form integrals (paper §3.1, §3.2)
# --------------------------------------------------------------------------


def rbf_basis(num_basis: int, widths: Sequence[float]) -> Tuple[Tensor, Tensor]:
    """Centres c and widths w of N Gaussian basis functions on [0, 1].

    N / len(widths) centres are evenly spaced on [0, 1] (both ends included)
    and each centre is combined with every width (ordered width-major).

    Returns:
        ``(centers, widths)``, each float64 of shape ``(N,)``.

    Raises:
        ConfigError: if N is not a positive multiple of ``len(widths)`` or a
            width is not positive.
    """
    if not widths or any(w <= 0 for w in widths):
        raise ConfigError(
            f"basis widths must be positive numbers, got {list(widths)}; "
            "use e.g. --basis-widths 0.005,0.01"
        )
    if num_basis <= 0 or num_basis % len(widths) != 0:
        raise ConfigError(
            f"--num-basis-functions must be a positive multiple of the number of "
            f"basis widths ({len(widths)}), got {num_basis}"
        )
    per_width = num_basis // len(widths)
    grid = torch.linspace(0.0, 1.0, per_width, dtype=torch.float64)
    centers = grid.repeat(len(widths))
    w = torch.tensor(list(widths), dtype=torch.float64).repeat_interleave(per_width)
    return centers, w


def gaussian_density(x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """N(x; mean, var) elementwise (broadcasting), computed in log space."""
    return torch.exp(-0.5 * (x - mean) ** 2 / var - 0.5 * torch.log(var) - _LOG_SQRT_2PI)


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
    scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(q.size(-1))  # (bsz, H, T, N)
    mu = torch.sigmoid(torch.matmul(scores, w_mu))  # (bsz, H, T)
    sigma2 = F.softplus(torch.matmul(scores, w_sigma)).clamp_min(sigma2_min)
    density = expected_basis(mu, sigma2, centers, widths)  # (bsz, H, T, N)
    return torch.matmul(density, values), mu, sigma2


def kl_to_reference(sigma2: Tensor, sigma0: float) -> Tensor:
    """KL(N(μ, σ²) ‖ N(μ, σ₀²)) = ½ (σ²/σ₀² − log(σ²/σ₀²) − 1), elementwise (§3.4).

    Zero at σ = σ₀; dKL/dσ² = ½ (1/σ₀² − 1/σ²).
    """
    ratio = sigma2.float() / (sigma0**2)
    return 0.5 * (ratio - torch.log(ratio) - 1.0)


# --------------------------------------------------------------------------
# Ridge regression (paper eq. 7)
# --------------------------------------------------------------------------


def ridge_regression_matrix(
    positions: Tensor,
    centers: Tensor,
    widths: Tensor,
    ridge_penalty: float,
    boundary_padding: bool = True,
) -> Tensor:
    """G such that the ridge fit of X (placed at ``positions``) is B = Gᵀ X.

    B = (F Fᵀ + λI)⁻¹ F X with F = [ψ(t_1) … ψ(t_n)] ∈ R^{N×n}, i.e.
    G = Fᵀ (F Fᵀ + λI)⁻¹ ∈ R^{n×N}. Computed in float64 (the Gram matrix is
    ill-conditioned; fp32 inversion is ~1e-3 off).

    With ``boundary_padding`` the fit also sees ⌊n/2⌋ zero vectors beyond each
    end of the positions, at spacing 1/n (for the grid (i + ½)/n this is the
    grid on [−½, 1½] of the reference code); zero targets only enter the Gram
    matrix, so G keeps one row per real position. This damps edge artefacts.

    Args:
        positions: ``(n,)`` positions in [0, 1].
    Returns:
        float64 ``(n, N)``.
    """
    t = positions.to(torch.float64)
    c, w = centers.to(torch.float64), widths.to(torch.float64)
    n = t.numel()
    f_real = evaluate_basis(t, c, w).transpose(0, 1)  # (N, n)
    f_all = f_real
    if boundary_padding and n >= 2:
        # continue the grid by ⌊n/2⌋ points at spacing 1/n beyond both extremes
        offsets = torch.arange(1, n // 2 + 1, dtype=torch.float64, device=t.device) / n
        t_pad = torch.cat([t.min() - offsets, t.max() + offsets])
        f_all = torch.cat([f_real, evaluate_basis(t_pad, c, w).transpose(0, 1)], dim=1)
    gram = f_all @ f_all.transpose(0, 1) + ridge_penalty * torch.eye(c.numel(), dtype=torch.float64, device=t.device)
    return torch.linalg.solve(gram, f_real).transpose(0, 1)  # (n, N); gram is symmetric


def first_fit_positions(length: int) -> Tensor:
    """Positions (i + ½)/L, i = 0..L−1, of the first chunk entering an empty memory."""
    return (torch.arange(length, dtype=torch.float64) + 0.5) / length


def update_positions(num_samples: int, length: int, tau: float) -> Tensor:
    """Positions after an update (paper §3.3): the M old samples contracted to
    τ·k/M (k = 1..M), then the L new vectors at τ + (1 − τ)·i/L (i = 1..L).

    Returns float64 ``(M + L,)``.
    """
    k = torch.arange(1, num_samples + 1, dtype=torch.float64) / num_samples
    i = torch.arange(1, length + 1, dtype=torch.float64) / length
    return torch.cat([tau * k, tau + (1.0 - tau) * i])


# --------------------------------------------------------------------------
# One memory per sequence of a padded batch (the summarizer's encoder memory)
# --------------------------------------------------------------------------


def fit_sequences(
    x: Tensor,
    lengths: Tensor,
    centers: Tensor,
    widths: Tensor,
    ridge_penalty: float,
    boundary_padding: bool = True,
) -> Tensor:
    """Ridge fit (paper eq. 7) of every sequence of a right-padded batch on its own grid.

    The first L_b vectors of example b are placed at t_i = (i + ½)/L_b
    (:func:`first_fit_positions`) and fitted: B_b = G_{L_b}ᵀ x[b, :L_b] with
    G from :func:`ridge_regression_matrix` (the LM's fit, boundary padding
    included). B_b has the fixed shape ``(N, e)`` whatever L_b, and positions
    ≥ L_b never enter the fit, so a padded example's B equals the unpadded one's.

    G is computed in float64 on ``x``'s device (on the CPU for devices without
    float64), once per distinct length in the batch, and not cached: a cache
    per length would grow without bound over a corpus of documents. Cost per
    distinct length O(N²·L) (Gram matrix and solve) + O(N³); the product Gᵀx
    is O(N·L·e) in float32 with autocast off. Gradients flow to ``x``.

    Args:
        x: ``(bsz, S, e)`` right-padded sequences (any float dtype).
        lengths: ``(bsz,)`` integer lengths, 1 ≤ L_b ≤ S.
        centers, widths: ``(N,)`` the basis (:func:`rbf_basis`).
        ridge_penalty: λ > 0.
    Returns:
        ``(bsz, N, e)`` float32, the paper's B of every example.
    Raises:
        ConfigError: a length outside [1, S].
    """
    bsz, max_len, _ = x.shape
    lens = [int(n) for n in lengths.tolist()]
    if lens and (min(lens) < 1 or max(lens) > max_len):
        raise ConfigError(f"sequence lengths must lie in [1, {max_len}] for the memory fit, got "
                          f"{min(lens)}..{max(lens)}")
    work = x.device if x.device.type in ("cpu", "cuda") else torch.device("cpu")  # float64 available
    c = centers.to(device=work, dtype=torch.float64)
    w = widths.to(device=work, dtype=torch.float64)
    with torch.autocast(device_type=x.device.type, enabled=False):
        x32 = x.float()
        out = x32.new_zeros(bsz, c.numel(), x.size(-1))
        for length in sorted(set(lens)):
            rows = torch.tensor([b for b, n in enumerate(lens) if n == length], device=x.device)
            g = ridge_regression_matrix(first_fit_positions(length).to(work), c, w, ridge_penalty,
                                        boundary_padding).to(device=x.device, dtype=torch.float32)  # (L, N)
            fit = torch.einsum("ln,ble->bne", g, x32.index_select(0, rows)[:, :length])
            out = out.index_copy(0, rows, fit)
    return out


# --------------------------------------------------------------------------
# Sticky memories (paper §3.3, "sticky memories")
# --------------------------------------------------------------------------


def sticky_histogram(mu: Tensor, sigma: Tensor, num_bins: int) -> Tensor:
    """Attention mass of the previous segment in D equal bins of [0, 1].

    p(bin j) ∝ Σ_{heads, queries} Φ((b_{j+1} − μ)/σ) − Φ((b_j − μ)/σ).

    Args:
        mu, sigma: ``(bsz, H, T)`` means and standard deviations.
    Returns:
        ``(bsz, D)`` float32, each row summing to 1 (uniform if no mass falls
        inside [0, 1]).
    """
    edges = torch.linspace(0.0, 1.0, num_bins + 1, device=mu.device, dtype=torch.float32)
    z = (edges - mu.float().unsqueeze(-1)) / sigma.float().unsqueeze(-1)  # (bsz, H, T, D+1)
    cdf = torch.special.ndtr(z)
    mass = (cdf[..., 1:] - cdf[..., :-1]).sum(dim=(1, 2))  # (bsz, D)
    total = mass.sum(-1, keepdim=True)
    uniform = torch.full_like(mass, 1.0 / num_bins)
    return torch.where(total > 0, mass / total.clamp_min(1e-30), uniform)


def sticky_positions(histogram: Tensor, num_samples: int, random: bool) -> Tensor:
    """M sorted sampling positions drawn from a bin histogram by inverse CDF.

    With ``random`` (training) the quantiles are sorted uniform draws from
    torch's global generator, which fairseq re-seeds every update (so a resumed
    run draws the same); otherwise (evaluation) they are the evenly spaced
    quantiles (k − ½)/M, which makes evaluation deterministic. A quantile
    falling in bin j is mapped linearly inside that bin (not to its left
    edge as in the reference code).

    Args:
        histogram: ``(bsz, D)`` rows summing to 1.
    Returns:
        ``(bsz, M)`` positions in [0, 1], non-decreasing along M.
    """
    bsz, num_bins = histogram.shape
    if random:
        u = torch.rand(bsz, num_samples, device=histogram.device).sort(dim=-1).values
    else:
        u = (torch.arange(num_samples, device=histogram.device, dtype=torch.float32) + 0.5) / num_samples
        u = u.expand(bsz, num_samples)
    cdf = histogram.cumsum(-1)  # (bsz, D)
    cdf = cdf / cdf[:, -1:].clamp_min(1e-30)
    u = u.contiguous()
    bins = torch.searchsorted(cdf, u, right=False).clamp_(max=num_bins - 1)  # (bsz, M)
    lower = torch.where(bins > 0, cdf.gather(1, (bins - 1).clamp_min(0)), torch.zeros_like(u))
    width = histogram.gather(1, bins)
    frac = ((u - lower) / width.clamp_min(1e-30)).clamp(0.0, 1.0)
    return (bins.to(u.dtype) + frac) / num_bins


# --------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------


@dataclass
class LongTermMemoryState:
    """Per-layer LTM state of ``bsz`` streams (not a parameter; never in the state_dict).

    Attributes:
        coefficients: ``(bsz, N, e)`` float32, the paper's B.
        valid: ``(bsz,)`` bool, False for slots whose memory is empty.
        mu, sigma: ``(bsz, H, T)`` float32, the previous segment's attention
            Gaussians (for sticky memories); ``None`` before the first read.
    """

    coefficients: Tensor
    valid: Tensor
    mu: Optional[Tensor] = None
    sigma: Optional[Tensor] = None

    @classmethod
    def empty(cls, bsz: int, num_basis: int, embed_dim: int, device) -> "LongTermMemoryState":
        return cls(
            coefficients=torch.zeros(bsz, num_basis, embed_dim, device=device),
            valid=torch.zeros(bsz, dtype=torch.bool, device=device),
        )

    def reset_(self, slots: Tensor) -> None:
        """Empty the memory of the slots where ``slots`` (``(bsz,)`` bool) is True.

        Their sticky statistics are left as they are: an empty slot's next
        update fits the new chunk alone and never samples the old signal.
        """
        keep = (~slots).to(self.coefficients.dtype)
        self.coefficients = self.coefficients * keep[:, None, None]
        self.valid = self.valid & ~slots

    def detach(self) -> "LongTermMemoryState":
        return LongTermMemoryState(
            self.coefficients.detach(),
            self.valid,
            None if self.mu is None else self.mu.detach(),
            None if self.sigma is None else self.sigma.detach(),
        )


class LongTermMemory(nn.Module):
    """One layer's continuous long-term memory: gate, update and read.

    Args:
        embed_dim: e, the model width.
        num_heads: h; e must be divisible by h.
        num_basis: N basis functions (a multiple of ``len(basis_widths)``).
        basis_widths: Gaussian widths, each combined with every centre.
        ridge_penalty: λ > 0.
        tau: τ ∈ (0, 1), the share of [0, 1] kept for the old memory.
        num_samples: M > 0 samples of the old signal per update.
        (Defaults: the paper's language-modelling settings.)
        sticky: sample the old signal where attention went (§3.3).
        sticky_bins: D histogram bins.
        sigma2_min: lower clamp of σ².
        boundary_padding: ridge fit with zero padding on both sides (§1 of the
            design notes).

    Raises:
        ConfigError: for any invalid hyper-parameter (one line naming the fix).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_basis: int = 512,
        basis_widths: Sequence[float] = (0.005, 0.01),
        ridge_penalty: float = 0.5,
        tau: float = 0.5,
        num_samples: int = 512,
        sticky: bool = True,
        sticky_bins: int = 128,
        sigma2_min: float = 1e-4,
        boundary_padding: bool = True,
    ):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ConfigError(
                f"the model width ({embed_dim}) must be divisible by the number of heads "
                f"({num_heads}); change --decoder-embed-dim or --decoder-attention-heads"
            )
        if not 0.0 < tau < 1.0:
            raise ConfigError(f"--tau must lie strictly between 0 and 1, got {tau}")
        if num_samples <= 0:
            raise ConfigError(f"--num-samples (M) must be positive, got {num_samples}")
        if ridge_penalty <= 0:
            raise ConfigError(f"--ridge-penalty (λ) must be positive, got {ridge_penalty}")
        if sticky_bins <= 0:
            raise ConfigError(f"--sticky-bins must be positive, got {sticky_bins}")
        if sigma2_min <= 0:
            raise ConfigError(f"--sigma2-min must be positive, got {sigma2_min}")
        centers, widths = rbf_basis(num_basis, basis_widths)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.num_basis, self.num_samples = num_basis, num_samples
        self.ridge_penalty, self.tau = ridge_penalty, tau
        self.sticky, self.sticky_bins = sticky, sticky_bins
        self.sigma2_min, self.boundary_padding = sigma2_min, boundary_padding
        # float64 masters on the CPU; fp32 copies per device are cached lazily.
        # Kept out of the module's buffers on purpose: model.half() would cast
        # buffers to fp16, and the ridge matrices are wrong in fp16.
        self._centers64, self._widths64 = centers, widths
        self._cache: Dict[Tuple, Tensor] = {}

        # smoothing gate X̃ = X ⊙ sigmoid(Conv1d(X)), kernel 3 (§3.3)
        self.gate = nn.Conv1d(embed_dim, embed_dim, kernel_size=3, stride=1, padding=1)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.mu_proj = nn.Parameter(torch.empty(num_basis))  # w_μ ∈ R^N
        self.sigma_proj = nn.Parameter(torch.empty(num_basis))  # w_σ ∈ R^N
        self.reset_parameters()

    def reset_parameters(self):
        for lin in (self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
        nn.init.normal_(self.mu_proj, std=1.0 / math.sqrt(self.num_basis))
        nn.init.normal_(self.sigma_proj, std=1.0 / math.sqrt(self.num_basis))

    # ---- cached constants -------------------------------------------------

    def _constant(self, name: str, length: int, device) -> Tensor:
        key = (name, length, str(device))
        if key not in self._cache:
            if name == "basis":
                value = torch.stack([self._centers64, self._widths64])
            elif name == "g_first":
                value = ridge_regression_matrix(
                    first_fit_positions(length), self._centers64, self._widths64,
                    self.ridge_penalty, self.boundary_padding)
            elif name == "g_update":
                value = ridge_regression_matrix(
                    update_positions(self.num_samples, length, self.tau), self._centers64,
                    self._widths64, self.ridge_penalty, self.boundary_padding)
            else:
                raise KeyError(name)
            self._cache[key] = value.to(device=device, dtype=torch.float32)
        return self._cache[key]

    def basis(self, device) -> Tuple[Tensor, Tensor]:
        """fp32 ``(centers, widths)``, each ``(N,)``, on ``device``."""
        both = self._constant("basis", 0, device)
        return both[0], both[1]

    # ---- update (paper §3.3) ----------------------------------------------

    def smooth(self, x: Tensor) -> Tensor:
        """Gate the chunk: ``(L, bsz, e)`` → ``(bsz, L, e)`` float32."""
        x = x.float().permute(1, 2, 0)  # (bsz, e, L)
        gate = F.conv1d(x, self.gate.weight.float(), self.gate.bias.float(), padding=1)
        return (x * torch.sigmoid(gate)).transpose(1, 2)

    def update(self, state: LongTermMemoryState, chunk: Tensor, chunk_valid: Tensor) -> LongTermMemoryState:
        """Append a chunk of L hidden states to the memory and re-fit B.

        Slots with an empty memory fit the chunk alone on (i + ½)/L; the others
        sample the old signal at M points (uniform k/M, or sticky), contract it
        to (0, τ], append the chunk on (τ, 1] and re-fit. The old B is detached
        (no backpropagation through time); the gate's parameters receive
        gradients through the new B.

        Args:
            state: the layer's state (B of shape ``(bsz, N, e)``).
            chunk: ``(L, bsz, e)`` hidden states entering the memory
                (detached by the caller).
            chunk_valid: ``(bsz,)`` bool; slots where it is False keep their
                memory unchanged.
        Returns:
            a new state (μ, σ carried over for the next read).
        """
        with torch.autocast(device_type=chunk.device.type, enabled=False):
            length, bsz, _ = chunk.shape
            device = chunk.device
            x_new = self.smooth(chunk)  # (bsz, L, e)
            centers, widths = self.basis(device)
            old = state.coefficients.detach().float()  # (bsz, N, e)

            g_first = self._constant("g_first", length, device)  # (L, N)
            b_first = torch.einsum("ln,ble->bne", g_first, x_new)

            if self.sticky and state.mu is not None:
                hist = sticky_histogram(state.mu, state.sigma, self.sticky_bins)
                s = sticky_positions(hist, self.num_samples, random=self.training)  # (bsz, M)
            else:
                k = torch.arange(1, self.num_samples + 1, device=device, dtype=torch.float32)
                s = (k / self.num_samples).expand(bsz, -1)
            psi_s = evaluate_basis(s, centers, widths)  # (bsz, M, N)
            x_old = torch.bmm(psi_s, old)  # (bsz, M, e): x̄(s_k) = Bᵀψ(s_k)
            g_update = self._constant("g_update", length, device)  # (M+L, N)
            # Gᵀ[x_old; x_new] split in two so that backward only touches the new part
            g_old, g_new = g_update[: self.num_samples], g_update[self.num_samples:]
            b_cont = torch.einsum("mn,bme->bne", g_old, x_old) + torch.einsum("ln,ble->bne", g_new, x_new)

            coefficients = torch.where(state.valid[:, None, None], b_cont, b_first)
            coefficients = torch.where(chunk_valid[:, None, None], coefficients, old)
        return LongTermMemoryState(coefficients, state.valid | chunk_valid, state.mu, state.sigma)

    # ---- read (paper §3.2) ------------------------------------------------

    def forward(self, query: Tensor, state: LongTermMemoryState) -> Tuple[Tensor, Tensor, Tensor]:
        """Continuous attention over the memory.

        Args:
            query: ``(T, bsz, e)`` the host attention's projected queries (before
                any positional rotation).
            state: the layer's memory; slots with ``valid`` False read zeros.
        Returns:
            ``(out, mu, sigma2)``: ``out`` of shape ``(T, bsz, e)`` in the
            query's dtype (W_O^LTM z, to add to the attention output);
            ``mu`` and ``sigma2`` of shape ``(bsz, H, T)`` float32.
        """
        tgt_len, bsz, embed_dim = query.shape
        h, d = self.num_heads, self.head_dim
        with torch.autocast(device_type=query.device.type, enabled=False):
            coefficients = state.coefficients.float()  # (bsz, N, e)
            keys = F.linear(coefficients, self.k_proj.weight.float()).view(bsz, -1, h, d).transpose(1, 2)
            values = F.linear(coefficients, self.v_proj.weight.float()).view(bsz, -1, h, d).transpose(1, 2)
            q = query.float().view(tgt_len, bsz, h, d).permute(1, 2, 0, 3)  # (bsz, H, T, d)
            centers, widths = self.basis(query.device)
            z, mu, sigma2 = continuous_attention(q, keys, values, self.mu_proj.float(), self.sigma_proj.float(),
                                                 centers, widths, self.sigma2_min)  # z: (bsz, H, T, d)
            z = z.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
            out = F.linear(z, self.out_proj.weight.float())
            out = out * state.valid.to(out.dtype)[None, :, None]
        return out.to(query.dtype), mu, sigma2

    def extra_repr(self) -> str:
        return (f"N={self.num_basis}, M={self.num_samples}, tau={self.tau}, "
                f"ridge_penalty={self.ridge_penalty}, sticky={self.sticky}")
