"""The attention contract of the plugin's blocks, and fairseq's ``MultiheadAttention`` behind it.

Every attention variant a :class:`~fairseq_plugins.modules.block.PreNormBlock`
can hold as its self-attention has ``empty_state(bsz, device)`` (its state before
the first segment, ``None`` for a stateless one), and every variant is called the same way (docs/design/architecture.md, "Contracts")::

    attention(x, *, padding_mask=None, attn_mask=None, incremental_state=None,
              state=None, encoder_out=None, slot="", need_weights=False) -> AttentionOutput

with ``x`` of shape ``(T, bsz, C)`` (time first, as in fairseq). Each variant uses
the keywords it needs and ignores the others:

* ``padding_mask`` ``(bsz, T)`` bool, True at padding; ``attn_mask`` a ``(T, T)``
  float mask (fairseq's convention) where a variant accepts one;
* ``incremental_state``: fairseq's generation state (each module keeps its own part);
* ``state``: the attention's own state from the previous segment (e.g. the short-term
  memory) or ``None``; ``slot``: a name for this layer's part of shared state (a module
  shared by several layers keeps one per slot);
* ``encoder_out``: the encoder's output dict, for cross-attention.

Variants: :class:`SelfAttention` and :class:`EncoderDecoderAttention` (fairseq's
``MultiheadAttention``), :mod:`~fairseq_plugins.modules.rotary_attention` (the ∞-former's
attention over short-term memory + segment, the summarizer encoder's chunk window),
:mod:`~fairseq_plugins.modules.additive_attention` (Fastformer) and
:mod:`~fairseq_plugins.modules.continuous_cross_attention` (Gaussian read of a memory).
"""

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from fairseq_plugins.config import check_heads
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous_attention import ReadStats


class AttentionOutput(NamedTuple):
    """What every attention returns.

    Attributes:
        out: ``(T, bsz, C)``.
        query: ``(T, bsz, C)`` the projected query before any rotation (what a
            long-term memory reads with); ``None`` when the variant has none to offer.
        state: the state to pass back at the next segment, or ``None``.
        stats: :class:`ReadStats` of a continuous read (for the KL), or ``None``.
        weights: attention weights ``(bsz, T, S)`` when asked for, else ``None``.
    """

    out: Tensor
    query: Optional[Tensor] = None
    state: Optional[object] = None
    stats: Optional[ReadStats] = None
    weights: Optional[Tensor] = None


class ProjectedAttention(nn.Module):
    """Scaled dot-product attention with its own projections (W_q, W_k, W_v, W_o, with
    biases): the base of the plugin's softmax self-attentions (rotary ones, GPT-2's).

    Args:
        embed_dim, num_heads: width C and heads h (h must divide C).
        attention_dropout: dropout on the attention weights (training only).
    """

    def __init__(self, embed_dim: int, num_heads: int, attention_dropout: float = 0.0):
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.attention_dropout = attention_dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def empty_state(self, bsz: int, device):
        """What the attention carries between segments before any (``None``: nothing)."""
        return None

    def heads(self, x: Tensor) -> Tensor:
        """``(T, B, C)`` → ``(T, B, H, d)``."""
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor] = None,
               is_causal: bool = False) -> Tensor:
        """``q`` ``(T, B, H, d)``, ``k``/``v`` ``(S, B, H, d)``, ``allowed`` broadcastable to
        ``(B, H, T, S)`` bool (or ``is_causal``) → the projected output ``(T, B, C)``."""
        attn = F.scaled_dot_product_attention(
            q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3), attn_mask=allowed,
            is_causal=is_causal, dropout_p=self.attention_dropout if self.training else 0.0)  # (B, H, T, d)
        return self.out_proj(attn.permute(2, 0, 1, 3).reshape(q.size(0), q.size(1), self.embed_dim))


class SelfAttention(MultiheadAttention):
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
