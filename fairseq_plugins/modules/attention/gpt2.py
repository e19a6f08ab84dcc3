"""GPT-2's self-attention behind the plugin's attention contract, and its positions.

GPT-2 (Radford et al. 2019) adds learned absolute positions at the embedding, so its
attention is plain causal softmax attention over the current block, with biased q, k,
v and output projections (Hugging Face's ``c_attn`` packs q, k, v; ``c_proj`` is the
output projection). In the ∞-former on GPT-2 (docs/design/gpt2.md §1) each block of
``--tokens-per-sample`` tokens attends only to itself, positions restart at 0 in
every block, and the long-term memory reads with the attention's query
(``AttentionOutput.query``). Shapes are time-first ``(T, bsz, C)`` as in
:mod:`fairseq_plugins.modules.attention.contract`.

Incremental decoding (docs/generation.md, "GPT-2"): the ``start_segment`` / ``step`` /
``end_segment`` protocol of :class:`~fairseq_plugins.modules.block.PreNormBlock`, with a
:class:`GPT2AttentionCache` holding the keys and values of the block's positions so far;
nothing is carried from one block to the next.
"""

import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention.contract import AttentionOutput, ProjectedAttention
from fairseq_plugins.modules.state import TensorState, batch_dim


@dataclass
class GPT2AttentionCache(TensorState):
    """:class:`GPT2Attention`'s incremental-decoding state inside a block.

    Attributes:
        keys, values: ``(bsz, H, L, d)`` buffers for the projected keys and values of the
            block's L positions, in ``scaled_dot_product_attention``'s layout; the first
            ``filled`` (the decoder's count of the block's positions so far) hold them, the
            others are zero until their positions come. A step writes its positions in place
            and reads the filled part, so its copies do not grow with the block.
    """

    keys: Tensor = field(metadata=batch_dim(0))
    values: Tensor = field(metadata=batch_dim(0))


class GPT2Attention(ProjectedAttention):
    """Causal multi-head attention within the block (no short-term memory, no rotary).

    Args:
        embed_dim, num_heads: width C and heads h (h must divide C).
        attention_dropout: dropout on the attention weights (GPT-2: ``attn_pdrop`` 0.1).
    """

    cache_type = GPT2AttentionCache
    query_chunk = 128  # query rows per product of :meth:`attend_causal_dropout`

    def forward(self, x: Tensor, **unused) -> AttentionOutput:
        """
        Args:
            x: ``(T, bsz, C)`` the block's normalised input (after ``ln_1``).
        Returns:
            :class:`AttentionOutput` with ``out`` ``(T, bsz, C)`` (after ``c_proj``) and
            ``query`` ``(T, bsz, C)`` (the projected query, for the long-term memory).
        """
        query = self.q_proj(x)
        q, k, v = self.heads(query), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        if self.training and self.attention_dropout > 0 and x.device.type == "cpu":
            return AttentionOutput(self.attend_causal_dropout(q, k, v), query=query)
        return AttentionOutput(self.attend(q, k, v, is_causal=True), query=query)

    def attend_causal_dropout(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """:meth:`attend` with ``is_causal`` and attention dropout, by blocks of
        :attr:`query_chunk` queries that each multiply only the keys up to their last position.

        On a CPU, ``scaled_dot_product_attention`` with dropout runs its reference ("math")
        path over the whole T × T matrix, half of it masked; this computes 1/2 + 1/(2n) of it
        for n blocks (measured: docs/benchmark.md, "GPT-2 against transformers"). The dropout
        mask is drawn as that path draws it (one ``bernoulli_`` over the whole ``(B, H, T, T)`` weights, scaled by
        1/(1 − p)), so the same random state gives the same output (within float rounding).
        Shapes as :meth:`attend`.
        """
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # (B, H, T, d)
        length, p = q.size(2), self.attention_dropout
        keep = torch.empty(*q.shape[:3], length, dtype=q.dtype, device=q.device).bernoulli_(1 - p).div_(1 - p)
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu_(1)
        q = q * (1.0 / math.sqrt(self.head_dim))
        outputs = []
        for start in range(0, length, self.query_chunk):
            stop = min(length, start + self.query_chunk)
            scores = torch.matmul(q[:, :, start:stop], k[:, :, :stop].transpose(-1, -2))  # (B, H, c, stop)
            scores.masked_fill_(future[start:stop, :stop], float("-inf"))
            weights = torch.softmax(scores, dim=-1) * keep[:, :, start:stop, :stop]
            outputs.append(torch.matmul(weights, v[:, :, :stop]))
        attn = torch.cat(outputs, dim=2)  # (B, H, T, d)
        return self.out_proj(attn.permute(2, 0, 1, 3).reshape(length, q.size(0), self.embed_dim))

    # ---- incremental decoding (docs/generation.md) --------------------------

    def start_segment(self, state: None, bsz: int, device, length: int) -> GPT2AttentionCache:
        """The cache of a block of ``length`` positions that starts (``state`` is always
        ``None``: a block sees no earlier block): zero key and value buffers."""
        shape = (bsz, self.num_heads, length, self.head_dim)
        dtype = self.k_proj.weight.dtype
        return GPT2AttentionCache(torch.zeros(shape, device=device, dtype=dtype),
                                  torch.zeros(shape, device=device, dtype=dtype))

    def step(self, x: Tensor, cache: GPT2AttentionCache, filled: int) -> Tuple[AttentionOutput, GPT2AttentionCache]:
        """The next T positions ``x`` ``(T, bsz, C)`` of the block (after ``ln_1``), which
        follow its first ``filled``: the attention :meth:`forward` gives them, with the cached
        keys and values of the positions before. Writes their keys and values into ``cache``'s
        buffers. Returns ``(AttentionOutput (out, query), cache)``.

        Raises:
            ConfigError: ``filled + T`` beyond the block's length.
        """
        tgt_len, stop = x.size(0), filled + x.size(0)
        if stop > cache.keys.size(2):
            raise ConfigError(f"{stop} positions in a block of {cache.keys.size(2)}: end the full block "
                              f"(end_segment, then start_segment) before the next position")
        query = self.q_proj(x)
        cache.keys[:, :, filled:stop] = self.heads(self.k_proj(x)).permute(1, 2, 0, 3)
        cache.values[:, :, filled:stop] = self.heads(self.v_proj(x)).permute(1, 2, 0, 3)
        q = self.heads(query).permute(1, 2, 0, 3)
        keys, values = cache.keys[:, :, :stop].to(q.dtype), cache.values[:, :, :stop].to(q.dtype)
        # one new position sees every key: no mask, which keeps SDPA on its fused path
        causal = None if tgt_len == 1 else torch.ones(tgt_len, stop, dtype=torch.bool,
                                                      device=x.device).tril(diagonal=filled)
        return AttentionOutput(self.attend_heads_first(q, keys, values, causal), query=query), cache

    def end_segment(self, cache: GPT2AttentionCache) -> None:
        """What the attention carries to the next block: nothing (as :meth:`forward`)."""
        return None


class BlockPositions(nn.Module):
    """GPT-2's learned absolute positions (``wpe``), restarting at 0 in every block.

    Token t of the input gets position ``t mod block_length`` (docs/design/gpt2.md §1:
    every block of 512 tokens has positions 0..511). Unlike fairseq's
    ``LearnedPositionalEmbedding`` there is no padding offset: row p of ``weight`` is
    GPT-2's position p.

    Args:
        num_positions: rows of the table (GPT-2: ``n_positions`` = 1024).
        embed_dim: C.
        block_length: tokens per block (``--tokens-per-sample``); at most ``num_positions``.

    Raises:
        ConfigError: a block longer than the position table.
    """

    def __init__(self, num_positions: int, embed_dim: int, block_length: int):
        super().__init__()
        if not 0 < block_length <= num_positions:
            raise ConfigError(f"--tokens-per-sample ({block_length}) must lie in 1..{num_positions}, the "
                              f"length of GPT-2's position table (--max-positions); use a shorter block")
        self.block_length = block_length
        self.weight = nn.Parameter(torch.empty(num_positions, embed_dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, tokens: Tensor, incremental_state: Optional[dict] = None, offset: int = 0) -> Tensor:
        """``(bsz, T)`` token ids → ``(1, T, C)`` position embeddings (broadcast over the batch).

        ``offset``: the number of tokens of the stream before ``tokens`` (incremental
        decoding feeds the new tokens of a prefix only); token t gets position
        ``(offset + t) mod block_length``."""
        positions = (offset + torch.arange(tokens.size(1), device=tokens.device)) % self.block_length
        return F.embedding(positions, self.weight).unsqueeze(0)
