"""Which targets of a batch count in the loss when only the part of each line after a
marker symbol is scored (``--loss-after-symbol`` of ``infinite_former_kl``).

Used for the ∞-former paper's sorting task (§4.1; docs/results/sorting.md, "Sorting task"): the
answer follows the separator ``sep``, and the thousands of sequence tokens before it are
input only. A target counts when the marker occurs at or before its input position in the
same row with no end-of-sentence token in between, and the target is neither the
end-of-sentence token nor padding: in ``s07 s13 sep s07 s13 </s>`` only the two answer
symbols count.
"""

import torch


def after_symbol_mask(src_tokens: torch.Tensor, target: torch.Tensor, symbol: int, eos: int,
                      pad: int) -> torch.Tensor:
    """Bool mask of the targets after ``symbol`` in their line.

    Args:
        src_tokens: (batch, length) input ids; ``src_tokens[:, j]`` predicts ``target[:, j]``.
        target: (batch, length) target ids.
        symbol, eos, pad: dictionary indices of the marker, end-of-sentence and padding.

    Returns:
        (batch, length) bool, True where ``target`` is scored.

    Rows are read on their own: an answer cut by a row boundary (a segment or block that
    starts after the marker) counts only where the marker lies in the same row.
    """
    if src_tokens.shape != target.shape:
        raise ValueError(f"src_tokens {tuple(src_tokens.shape)} and target {tuple(target.shape)} differ")
    position = torch.arange(src_tokens.size(-1), device=src_tokens.device).expand_as(src_tokens)
    none = torch.full_like(position, -1)
    last_symbol = torch.where(src_tokens == symbol, position, none).cummax(dim=-1).values
    last_eos = torch.where(src_tokens == eos, position, none).cummax(dim=-1).values
    return (last_symbol > last_eos) & target.ne(eos) & target.ne(pad)
