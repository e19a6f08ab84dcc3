"""Which document tokens a layer's long-term memory holds, and where on its [0, 1] timeline.

The memory says so itself: with ``report_holdings`` on, every step of a
:class:`~fairseq_plugins.modules.memory.contract.Memory` returns the
:class:`~fairseq_plugins.modules.memory.contract.MemoryHoldings` of the memory its read saw
(the decoder's ``extra["memory_holdings"]``; docs/design/architecture.md, "What a memory
holds"). The ∞-former's memory (paper §3.3; docs/design/infinite-former.md §3-§4) reports its
contracted timeline: the first chunk of L vectors at ``(i + ½)/L``, and at every update the
old tokens moved as the update moved the samples they fall between, the chunk on (τ, 1]
(:mod:`~fairseq_plugins.modules.memory.contracted_timeline`). A :class:`Timeline` is one slot
of that report; :func:`token_mass` weighs a read's Gaussians on its tokens.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fairseq_plugins.modules.memory.contract import MemoryHoldings


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

    @classmethod
    def of(cls, holdings: MemoryHoldings, slot: int = 0) -> "Timeline":
        """The timeline of stream slot ``slot`` of a memory's report."""
        tokens, positions = holdings.slot(slot)
        return cls(tokens, positions)

    def __len__(self) -> int:
        return int(self.tokens.numel())


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
