"""Which document tokens a layer's long-term memory holds, and where on its [0, 1] timeline.

The memory (:class:`~fairseq_plugins.modules.memory.continuous.LongTermMemory`, paper §3.3;
docs/design/infinite-former.md §3-§4) places the first chunk of L vectors at the positions
``first_fit_positions(L)``; every later update samples the old signal at M points (k/M, or the
sticky positions drawn from the previous read's attention histogram), places those samples at
the first M entries of ``update_positions(M, L, τ)`` (τ·k/M, inside (0, τ]) and the chunk at
the last L entries (on (τ, 1]). So a token that sat at position p before the update sits where
the sample taken at p was placed: ``p ↦ interp(p, [0, s_1..s_M], [0, τ/M..τ])`` (piecewise
linear between the samples; with uniform samples this is ``p ↦ τ·p``). Everything here uses the
memory's own functions and settings (M, τ, sticky, D) and, for sticky memories, the Gaussians
of the read the update followed (``ReadStats`` in ``extra["ltm_stats"]``), so the mapping is
the one the module applied, not a re-derivation.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from fairseq_plugins.modules.continuous.read import ReadStats
from fairseq_plugins.modules.continuous.basis import (first_fit_positions, sticky_histogram, sticky_positions,
                                                       update_positions)
from fairseq_plugins.modules.memory.continuous import LongTermMemory


@dataclass(frozen=True)
class Timeline:
    """The tokens one memory slot holds and their places on [0, 1].

    Attributes:
        tokens: ``(n,)`` int64 document indices of the vectors that entered, oldest first.
        positions: ``(n,)`` float64 in [0, 1], non-decreasing along ``tokens``.
    """

    tokens: Tensor
    positions: Tensor

    @classmethod
    def empty(cls) -> "Timeline":
        return cls(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64))

    def __len__(self) -> int:
        return int(self.tokens.numel())


def sample_positions(memory: LongTermMemory, previous: Optional[ReadStats], slot: int = 0) -> Tensor:
    """``(M,)`` float64: where an update of ``memory`` samples the old signal in evaluation.

    Uniform k/M (k = 1..M) unless the memory is sticky and a read preceded the update; then the
    deterministic sticky positions of that read's histogram (``random=False``, as in ``eval()``).
    """
    m = memory.num_samples
    if memory.sticky and previous is not None:
        hist = sticky_histogram(previous.mu[slot:slot + 1].float(), previous.sigma2[slot:slot + 1].float().sqrt(),
                                memory.sticky_bins)
        return sticky_positions(hist, m, random=False)[0].double()
    return torch.arange(1, m + 1, dtype=torch.float64) / m


def enter(timeline: Timeline, chunk_tokens: Tensor, memory: LongTermMemory, previous: Optional[ReadStats],
          slot: int = 0) -> Timeline:
    """The timeline after ``chunk_tokens`` ``(L,)`` entered ``memory`` (module docstring).

    Args:
        timeline: what the memory held before; empty: the chunk is the first fit.
        memory: the layer's memory (its M, τ, sticky settings).
        previous: the Gaussians of the read before this update (sticky sampling), or ``None``.
        slot: the batch slot of ``previous`` to use.
    """
    length = int(chunk_tokens.numel())
    if length == 0:
        return timeline
    if len(timeline) == 0:
        return Timeline(chunk_tokens.long().clone(), first_fit_positions(length))
    placed = update_positions(memory.num_samples, length, memory.tau)
    m = memory.num_samples
    samples = sample_positions(memory, previous, slot).numpy()
    xp = np.concatenate([[0.0], samples])
    fp = np.concatenate([[0.0], placed[:m].numpy()])
    moved = torch.from_numpy(np.interp(timeline.positions.numpy(), xp, fp))
    return Timeline(torch.cat([timeline.tokens, chunk_tokens.long()]), torch.cat([moved, placed[m:]]))


def cell_edges(positions: Tensor) -> Tensor:
    """``(n + 1,)`` edges of the cells of [0, 1] that belong to each held token: midpoints
    between neighbouring positions, 0 and 1 at the ends."""
    mid = (positions[1:] + positions[:-1]) / 2.0
    return torch.cat([positions.new_zeros(1), mid, positions.new_ones(1)])


def token_mass(mu: Tensor, sigma2: Tensor, timeline: Timeline) -> Tensor:
    """The Gaussian attention's mass on each held token's cell of [0, 1].

    Args:
        mu, sigma2: ``(...)`` the reads' means and variances.
        timeline: the tokens the read memory holds.
    Returns:
        ``(..., n)`` float64, Φ((b_{k+1} − μ)/σ) − Φ((b_k − μ)/σ); each row sums to the mass
        the Gaussian puts inside [0, 1] (≤ 1).
    """
    edges = cell_edges(timeline.positions)
    z = (edges - mu.double().unsqueeze(-1)) / sigma2.double().sqrt().unsqueeze(-1)
    cdf = 0.5 * (1.0 + torch.erf(z / 2.0 ** 0.5))
    return cdf[..., 1:] - cdf[..., :-1]
