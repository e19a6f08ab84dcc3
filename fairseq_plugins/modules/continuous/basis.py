"""Write side of the ∞-former's continuous memory: the basis, the ridge fit and
what prepares a signal for it (Martins, Marinho & Martins, ACL 2022, §3.1 and
§3.3; docs/design/infinite-former.md §1, §3, §4).

* ψ(t) ∈ R^N: N normalised Gaussian radial basis functions on [0, 1]
  (:func:`rbf_basis`, :func:`evaluate_basis`);
* B ∈ R^{N×e}: the ridge-regression fit (penalty λ) of vectors placed at
  positions in [0, 1], B = Gᵀ X (:func:`ridge_regression_matrix`, eq. 7);
* :class:`ContinuousBasis` owns one basis: float64 masters, fp32 copies and ridge
  matrices cached per device (never buffers, so ``model.half()`` cannot round
  them); one object serves every layer of a model, and the summarizer's encoder
  fit and decoder reads alike;
* :class:`SmoothingGate`: X̃ = X ⊙ sigmoid(Conv1d(X)) before a fit;
* the positions of the first fit and of an update (contract to (0, τ], append on
  (τ, 1]), and the sticky-memory sampling positions (§3.3).

The read side (E[ψ], continuous attention, KL) is
:mod:`fairseq_plugins.modules.continuous.read`. Shapes use ``bsz`` for the
batch size; the paper's B is called ``coefficients`` in code.
"""

import math
from collections import OrderedDict
from typing import Callable, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.config import ContinuousMemoryConfig, parse_widths
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.fit import fit_sequences, gram_factor
from fairseq_plugins.modules.ops.gaussian import evaluate_basis, gaussian_density

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


class ContinuousBasis:
    """One basis of N Gaussian RBFs with its ridge penalty (§3.1, eq. 7).

    Holds the float64 centres and widths on the CPU and caches, per device, their
    fp32 copies and the fp32 casts of the float64 ridge matrices it is asked for.
    A plain object, not a module: ``model.half()`` and ``model.to()`` never touch
    it, and it adds nothing to the state_dict.

    Args:
        num_basis: N (a positive multiple of ``len(widths)``).
        widths: the Gaussian widths, each combined with every centre.
        ridge_penalty: λ > 0.
        boundary_padding: fit with zero padding beyond both ends
            (:func:`ridge_regression_matrix`).
    Raises:
        ConfigError: invalid N, widths or λ.
    """

    MAX_CACHED = 256  # constants kept per basis (least recently used dropped first)
    MAX_FACTORS = 32  # document lengths whose Gram factor (N × N float64) the summarizer's fit keeps

    @classmethod
    def from_config(cls, cfg: ContinuousMemoryConfig) -> "ContinuousBasis":
        """The basis of ``cfg``'s options (N, widths, λ, boundary padding).

        Raises:
            ConfigError: bad widths or a non-positive λ (one line each).
        """
        return cls(cfg.num_basis_functions, parse_widths(cfg.basis_widths), cfg.ridge_penalty,
                   not cfg.no_boundary_padding)

    def __init__(self, num_basis: int, widths: Sequence[float], ridge_penalty: float = 0.5,
                 boundary_padding: bool = True):
        if ridge_penalty <= 0:
            raise ConfigError(f"--ridge-penalty (λ) must be positive, got {ridge_penalty}")
        self.centers64, self.widths64 = rbf_basis(num_basis, widths)
        self.num_basis, self.num_centers = num_basis, num_basis // len(widths)
        self.ridge_penalty, self.boundary_padding = ridge_penalty, boundary_padding
        self._cache: "OrderedDict[Tuple, Tensor]" = OrderedDict()
        self._factors: "OrderedDict[Tuple, Tensor]" = OrderedDict()

    def constant(self, key: Tuple, build: Callable[[], Tensor], device, dtype=torch.float32) -> Tensor:
        """``build()`` (a float64 tensor, computed once) cast to ``dtype`` on ``device``, cached
        under ``key`` per device; at most :attr:`MAX_CACHED` entries (least recently used go)."""
        full = tuple(key) + (str(device), dtype)
        value = self._cache.get(full)
        if value is None:
            value = self._cache[full] = build().to(device=device, dtype=dtype)
            while len(self._cache) > self.MAX_CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(full)
        return value

    def basis(self, device) -> Tuple[Tensor, Tensor]:
        """fp32 ``(centers, widths)``, each ``(N,)``, on ``device``."""
        both = self.constant(("basis",), lambda: torch.stack([self.centers64, self.widths64]), device)
        return both[0], both[1]

    def product_basis(self, device, dtype=torch.float32) -> Tuple[Tensor, Tensor]:
        """``(centers (N,), width values (n_w,))`` on ``device`` (fp32 by default): the basis as
        the product it is (:func:`rbf_basis`: function j has centre ``centers[j]`` and width
        ``width_values[j // (N // n_w)]``), which lets the read form σ² + w² once per width."""
        def build():
            return torch.cat([self.centers64, self.widths64[::self.num_centers]])
        both = self.constant(("product-basis",), build, device, dtype)
        return both[:self.num_basis], both[self.num_basis:]

    def overlap(self, device) -> Tensor:
        """fp32 Φ ``(N, N)`` with Φ_ji = ∫ N(t; c_j, w_j²) ψ_i(t) dt = N(c_j; c_i, w_j² + w_i²): what
        reading under basis function j's own Gaussian gives of basis function i (the mixture read,
        :mod:`fairseq_plugins.modules.continuous.read`)."""
        def build():
            c, w = self.centers64, self.widths64
            return gaussian_density(c[:, None], c[None, :], w[:, None] ** 2 + w[None, :] ** 2)
        return self.constant(("overlap",), build, device)

    def _ridge(self, positions: Tensor) -> Tensor:
        return ridge_regression_matrix(positions, self.centers64, self.widths64, self.ridge_penalty,
                                       self.boundary_padding)

    def ridge_matrix(self, key: Tuple, positions: Tensor, device) -> Tensor:
        """fp32 G ``(n, N)`` for float64 ``positions`` ``(n,)``, cached under ``key``
        (which must determine the positions) per device."""
        return self.constant(("ridge",) + tuple(key), lambda: self._ridge(positions), device)

    def update_matrices(self, num_samples: int, length: int, tau: float, device) -> Tuple[Tensor, Tensor]:
        """The constant matrices of an LM memory update (§3.3), fp32 on ``device``.

        Returns ``(g_old (M, N), new_rows (2, L, N))``: the rows of the update's G for the M
        contracted samples, and for the L new vectors stacked under the first fit's G
        (``new_rows[0]``: the chunk alone on (i + ½)/L; ``new_rows[1]``: on (τ, 1]).
        """
        def build():
            g_update = self._ridge(update_positions(num_samples, length, tau))  # (M+L, N)
            return g_update[:num_samples], torch.stack([self._ridge(first_fit_positions(length)),
                                                        g_update[num_samples:]])
        g_old = self.constant(("update-old", num_samples, length, tau), lambda: build()[0], device)
        rows = self.constant(("update-new", num_samples, length, tau), lambda: build()[1], device)
        return g_old, rows

    def uniform_contraction(self, num_samples: int, length: int, tau: float, device) -> Tensor:
        """fp32 ``(N, N)`` A = G_oldᵀ ψ(k/M), computed in float64: the old memory's part of an
        update that samples the old signal at k/M (k = 1..M) is A B (§3.3)."""
        def build():
            k = torch.arange(1, num_samples + 1, dtype=torch.float64) / num_samples
            g_old = self._ridge(update_positions(num_samples, length, tau))[:num_samples]  # (M, N)
            return g_old.t() @ evaluate_basis(k, self.centers64, self.widths64)
        return self.constant(("uniform-contraction", num_samples, length, tau), build, device)

    def fit(self, x: Tensor, lengths: Tensor) -> Tensor:
        """:func:`~fairseq_plugins.modules.continuous.fit.fit_sequences` with this basis (and its cache of
        Gram factors): ``(bsz, S, e)`` → ``(bsz, N, e)`` float32."""
        return fit_sequences(x, lengths, self.centers64, self.widths64, self.ridge_penalty, self.boundary_padding,
                             factor=self._gram_factor)

    def _gram_factor(self, length: int, centers: Tensor, widths: Tensor) -> Tensor:
        """:func:`gram_factor` of ``length``, cached (float64, at most :attr:`MAX_FACTORS` lengths)."""
        key = (length, str(centers.device))
        value = self._factors.get(key)
        if value is None:
            value = self._factors[key] = gram_factor(length, centers, widths, self.ridge_penalty,
                                                     self.boundary_padding)
            while len(self._factors) > self.MAX_FACTORS:
                self._factors.popitem(last=False)
        else:
            self._factors.move_to_end(key)
        return value


class SmoothingGate(nn.Conv1d):
    """The smoothing gate X̃ = X ⊙ sigmoid(Conv1d(X)), kernel 3, e → e channels (§3.3).

    A ``Conv1d`` itself, so its parameters are ``weight`` and ``bias``.
    """

    def __init__(self, embed_dim: int):
        super().__init__(embed_dim, embed_dim, kernel_size=3, stride=1, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        """``(bsz, L, e)`` (any float dtype) → gated ``(bsz, L, e)`` float32, autocast off.

        The convolution is one matrix product: [x_{t−1}; x_t; x_{t+1}] (zero beyond the ends)
        times the kernel flattened to ``(e, 3e)``, which is faster than ``conv1d`` forward and
        backward on a CPU, and exact up to the order of the sums.
        """
        with torch.autocast(device_type=x.device.type, enabled=False):
            x = x.float()
            padded = F.pad(x, (0, 0, 1, 1))  # (bsz, L+2, e)
            windows = torch.cat([padded[:, :-2], padded[:, 1:-1], padded[:, 2:]], dim=2)  # (bsz, L, 3e)
            kernel = self.weight.float().permute(0, 2, 1).reshape(self.out_channels, -1)  # (e, 3e)
            return x * torch.sigmoid(F.linear(windows, kernel, self.bias.float()))


def sticky_histogram(mu: Tensor, sigma: Tensor, num_bins: int) -> Tensor:
    """Attention mass of the previous segment in D equal bins of [0, 1].

    p(bin j) ∝ Σ_{heads, queries} Φ((b_{j+1} − μ)/σ) − Φ((b_j − μ)/σ).

    Args:
        mu, sigma: ``(bsz, H, T)`` means and standard deviations.
    Returns:
        ``(bsz, D)`` float32, each row summing to 1 (uniform if no mass falls
        inside [0, 1]).
    """
    bsz = mu.size(0)
    edges = torch.linspace(0.0, 1.0, num_bins + 1, device=mu.device, dtype=torch.float32)
    # Φ(z) = ½(1 + erf(z/√2)), so Φ(z_{j+1}) − Φ(z_j) = ½(erf(y_{j+1}) − erf(y_j)) with
    # y = (b − μ)/(σ√2): one fused multiply-add and one in-place erf over (bsz, D+1, H·T) (the
    # Gaussians last: contiguous, so both vectorise), then the sum over heads and queries before
    # the difference over edges (which moves each bin's mass by < 1e-6 of the total: float32
    # sums of at most H·T terms in [−1, 1]). The small steps work in place: at small segments a
    # call costs more than its arithmetic (docs/benchmark.md, "At the sorting size")
    scale = (sigma.float() * math.sqrt(2.0)).reciprocal_().reshape(bsz, 1, -1)  # (bsz, 1, H·T)
    offset = (-mu.float()).reshape(bsz, 1, -1) * scale
    y = torch.erf_(torch.addcmul(offset, edges.view(1, -1, 1), scale))  # (bsz, D+1, H·T)
    mass = y.sum(dim=-1).diff(dim=-1).clamp_min_(0.0).mul_(0.5)  # (bsz, D)
    total = mass.sum(-1, keepdim=True)
    return torch.where(total > 0, mass.div_(total.clamp_min(1e-30)), 1.0 / num_bins)


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
    lower = F.pad(cdf, (1, 0)).gather(1, bins)  # the CDF at bin j's left edge (0 for j = 0)
    width = histogram.gather(1, bins).clamp_min_(1e-30)
    frac = (u - lower).div_(width).clamp_(0.0, 1.0)
    return frac.add_(bins).div_(num_bins)

