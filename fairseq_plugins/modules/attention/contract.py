"""The attention contract of the plugin's blocks.

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

A self-attention also declares, as class attributes (:class:`AttentionDeclarations`),
what it carries: ``state_type`` (its state between segments), ``cache_type`` (its
incremental-decoding cache inside a segment, ``None`` when it cannot decode
incrementally), ``memory_inputs`` (what a long-term memory beside it may take after
each segment) and ``hosts_memory_keys_values`` (whether it takes a memory's extra keys and
values into its softmax: the keyword ``memory_kv``), so that the block needs to know no
concrete attention.

Variants: :class:`~fairseq_plugins.modules.attention.multihead.SelfAttention` and
:class:`~fairseq_plugins.modules.attention.multihead.EncoderDecoderAttention` (fairseq's
``MultiheadAttention``), :mod:`~fairseq_plugins.modules.attention.rotary` (the ∞-former's
attention over short-term memory + segment, the summarizer encoder's chunk window),
:mod:`~fairseq_plugins.modules.attention.additive` (Fastformer) and
:mod:`~fairseq_plugins.modules.attention.continuous_cross` (Gaussian read of a memory).
"""

from typing import NamedTuple, Optional, Tuple

import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.config import check_heads
from fairseq_plugins.modules.continuous.read import ReadStats


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


class AttentionDeclarations:
    """What a self-attention class declares about itself (class attributes; the defaults
    are those of an attention that carries nothing between segments).

    Attributes:
        state_type: the :class:`~fairseq_plugins.modules.state.TensorState` class of
            ``empty_state`` and ``AttentionOutput.state`` (``None``: it carries nothing or
            nothing that is saved).
        cache_type: the ``TensorState`` class of ``start_segment``/``step``/``end_segment``
            (incremental decoding, docs/generation.md); ``None``: no incremental decoding.
        memory_inputs: the values of a block's ``memory_input`` it supports: ``"segment"``
            (the segment's attention inputs), ``"residual"`` (the segment's residual-stream
            inputs), ``"evicted"`` (what leaves its short-term memory, through its
            ``evicted(x, state)``).
        hosts_memory_keys_values: it hosts a ``"keys_values"`` memory
            (:mod:`fairseq_plugins.modules.memory.contract`): its forward takes ``memory_kv``
            (a ``MemoryKeysValues``, attended ahead of its window in the same softmax), so
            does its ``start_segment`` when it decodes incrementally, and it has
            ``content_read`` (:meth:`ProjectedAttention.content_read`).
    """

    state_type: Optional[type] = None
    cache_type: Optional[type] = None
    memory_inputs: Tuple[str, ...] = ("segment", "residual")
    hosts_memory_keys_values: bool = False


class ProjectedAttention(AttentionDeclarations, nn.Module):
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

    def content_read(self, query: Tensor, states: Tensor) -> Tensor:
        """Content-based attention of ``query`` over ``states`` with this layer's W_K, W_V held
        fixed (no gradient into them), no positions, no output projection: the attn(h, m) of the
        Compressive Transformer's attention-reconstruction loss (Rae et al. 2020, §3.2, Alg. 2).

        Args:
            query: ``(T, bsz, C)`` projected queries (the caller detaches them).
            states: ``(n, bsz, C)`` vectors in the space of the attention's inputs.
        Returns:
            ``(T, bsz, C)``: per head softmax(q kᵀ / √d) v, heads concatenated.
        """
        k = F.linear(states, self.k_proj.weight.detach(), self.k_proj.bias.detach())
        v = F.linear(states, self.v_proj.weight.detach(), self.v_proj.bias.detach())
        q, k, v = (self.heads(t).permute(1, 2, 0, 3) for t in (query, k, v))  # (bsz, H, ·, d)
        read = F.scaled_dot_product_attention(q, k, v)  # (bsz, H, T, d)
        return read.permute(2, 0, 1, 3).reshape(query.shape)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor] = None,
               is_causal: bool = False) -> Tensor:
        """``q`` ``(T, B, H, d)``, ``k``/``v`` ``(S, B, H, d)``, ``allowed`` broadcastable to
        ``(B, H, T, S)`` bool (or ``is_causal``) → the projected output ``(T, B, C)``."""
        return self.attend_heads_first(q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3),
                                       allowed, is_causal)

    def attend_heads_first(self, q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor] = None,
                           is_causal: bool = False) -> Tensor:
        """:meth:`attend` for ``q`` ``(B, H, T, d)`` and ``k``/``v`` ``(B, H, S, d)``
        (``scaled_dot_product_attention``'s layout) → the projected output ``(T, B, C)``."""
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=is_causal,
                                              dropout_p=self.attention_dropout if self.training else 0.0)
        return self.out_proj(attn.permute(2, 0, 1, 3).reshape(q.size(2), q.size(0), self.embed_dim))
