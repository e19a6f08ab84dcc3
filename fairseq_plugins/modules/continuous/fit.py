"""The summarizer's memory fit: the ridge fit (paper eq. 7) of every document of a batch on
its own grid of L positions, B = (F Fᵀ + λI)⁻¹ F X, for any L (Martins, Marinho & Martins,
ACL 2022, §3.1; :mod:`fairseq_plugins.modules.continuous.basis` has the basis and the LM's
fit). Everything float64 but X; F is never stored whole (blocks of positions).
"""

from typing import Callable, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.ops.gaussian import evaluate_basis

_FIT_BLOCK = 2048  # positions per block of ψ evaluated at once (float64, N × block)


def _grid_blocks(first: int, stop: int, length: int, device):
    """Positions (i + ½)/L, float64, for i in [first, stop), in blocks of :data:`_FIT_BLOCK`."""
    for start in range(first, stop, _FIT_BLOCK):
        i = torch.arange(start, min(start + _FIT_BLOCK, stop), dtype=torch.float64, device=device)
        yield start, (i + 0.5) / length


def gram_factor(length: int, centers: Tensor, widths: Tensor, ridge_penalty: float,
                boundary_padding: bool = True) -> Tensor:
    """float64 Cholesky factor ``(N, N)`` of F Fᵀ + λI for the first-fit grid of L positions
    (i + ½)/L, with the ⌊L/2⌋ zero-padding positions on each side of
    :func:`~fairseq_plugins.modules.continuous.basis.ridge_regression_matrix` when
    ``boundary_padding`` (the padded grid continues (i + ½)/L to i = −⌊L/2⌋ … L − 1 + ⌊L/2⌋).
    O(N²·L), accumulated block by block."""
    pad = length // 2 if boundary_padding and length >= 2 else 0
    gram = ridge_penalty * torch.eye(centers.numel(), dtype=torch.float64, device=centers.device)
    for _, t in _grid_blocks(-pad, length + pad, length, centers.device):
        psi = evaluate_basis(t, centers, widths)  # (block, N)
        gram = torch.addmm(gram, psi.t(), psi)
    return torch.linalg.cholesky(gram)


class _ProjectOntoBasis(torch.autograd.Function):
    """F X in float64 for x ``(rows, L, e)`` on the first-fit grid of L positions, without
    storing F: ψ is evaluated block by block, forward and again in backward (dX = Fᵀ dY)."""

    @staticmethod
    def forward(ctx, x: Tensor, centers: Tensor, widths: Tensor) -> Tensor:
        ctx.save_for_backward(centers, widths)
        ctx.length, ctx.dtype = x.size(1), x.dtype
        out = x.new_zeros(x.size(0), centers.numel(), x.size(2), dtype=torch.float64)
        for start, t in _grid_blocks(0, ctx.length, ctx.length, centers.device):
            psi = evaluate_basis(t, centers, widths)  # (block, N)
            out = out + torch.matmul(psi.t(), x[:, start:start + t.numel()].double())
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        centers, widths = ctx.saved_tensors
        grad = grad.double()
        parts = [torch.matmul(evaluate_basis(t, centers, widths), grad).to(ctx.dtype)
                 for _, t in _grid_blocks(0, ctx.length, ctx.length, centers.device)]
        return torch.cat(parts, dim=1), None, None


def fit_sequences(
    x: Tensor,
    lengths: Tensor,
    centers: Tensor,
    widths: Tensor,
    ridge_penalty: float,
    boundary_padding: bool = True,
    factor: Optional[Callable[[int, Tensor, Tensor], Tensor]] = None,
) -> Tensor:
    """Ridge fit (paper eq. 7) of every sequence of a right-padded batch on its own grid.

    The first L_b vectors of example b are placed at t_i = (i + ½)/L_b
    (:func:`first_fit_positions`) and fitted: B_b = G_{L_b}ᵀ x[b, :L_b] with
    G from :func:`ridge_regression_matrix` (the LM's fit, boundary padding
    included). B_b has the fixed shape ``(N, e)`` whatever L_b, and positions
    ≥ L_b never enter the fit, so a padded example's B equals the unpadded one's.

    Solved through the normal equations in float64, B = (F Fᵀ + λI)⁻¹ (F X), on
    ``x``'s device (on the CPU for devices without float64): F X costs O(N·L·e)
    per example and never stores F (:class:`_ProjectOntoBasis`); the Cholesky
    factor of F Fᵀ + λI (:func:`gram_factor`, O(N²·L)) depends only on the length
    and is computed once per distinct length in the batch, or taken from
    ``factor(length, centers, widths)`` (the :class:`ContinuousBasis` keeps a
    bounded cache of them). Autocast off; gradients flow to ``x``.

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
    if factor is None:
        def factor(length, c, w):
            return gram_factor(length, c, w, ridge_penalty, boundary_padding)
    with torch.autocast(device_type=x.device.type, enabled=False):
        x32 = x.float()
        out = x32.new_zeros(bsz, c.numel(), x.size(-1))
        for length in sorted(set(lens)):
            rows = torch.tensor([b for b, n in enumerate(lens) if n == length], device=x.device)
            part = x32.index_select(0, rows)[:, :length].to(work)
            fit = torch.cholesky_solve(_ProjectOntoBasis.apply(part, c, w), factor(length, c, w))
            out = out.index_copy(0, rows, fit.to(device=x.device, dtype=torch.float32))
    return out
