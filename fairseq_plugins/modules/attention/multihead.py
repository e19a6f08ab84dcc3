"""fairseq's ``MultiheadAttention`` behind the plugin's attention contract
(:mod:`fairseq_plugins.modules.attention.contract`; docs/design/architecture.md, "Contracts")."""

from typing import Optional

import torch
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention.contract import AttentionDeclarations, AttentionOutput


class SelfAttention(AttentionDeclarations, MultiheadAttention):
    """fairseq's causal multi-head self-attention behind the contract.

    Without ``incremental_state`` a causal mask over the T positions is applied
    (unless ``attn_mask`` is given); with it, fairseq's key/value cache makes each
    step attend to every earlier one.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True)

    def forward(self, x: Tensor, *, padding_mask: Optional[Tensor] = None, attn_mask: Optional[Tensor] = None,
                incremental_state=None, need_weights: bool = False, **unused) -> AttentionOutput:
        if incremental_state is None and attn_mask is None:
            attn_mask = torch.triu(utils.fill_with_neg_inf(x.new_zeros(x.size(0), x.size(0))), 1)
        out, weights = super().forward(query=x, key=x, value=x, key_padding_mask=padding_mask,
                                       incremental_state=incremental_state, need_weights=need_weights,
                                       attn_mask=attn_mask)
        return AttentionOutput(out, weights=weights)

    def empty_state(self, bsz: int, device) -> None:
        """fairseq's attention carries its cache in ``incremental_state`` only (``None``)."""
        return None


class EncoderDecoderAttention(MultiheadAttention):
    """fairseq's multi-head attention over encoder states behind the contract.

    Args:
        embed_dim, num_heads: the query side; encoder_dim: the encoder width.
        key: the ``encoder_out`` entry holding the ``(S, bsz, e)`` states
            (``"encoder_out"``); its padding mask is ``encoder_padding_mask``.
    Keys and values are cached in ``incremental_state`` (``static_kv``).
    """

    def __init__(self, embed_dim: int, num_heads: int, encoder_dim: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, kdim=encoder_dim, vdim=encoder_dim, dropout=dropout,
                         encoder_decoder_attention=True)

    def forward(self, x: Tensor, *, encoder_out=None, incremental_state=None, need_weights: bool = False,
                **unused) -> AttentionOutput:
        """Raises ConfigError without an encoder output."""
        if encoder_out is None or not encoder_out.get("encoder_out"):
            raise ConfigError("the decoder's cross-attention needs the encoder output (encoder_out)")
        enc = encoder_out["encoder_out"][0]
        mask = encoder_out["encoder_padding_mask"][0] if encoder_out.get("encoder_padding_mask") else None
        out, weights = super().forward(query=x, key=enc, value=enc, key_padding_mask=mask,
                                       incremental_state=incremental_state, static_kv=True,
                                       need_weights=need_weights)
        return AttentionOutput(out, weights=weights)
