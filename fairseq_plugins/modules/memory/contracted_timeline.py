"""The ∞-former memory's holdings through its updates: which stream tokens it holds and where on
its [0, 1] timeline (paper §3.3; docs/design/infinite-former.md §3-§4). What
:class:`~fairseq_plugins.modules.memory.continuous.LongTermMemory` reports, with
``report_holdings`` on, as :class:`~fairseq_plugins.modules.memory.contract.MemoryHoldings`.

The first chunk of L vectors entering an empty memory sits at ``first_fit_positions(L)``;
every later update samples the old signal at M points s_1..s_M (k/M, or the sticky positions
drawn from the previous read's histogram), places those samples at the first M entries of
``update_positions(M, L, τ)`` (τ·k/M, inside (0, τ]) and the chunk at the last L (on (τ, 1]).
So a token that sat at p before the update sits where the sample taken at p was placed:
``p ↦ interp(p, [0, s_1..s_M], [0, τ/M..τ])`` (piecewise linear between the samples; with
uniform samples, ``p ↦ τ·p``). The update hands over the samples it drew, so the timeline is
the one it applied.
"""

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from fairseq_plugins.modules.continuous.basis import first_fit_positions, update_positions
from fairseq_plugins.modules.memory.contract import MemoryHoldings


def uniform_samples(num_samples: int) -> Tensor:
    """``(M,)`` float64: the uniform sample positions k/M, k = 1..M."""
    return torch.arange(1, num_samples + 1, dtype=torch.float64) / num_samples


def contract(positions: Tensor, samples: Tensor, placed: Tensor) -> Tensor:
    """``positions`` ``(n,)`` float64 moved by an update that sampled the old signal at
    ``samples`` ``(M,)`` and placed the samples at ``placed`` ``(M,)``: ``(n,)`` float64."""
    xp = np.concatenate([[0.0], samples.double().cpu().numpy()])
    fp = np.concatenate([[0.0], placed.double().cpu().numpy()])
    return torch.from_numpy(np.interp(positions.double().cpu().numpy(), xp, fp))


def enter_chunk(holdings: MemoryHoldings, length: int, tau: float, num_samples: int, was_valid: Tensor,
                chunk_valid: Tensor, samples: Optional[Tensor]) -> MemoryHoldings:
    """The holdings after a chunk of ``length`` vectors entered (the module docstring).

    Args:
        holdings: what the memory held before the update.
        length: L, the chunk's vectors.
        tau, num_samples: the memory's τ and M.
        was_valid: ``(bsz,)`` bool, slots whose memory held something (the others fit the chunk alone).
        chunk_valid: ``(bsz,)`` bool, slots the chunk entered (the others keep their holdings).
        samples: ``(bsz, M)`` where the update sampled each slot's old signal; ``None``: uniform k/M.
    Returns:
        :class:`MemoryHoldings` on ``holdings``' device; each slot's new tokens follow the ones it held.
    """
    placed = update_positions(num_samples, length, tau)
    rows = []
    for b in range(holdings.tokens.size(0)):
        tokens, positions = holdings.slot(b)
        if bool(chunk_valid[b]):
            count = int(tokens.numel())
            new = torch.arange(count, count + length, dtype=torch.long)
            if bool(was_valid[b]) and count > 0:
                uniform = samples is None
                moved = contract(positions, uniform_samples(num_samples) if uniform else samples[b],
                                 placed[:num_samples])
                tokens, positions = torch.cat([tokens, new]), torch.cat([moved, placed[num_samples:]])
            else:
                tokens, positions = new, first_fit_positions(length)
        rows.append((tokens, positions))
    width = max(t.numel() for t, _ in rows)
    out_tokens = torch.full((len(rows), width), -1, dtype=torch.long)
    out_positions = torch.full((len(rows), width), float("nan"), dtype=torch.float64)
    for b, (tokens, positions) in enumerate(rows):
        out_tokens[b, :tokens.numel()] = tokens
        out_positions[b, :positions.numel()] = positions
    device = holdings.tokens.device
    return MemoryHoldings(out_tokens.to(device), out_positions.to(device))
