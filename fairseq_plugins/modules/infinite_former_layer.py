"""One ∞-former decoder block: causal self-attention over a short-term memory
plus the current segment (Transformer-XL style, rotary positions), with the
long-term memory read added to the attention output (Martins et al., ACL 2022,
§3.2, Fig. 1), then a feed-forward block. Pre-norm.

Shapes are time-first: ``(T, B, C)`` = (segment length, batch, width);
``S`` is the short-term memory length.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.rotary_positional_embedding import RotaryPositionalEmbedding, rotate_half
from torch import Tensor, nn

from fairseq_plugins.modules.long_term_memory import LongTermMemory, LongTermMemoryState


@dataclass
class LayerMemory:
    """What one layer carries from a segment to the next, for ``bsz`` streams.

    Attributes:
        stm: ``(S, bsz, C)`` attention inputs of the last S positions (detached).
        stm_valid: ``(bsz, S)`` bool, False where a position belongs to no
            stream yet or to a stream that was reset since.
        chunk: ``(L, bsz, C)`` the previous segment's attention inputs, which
            enter the long-term memory at the start of the next segment.
        chunk_valid: ``(bsz,)`` bool.
        ltm: the long-term memory state (``None`` when the LTM is off).
    """

    stm: Optional[Tensor] = None
    stm_valid: Optional[Tensor] = None
    chunk: Optional[Tensor] = None
    chunk_valid: Optional[Tensor] = None
    ltm: Optional[LongTermMemoryState] = None

    def to_dict(self) -> Dict[str, Tensor]:
        """Flat ``{name: tensor}`` (``None`` entries left out), for checkpoints."""
        out = {k: v for k, v in vars(self).items() if isinstance(v, Tensor)}
        if self.ltm is not None:
            out.update({f"ltm.{k}": v for k, v in vars(self.ltm).items() if isinstance(v, Tensor)})
        return out

    @classmethod
    def from_dict(cls, state: Dict[str, Tensor], device=None) -> "LayerMemory":
        """Inverse of :meth:`to_dict`, moving tensors to ``device``."""
        state = {k: v.to(device) if device is not None else v for k, v in state.items()}
        ltm = None
        if "ltm.coefficients" in state:
            ltm = LongTermMemoryState(**{k[4:]: v for k, v in state.items() if k.startswith("ltm.")})
        return cls(ltm=ltm, **{k: v for k, v in state.items() if not k.startswith("ltm.")})

    def reset_(self, slots: Tensor) -> None:
        """Forget everything for the slots where ``slots`` (``(bsz,)`` bool) is True."""
        if self.stm_valid is not None:
            self.stm_valid = self.stm_valid & ~slots[:, None]
        if self.chunk_valid is not None:
            self.chunk_valid = self.chunk_valid & ~slots
        if self.ltm is not None:
            self.ltm.reset_(slots)


class InfiniteFormerDecoderLayer(nn.Module):
    """Pre-norm decoder block with short- and long-term memory.

    Args:
        embed_dim, num_heads, ffn_embed_dim: width C, heads h (C % h == 0),
            feed-forward width.
        mem_len: S, positions of short-term memory kept (0 disables it).
        dropout, attention_dropout, activation_dropout, activation_fn: as in
            fairseq's ``TransformerDecoderLayer``.
        long_term_memory: a :class:`LongTermMemory` for this layer, or ``None``
            (the Transformer-XL-style twin).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ffn_embed_dim: int,
        mem_len: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation_fn: str = "gelu",
        long_term_memory: Optional[LongTermMemory] = None,
    ):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.mem_len = mem_len
        self.attention_dropout = attention_dropout
        self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        # rotary positions on the largest even number of head channels (an odd head
        # width, e.g. 410/10 = 41 in the WikiText-103 setting, leaves one channel as is)
        self.rotary_dim = self.head_dim - self.head_dim % 2
        self.rotary = RotaryPositionalEmbedding(self.rotary_dim)
        self.long_term_memory = long_term_memory
        self.final_layer_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation_fn: Callable = utils.get_activation_fn(activation_fn)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def _rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        # x: (T, bsz, H, d); cos/sin: (T, 1, 1, rotary_dim)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        rot = rot * cos.to(x.dtype) + rotate_half(rot) * sin.to(x.dtype)
        return torch.cat([rot, rest], dim=-1) if rest.size(-1) else rot

    def forward(
        self, x: Tensor, memory: LayerMemory
    ) -> Tuple[Tensor, LayerMemory, Optional[Tuple[Tensor, Tensor, Tensor]]]:
        """Process one segment.

        Args:
            x: ``(T, bsz, C)`` the residual stream of this segment.
            memory: this layer's memory from the previous segment (may be empty).
        Returns:
            ``(x, memory, ltm_stats)``: the new residual stream ``(T, bsz, C)``,
            the memory for the next segment (all tensors detached), and
            ``(mu, sigma2, valid)`` of the LTM read (``(bsz, H, T)`` ×2 and
            ``(bsz,)`` bool), or ``None`` when the LTM is off.
        """
        tgt_len, bsz, _ = x.shape
        h, d = self.num_heads, self.head_dim
        hidden = self.self_attn_layer_norm(x)  # (T, bsz, C): enters both memories

        ltm_state = None
        if self.long_term_memory is not None:
            ltm_state = memory.ltm or LongTermMemoryState.empty(
                bsz, self.long_term_memory.num_basis, self.embed_dim, x.device)
            if memory.chunk is not None:
                ltm_state = self.long_term_memory.update(ltm_state, memory.chunk, memory.chunk_valid)

        if memory.stm is not None and self.mem_len > 0:
            kv_input = torch.cat([memory.stm.to(hidden.dtype), hidden], dim=0)  # (S+T, bsz, C)
            mem_valid = memory.stm_valid
        else:
            kv_input = hidden
            mem_valid = hidden.new_zeros(bsz, 0, dtype=torch.bool)
        mem_size = kv_input.size(0) - tgt_len
        src_len = kv_input.size(0)

        query = self.q_proj(hidden)  # (T, bsz, C)
        key = self.k_proj(kv_input).view(src_len, bsz, h, d)
        value = self.v_proj(kv_input).view(src_len, bsz, h, d)
        cos, sin = self.rotary(key, seq_len=src_len)  # (≥S+T, 1, 1, d)
        q = self._rotate(query.view(tgt_len, bsz, h, d), cos[mem_size:src_len], sin[mem_size:src_len])
        k = self._rotate(key, cos[:src_len], sin[:src_len])

        # allowed[b, t, j]: memory slots that are valid, and causal within the segment
        causal = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=x.device).tril()
        allowed = torch.cat(
            [mem_valid[:, None, :].expand(bsz, tgt_len, mem_size), causal.expand(bsz, -1, -1)], dim=-1
        )
        attn = F.scaled_dot_product_attention(
            q.permute(1, 2, 0, 3),  # (bsz, H, T, d)
            k.permute(1, 2, 0, 3),  # (bsz, H, S+T, d)
            value.permute(1, 2, 0, 3),
            attn_mask=allowed[:, None],
            dropout_p=self.attention_dropout if self.training else 0.0,
        )  # (bsz, H, T, d)
        attn = self.out_proj(attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))

        ltm_stats = None
        if ltm_state is not None:
            ltm_out, mu, sigma2 = self.long_term_memory(query, ltm_state)
            attn = attn + ltm_out
            ltm_stats = (mu, sigma2, ltm_state.valid)
            ltm_state = LongTermMemoryState(ltm_state.coefficients, ltm_state.valid, mu, sigma2.sqrt()).detach()

        x = x + self.dropout_module(attn)
        residual = x
        y = self.activation_fn(self.fc1(self.final_layer_norm(x)))
        y = self.fc2(self.activation_dropout_module(y))
        x = residual + self.dropout_module(y)

        new_memory = LayerMemory(ltm=ltm_state)
        if self.mem_len > 0:
            new_memory.stm = kv_input.detach()[-self.mem_len:]
            new_memory.stm_valid = torch.cat(
                [mem_valid, torch.ones(bsz, tgt_len, dtype=torch.bool, device=x.device)], dim=1
            )[:, -self.mem_len:]
        if self.long_term_memory is not None:
            new_memory.chunk = hidden.detach()
            new_memory.chunk_valid = torch.ones(bsz, dtype=torch.bool, device=x.device)
        return x, new_memory, ltm_stats
