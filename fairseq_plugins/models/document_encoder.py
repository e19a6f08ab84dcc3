"""The encoder of ``infinite_former_summarizer`` (docs/summarization.md, "Summarizer model"):
the document read chunk by chunk (padding removed; each chunk attends to itself and the chunk
before it, rotary positions), then its top states fitted onto the continuous memory B (Martins
et al., ACL 2022, §3.1, eq. 7; the smoothing gate of §3.3), the lead window kept beside it, and,
for the top-k read, every state. :class:`InfiniteFormerSummarizerEncoder` says what its output
holds.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.config import check_not_empty
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import PreNormEncoder
from fairseq_plugins.modules.attention.rotary import ChunkWindow, ChunkWindowAttention
from fairseq_plugins.modules.block import BlockState, FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis, SmoothingGate


def _predecessors(has_previous: Tensor):
    """``(previous, has_previous)`` of a run of consecutive packed chunks: each chunk's
    predecessor is the chunk before it (index 0 where it has none)."""
    previous = (torch.arange(has_previous.numel(), device=has_previous.device) - 1).clamp_min(0)
    return previous, has_previous


def _draws_random_numbers(layer: nn.Module) -> bool:
    """Whether ``layer`` in its current mode draws from torch's generator (an active dropout)."""
    return layer.training and any(getattr(m, "p", 0) > 0 or getattr(m, "attention_dropout", 0) > 0
                                  for m in layer.modules())


# the --encoder-positions choices: rotary inside the attention window only, or also the token's
# place in the document added to its embedding
ENCODER_POSITIONS = ("relative", "absolute")


def sinusoid(positions: Tensor, dim: int) -> Tensor:
    """The sinusoidal embedding of integer ``positions`` ``(...)`` → ``(..., dim)`` float32, as
    fairseq's ``SinusoidalPositionalEmbedding`` computes its table (sines then cosines of
    position · 10000^(−i/(dim/2 − 1))), for any position without a table."""
    half = dim // 2
    rate = torch.exp(torch.arange(half, dtype=torch.float32, device=positions.device)
                     * -(math.log(10000.0) / max(half - 1, 1)))
    angles = positions.float()[..., None] * rate
    emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    return F.pad(emb, (0, dim - 2 * half))


class InfiniteFormerSummarizerEncoder(PreNormEncoder):
    """Chunked encoder + continuous memory of the whole document (see the module docstring).

    Args:
        cfg: the model's config (:class:`~fairseq_plugins.models.infinite_former_summarizer.InfiniteFormerSummarizerConfig`);
            dictionary, embed_tokens: the source side.
        basis: the memory's basis, shared with the decoder's reads.
    """

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding,
                 basis: ContinuousBasis):
        dim = cfg.encoder_embed_dim

        def block():
            attention = ChunkWindowAttention(dim, cfg.encoder_attention_heads, previous_chunk=not cfg.no_previous_chunk,
                                             attention_dropout=cfg.attention_dropout)
            ffn = FeedForward(dim, cfg.encoder_ffn_embed_dim, cfg.activation_fn, cfg.activation_dropout)
            return PreNormBlock(dim, attention, ffn, dropout=cfg.dropout)

        layers = nn.ModuleList(block() for _ in range(cfg.encoder_layers))
        super().__init__(dictionary, embed_tokens, layers, dropout=cfg.dropout,
                         no_scale_embedding=cfg.no_scale_embedding, max_positions=cfg.max_source_positions)
        self.chunk_length = cfg.encoder_chunk_length
        self.absolute_positions = cfg.encoder_positions == "absolute"
        self.lead_window = cfg.lead_window
        self.keep_states = cfg.retrieval_topk > 0
        self.signal = None if cfg.no_document_memory else basis
        # what the decoder reads lies in the first chunks only: encoder states depend on their own
        # chunk and the ones before it, so the rest of the document is not encoded
        self.read_limit = None
        if cfg.no_document_memory and not self.keep_states:
            self.read_limit = -(-cfg.lead_window // cfg.encoder_chunk_length) * cfg.encoder_chunk_length
        # smoothing gate X̃ = X ⊙ sigmoid(Conv1d(X)), kernel 3 (paper §3.3)
        self.memory_gate = None if cfg.no_memory_gate or cfg.no_document_memory else SmoothingGate(dim)

    def _chunks(self, src_tokens: Tensor):
        """Remove padding and cut every document into chunks, packed over the batch.

        Returns ``(packed (K, C), lengths (bsz,), chunk_valid (bsz, n_max),
        has_previous (K,))``: chunk j of document b is a row of ``packed``
        where ``chunk_valid[b, j]``, in document order.
        """
        check_not_empty(src_tokens, "the source")
        bsz = src_tokens.size(0)
        padding = src_tokens.eq(self.padding_idx)
        lengths = (~padding).sum(dim=1)
        if bool((lengths == 0).any()):
            raise ConfigError("a source has all positions padded; every document needs at least one token")
        # real tokens first, in their order (a stable sort of the padding flags)
        order = torch.sort(padding.to(torch.uint8), dim=1, stable=True).indices
        tokens = src_tokens.gather(1, order)
        chunk = self.chunk_length
        num_max = (int(lengths.max()) + chunk - 1) // chunk
        tokens = F.pad(tokens[:, : int(lengths.max())], (0, num_max * chunk - int(lengths.max())),
                       value=self.padding_idx)
        index = torch.arange(num_max, device=src_tokens.device)
        chunk_valid = index[None, :] < ((lengths + chunk - 1) // chunk)[:, None]  # (bsz, n_max)
        packed = tokens.view(bsz, num_max, chunk)[chunk_valid]  # (K, C)
        has_previous = (index[None, :] > 0).expand(bsz, -1)[chunk_valid]
        return packed, lengths, chunk_valid, has_previous

    def _first_chunks(self, packed: Tensor, chunk_valid: Tensor, has_previous: Tensor, lengths: Tensor):
        """Only the chunks of the first :attr:`read_limit` positions of each document (what
        ``_chunks`` returns, cut there; lengths clipped)."""
        keep_chunks = self.read_limit // self.chunk_length
        index = torch.arange(chunk_valid.size(1), device=chunk_valid.device)
        kept = (index[None, :] < keep_chunks).expand_as(chunk_valid)[chunk_valid]  # over the packed rows
        chunk_valid = chunk_valid & (index[None, :] < keep_chunks)
        return packed[kept], chunk_valid[:, :keep_chunks], has_previous[kept], lengths.clamp_max(self.read_limit)

    GROUP_TOKENS = 4096  # a layer runs on groups of about this many tokens of chunks (cache-sized)

    def _layer_in_groups(self, layer: PreNormBlock, x: Tensor, padding: Tensor, has_previous: Tensor) -> Tensor:
        """One block over the packed chunks ``x`` ``(C, K, e)``, in groups of consecutive chunks
        of about :attr:`GROUP_TOKENS` tokens, so that a long document's activations stay in the
        caches (on a CPU one batch of hundreds of chunks is slower per token: docs/benchmark.md).
        Each group also runs the chunk before it, as context for its first chunk's attention;
        that chunk's output is dropped (same values as one call on all chunks). A layer that
        draws random numbers (dropout while training) runs on all chunks at once, so that its
        draws are those of one batch of all chunks."""
        group = max(1, self.GROUP_TOKENS // x.size(0))
        if x.size(1) <= group or _draws_random_numbers(layer):
            return layer(x, BlockState(attention=ChunkWindow(*_predecessors(has_previous))), padding_mask=padding).x
        # split (not sliced: a slice's backward writes a zero tensor of the whole input per group)
        pieces, masks, flags = (t.split(group, dim=d) for t, d in ((x, 1), (padding, 0), (has_previous, 0)))
        outputs = []
        for i, piece in enumerate(pieces):
            mask, flag = masks[i], flags[i]
            if i > 0:  # the previous group's last chunk as context, its own predecessor not read
                piece = torch.cat([pieces[i - 1][:, -1:], piece], dim=1)
                mask, flag = torch.cat([masks[i - 1][-1:], mask]), torch.cat([flag.new_zeros(1), flag])
            out = layer(piece, BlockState(attention=ChunkWindow(*_predecessors(flag))), padding_mask=mask).x
            outputs.append(out[:, 1:] if i > 0 else out)
        return torch.cat(outputs, dim=1)

    def smooth(self, states: Tensor) -> Tensor:
        """The memory gate on ``(bsz, L, e)`` (zeros at padding) → float32 ``(bsz, L, e)``."""
        return states.float() if self.memory_gate is None else self.memory_gate(states)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                **unused):
        """
        Args:
            src_tokens: ``(bsz, S)`` token ids, left or right padded; any S.
            src_lengths: ignored (lengths are recomputed from the padding).
        Returns:
            dict (fairseq's list-of-tensors convention): ``encoder_out``
            ``[(W, bsz, e)]`` the lead window, ``encoder_padding_mask``
            ``[(bsz, W)]`` (both empty lists when W = 0),
            ``memory_coefficients`` ``[(bsz, N, e)]`` float32 (the paper's B;
            empty with ``--no-document-memory``), ``src_lengths`` ``[(bsz,)]`` real
            tokens per document, and empty ``encoder_embedding``, ``encoder_states``,
            ``src_tokens``. Nothing in it grows with the source length, except with
            ``--retrieval-topk``: then also ``document_states`` ``[(L, bsz, e)]``, every
            encoder state, and ``document_padding_mask`` ``[(bsz, L)]``.
        Raises:
            ConfigError: an empty source, or a source of padding only.
        """
        packed, lengths, chunk_valid, has_previous = self._chunks(src_tokens)
        real_lengths = lengths
        if self.read_limit is not None:
            packed, chunk_valid, has_previous, lengths = self._first_chunks(packed, chunk_valid, has_previous, lengths)
        bsz, num_max = chunk_valid.shape
        chunk = self.chunk_length
        padding = packed.eq(self.padding_idx)  # (K, C)
        x = self.embed_scale * self.embed_tokens(packed)
        if self.absolute_positions:  # each token's place in its document: chunk j's token i is at j·C + i
            chunk_index = torch.arange(num_max, device=packed.device)[None, :].expand(bsz, -1)[chunk_valid]
            x = x + sinusoid(chunk_index[:, None] * chunk + torch.arange(chunk, device=packed.device), x.size(-1))
        x = self.dropout_module(x).transpose(0, 1)  # (C, K, e)
        for layer in self.layers:
            x = self._layer_in_groups(layer, x, padding, has_previous)
        x = self.layer_norm(x).masked_fill(padding.t()[..., None], 0.0)

        # back to documents: (bsz, n_max·C, e), zeros at padding
        slots = chunk_valid.reshape(-1).nonzero().squeeze(1)
        states = x.new_zeros(bsz * num_max, chunk, self.embed_dim).index_copy(0, slots, x.transpose(0, 1))
        states = states.view(bsz, num_max * chunk, self.embed_dim)
        max_len = int(lengths.max())
        out = {
            "memory_coefficients": [],
            "encoder_out": [],
            "encoder_padding_mask": [],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [real_lengths],
        }
        if self.signal is not None:
            out["memory_coefficients"] = [self.signal.fit(self.smooth(states[:, :max_len]), lengths)]
        if self.keep_states:
            out["document_states"] = [states[:, :max_len].transpose(0, 1)]  # (L, bsz, e)
            out["document_padding_mask"] = [torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]]
        if self.lead_window > 0:
            window = self.lead_window
            lead = states[:, :window]
            if lead.size(1) < window:
                lead = F.pad(lead, (0, 0, 0, window - lead.size(1)))
            positions = torch.arange(window, device=lengths.device)
            out["encoder_out"] = [lead.transpose(0, 1)]  # (W, bsz, e)
            out["encoder_padding_mask"] = [positions[None, :] >= lengths[:, None]]  # (bsz, W)
        return out
