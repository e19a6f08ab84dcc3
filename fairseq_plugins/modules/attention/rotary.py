"""Softmax attention with rotary positions over a window of keys, in two windows:

* :class:`ShortTermMemoryAttention` — the ∞-former LM's attention (Transformer-XL
  style; Martins et al., ACL 2022, §3.2, Fig. 1): each position of the segment
  attends causally to the segment and to the previous S attention inputs kept in a
  :class:`ShortTermMemory`; it also hosts a memory's extra keys and values ahead of
  that window, in the same softmax (the Compressive Transformer's [compressed memory;
  memory; segment], Rae et al. 2020, §3);
* :class:`ChunkWindowAttention` — the summarizer encoder's: the tokens of a chunk
  attend to their chunk and to the previous chunk of the same document.

Both use fairseq's ``RotaryPositionalEmbedding`` on the largest even number of head
channels (an odd head width, e.g. 410/10 = 41, leaves one channel as is). They
follow the contract of :mod:`fairseq_plugins.modules.attention.contract`; ``query`` in their
output is the projection before rotation (what the long-term memory reads with).
"""

from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch
from fairseq.modules.rotary_positional_embedding import RotaryPositionalEmbedding, rotate_half
from torch import Tensor

from fairseq_plugins.modules.attention.contract import AttentionOutput, ProjectedAttention
from fairseq_plugins.modules.memory.contract import MemoryKeysValues
from fairseq_plugins.modules.state import TensorState, batch_dim


@dataclass
class ShortTermMemory(TensorState):
    """The last S attention inputs of ``bsz`` streams (detached).

    Attributes:
        states: ``(S, bsz, C)``; S = 0 for an empty memory.
        valid: ``(bsz, S)`` bool, False where a position belongs to no stream yet or
            to a stream that was reset since.
    """

    states: Tensor = field(metadata=batch_dim(1))
    valid: Tensor = field(metadata=batch_dim(0))

    @classmethod
    def empty(cls, bsz: int, embed_dim: int, device, dtype=torch.float32) -> "ShortTermMemory":
        return cls(torch.zeros(0, bsz, embed_dim, device=device, dtype=dtype),
                   torch.zeros(bsz, 0, dtype=torch.bool, device=device))

    def reset_(self, slots: Tensor) -> None:
        """Forget the slots where ``slots`` (``(bsz,)`` bool) is True."""
        self.valid = self.valid & ~slots[:, None]


@dataclass
class ShortTermMemoryCache(TensorState):
    """:class:`ShortTermMemoryAttention`'s incremental-decoding state inside a segment.

    Attributes:
        inputs: ``(t, bsz, C)`` the attention inputs of the segment's first t positions
            (they enter the short-term memory, and the long-term memory, at its end).
        keys, values: ``(P + S' + t, bsz, H, d)`` rotated keys and values of [hosted memory;
            short-term memory; inputs].
        memory: the short-term memory the segment started with (S' positions), or ``None``.
        hosted_valid: ``(bsz, P)`` bool, the validity of a hosted memory's P vectors
            (``memory_kv``), or ``None`` when there is none (P = 0).
    """

    inputs: Tensor = field(metadata=batch_dim(1))
    keys: Tensor = field(metadata=batch_dim(1))
    values: Tensor = field(metadata=batch_dim(1))
    memory: Optional[ShortTermMemory] = field(default=None)
    hosted_valid: Optional[Tensor] = field(default=None, metadata=batch_dim(0))


class RotaryAttention(ProjectedAttention):
    """:class:`~fairseq_plugins.modules.attention.ProjectedAttention` with rotary positions.

    Args:
        embed_dim, num_heads: width C and heads h (h must divide C).
        attention_dropout: dropout on the attention weights (training only).
    """

    def __init__(self, embed_dim: int, num_heads: int, attention_dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, attention_dropout)
        self.rotary_dim = self.head_dim - self.head_dim % 2
        self.rotary = RotaryPositionalEmbedding(self.rotary_dim)

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotate ``(T, B, H, d)`` by ``cos``/``sin`` ``(T, 1, 1, rotary_dim)``."""
        cos, sin = cos.to(device=x.device, dtype=x.dtype), sin.to(device=x.device, dtype=x.dtype)
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        rot = rot * cos + rotate_half(rot) * sin
        return torch.cat([rot, rest], dim=-1) if rest.size(-1) else rot


class ShortTermMemoryAttention(RotaryAttention):
    """Causal attention over [short-term memory; segment] (see the module docstring).

    Args:
        embed_dim, num_heads, attention_dropout: as :class:`RotaryAttention`.
        mem_len: S, the positions kept for the next segment (0: no short-term memory).
    """

    state_type = ShortTermMemory
    cache_type = ShortTermMemoryCache
    memory_inputs = ("segment", "evicted", "residual")
    hosts_memory_keys_values = True

    def __init__(self, embed_dim: int, num_heads: int, mem_len: int, attention_dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, attention_dropout)
        self.mem_len = mem_len

    def empty_state(self, bsz: int, device) -> Optional[ShortTermMemory]:
        return ShortTermMemory.empty(bsz, self.embed_dim, device) if self.mem_len > 0 else None

    def forward(self, x: Tensor, *, state: Optional[ShortTermMemory] = None,
                memory_kv: Optional[MemoryKeysValues] = None, **unused) -> AttentionOutput:
        """
        Args:
            x: ``(T, bsz, C)`` the normalised segment.
            state: the short-term memory from the previous segment (``None``: none).
            memory_kv: a hosted memory's P vectors, attended ahead of the short-term memory in
                the same softmax, with the rotary positions running on across
                [hosted memory; short-term memory; segment] (``None``: none).
        Returns:
            :class:`AttentionOutput` with ``query`` and the short-term memory for the
            next segment (the last S attention inputs, detached; ``None`` when S = 0).
        """
        tgt_len, bsz, _ = x.shape
        kv_input, mem_valid = self.window(x, state)
        following = self.following(kv_input, mem_valid, tgt_len)
        kv_input, mem_valid = self.hosted(kv_input, mem_valid, memory_kv)
        mem_size = kv_input.size(0) - tgt_len
        src_len = kv_input.size(0)
        query = self.q_proj(x)
        key = self.heads(self.k_proj(kv_input))
        value = self.heads(self.v_proj(kv_input))
        cos, sin = self.rotary(key, seq_len=src_len)  # (≥S+T, 1, 1, d)
        q = self.rotate(self.heads(query), cos[mem_size:src_len], sin[mem_size:src_len])
        k = self.rotate(key, cos[:src_len], sin[:src_len])
        # allowed[b, t, j]: memory slots that are valid, and causal within the segment
        causal = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=x.device).tril()
        allowed = torch.cat([mem_valid[:, None, :].expand(bsz, tgt_len, mem_size), causal.expand(bsz, -1, -1)],
                            dim=-1)
        out = self.attend(q, k, value, allowed[:, None])
        return AttentionOutput(out, query=query, state=following)

    def window(self, x: Tensor, state: Optional[ShortTermMemory]):
        """``(kv_input (S+T, bsz, C), memory valid (bsz, S))``: [short-term memory; ``x``]."""
        if state is None:
            return x, x.new_zeros(x.size(1), 0, dtype=torch.bool)
        return torch.cat([state.states.to(x.dtype), x], dim=0), state.valid

    @staticmethod
    def hosted(kv_input: Tensor, valid: Tensor, memory_kv: Optional[MemoryKeysValues]) -> Tuple[Tensor, Tensor]:
        """``(kv_input, valid)`` with a hosted memory's vectors and validity put ahead (unchanged
        without one): ``((P + n, bsz, C), (bsz, P + n'))``."""
        if memory_kv is None:
            return kv_input, valid
        return (torch.cat([memory_kv.states.to(kv_input.dtype), kv_input], dim=0),
                torch.cat([memory_kv.valid, valid], dim=1))

    def following(self, kv_input: Tensor, mem_valid: Tensor, tgt_len: int) -> Optional[ShortTermMemory]:
        """The short-term memory after a segment: the last S of ``kv_input`` (``None`` when S = 0)."""
        if self.mem_len == 0:
            return None
        bsz = kv_input.size(1)
        valid = torch.cat([mem_valid, torch.ones(bsz, tgt_len, dtype=torch.bool, device=kv_input.device)], dim=1)
        return ShortTermMemory(kv_input.detach()[-self.mem_len:], valid[:, -self.mem_len:])

    def evicted(self, x: Tensor, state: Optional[ShortTermMemory]) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """What leaves the short-term memory when segment ``x`` ``(T, bsz, C)`` enters it.

        The window [memory (S' ≤ S positions); x] keeps its last S positions; the
        first S' + T − S (oldest first) leave. With S = T that is the previous
        segment, with S = 0 all of ``x``, and nothing while the window is not full
        (S' + T ≤ S). Returns ``(chunk (S' + T − S, bsz, C) detached, valid (bsz,))``,
        ``valid`` False for a slot where any leaving position is not valid (it
        belongs to a stream that was reset), or ``(None, None)`` when nothing leaves.
        """
        kv_input, mem_valid = self.window(x, state)
        leaving = kv_input.size(0) - self.mem_len
        if leaving <= 0:
            return None, None
        valid = torch.cat([mem_valid, torch.ones(x.size(1), x.size(0), dtype=torch.bool, device=x.device)], dim=1)
        return kv_input.detach()[:leaving], valid[:, :leaving].all(dim=1)

    # ---- incremental decoding (docs/generation.md) --------------------------

    def start_segment(self, memory: Optional[ShortTermMemory], bsz: int, device, length: int,
                      memory_kv: Optional[MemoryKeysValues] = None) -> ShortTermMemoryCache:
        """The cache of a segment (of ``length`` positions) that starts with short-term memory
        ``memory`` and hosts ``memory_kv`` (P vectors, or ``None``): the rotated keys and values
        of [hosted memory; short-term memory] at window positions 0..P+S'−1 (as :meth:`forward`
        computes them)."""
        dtype = self.k_proj.weight.dtype
        states = memory.states.to(dtype) if memory is not None else torch.zeros(0, bsz, self.embed_dim,
                                                                                 device=device, dtype=dtype)
        hosted_valid = None
        if memory_kv is not None:
            states = torch.cat([memory_kv.states.to(dtype), states], dim=0)
            hosted_valid = memory_kv.valid
        cos, sin = self.rotary(states, seq_len=states.size(0))
        keys = self.rotate(self.heads(self.k_proj(states)), cos[:states.size(0)], sin[:states.size(0)])
        empty = states.new_zeros(0, bsz, self.embed_dim)
        return ShortTermMemoryCache(empty, keys, self.heads(self.v_proj(states)), memory, hosted_valid)

    def step(self, x: Tensor, cache: ShortTermMemoryCache, filled: int) -> Tuple[AttentionOutput, ShortTermMemoryCache]:
        """The next T positions of the segment (``x`` ``(T, bsz, C)``), which follow its first
        ``filled`` (the cache's ``inputs``): the same attention as :meth:`forward` gives them,
        with the cached keys and values of the positions before."""
        tgt_len, bsz, _ = x.shape
        pos = cache.keys.size(0)  # P + S' + filled: x's first window position
        mem_size = pos - filled
        mem_valid = cache.memory.valid if cache.memory is not None else x.new_zeros(bsz, 0, dtype=torch.bool)
        if cache.hosted_valid is not None:
            mem_valid = torch.cat([cache.hosted_valid, mem_valid], dim=1)
        query = self.q_proj(x)
        cos, sin = self.rotary(x, seq_len=pos + tgt_len)
        cos, sin = cos[pos:pos + tgt_len], sin[pos:pos + tgt_len]
        q = self.rotate(self.heads(query), cos, sin)
        keys = torch.cat([cache.keys, self.rotate(self.heads(self.k_proj(x)), cos, sin)], dim=0)
        values = torch.cat([cache.values, self.heads(self.v_proj(x))], dim=0)
        causal = torch.ones(tgt_len, filled + tgt_len, dtype=torch.bool, device=x.device).tril(diagonal=filled)
        allowed = torch.cat([mem_valid[:, None, :].expand(bsz, tgt_len, mem_size), causal.expand(bsz, -1, -1)],
                            dim=-1)
        out = self.attend(q, keys, values, allowed[:, None])
        following = ShortTermMemoryCache(torch.cat([cache.inputs, x], dim=0), keys, values, cache.memory,
                                         cache.hosted_valid)
        return AttentionOutput(out, query=query), following

    def end_segment(self, cache: ShortTermMemoryCache) -> Optional[ShortTermMemory]:
        """The short-term memory after the cached segment (as :meth:`forward` returns it)."""
        kv_input, mem_valid = self.window(cache.inputs, cache.memory)
        return self.following(kv_input, mem_valid, cache.inputs.size(0))


class ChunkWindowAttention(RotaryAttention):
    """Attention inside a chunk and, optionally, to the previous chunk of the same document.

    The keyword ``state`` carries the window: a :class:`ChunkWindow`.
    """

    def __init__(self, embed_dim: int, num_heads: int, previous_chunk: bool = True,
                 attention_dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, attention_dropout)
        self.previous_chunk = previous_chunk

    def forward(self, x: Tensor, *, padding_mask: Tensor, state: "ChunkWindow", **unused) -> AttentionOutput:
        """
        Args:
            x: ``(C, K, e)`` K chunks of C positions.
            padding_mask: ``(K, C)`` bool, True at padding (every chunk has at least
                its first position real).
            state: the chunks' predecessors (:class:`ChunkWindow`).
        Returns:
            :class:`AttentionOutput` (``out`` ``(C, K, e)``, ``query``; no state).
        """
        chunk = x.size(0)
        query = self.q_proj(x)
        q, k, v = self.heads(query), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        allowed = ~padding_mask  # (K, C)
        cos, sin = self.rotary(x, seq_len=2 * chunk)
        if self.previous_chunk and state.previous is not None:
            # window = [previous chunk (positions 0..C-1); own chunk (C..2C-1)]
            q = self.rotate(q, cos[chunk:2 * chunk], sin[chunk:2 * chunk])
            k_prev = self.rotate(k, cos[:chunk], sin[:chunk]).index_select(1, state.previous)
            k = torch.cat([k_prev, self.rotate(k, cos[chunk:2 * chunk], sin[chunk:2 * chunk])], dim=0)
            v = torch.cat([v.index_select(1, state.previous), v], dim=0)
            allowed_prev = allowed.index_select(0, state.previous) & state.has_previous[:, None]
            allowed = torch.cat([allowed_prev, allowed], dim=1)  # (K, 2C)
        else:
            q = self.rotate(q, cos[:chunk], sin[:chunk])
            k = self.rotate(k, cos[:chunk], sin[:chunk])
        return AttentionOutput(self.attend(q, k, v, allowed[:, None, None, :]), query=query)


@dataclass
class ChunkWindow:
    """Which chunk precedes each chunk of a packed batch of chunks.

    Attributes:
        previous: ``(K,)`` long, index of each chunk's predecessor (any valid index
            where there is none).
        has_previous: ``(K,)`` bool, False for the first chunk of a document.
    """

    previous: Optional[Tensor]
    has_previous: Optional[Tensor]


