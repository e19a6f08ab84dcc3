"""``infinite_former_summarizer``: a long-document encoder–decoder whose decoder
reads the whole source through the ∞-former's continuous memory (Martins et
al., ACL 2022, §3: ridge fit onto N Gaussian basis functions, eq. 7, and
continuous attention, eqs. 8–10), so that the decoder's cost and state do not
depend on the length of the source.

Encoder (cost linear in the source length L):

* the real tokens of each row are read in order (left or right padding alike:
  padding is removed first, so chunk boundaries and every output of a real
  example do not depend on how much padding its batch needs);
* the document is cut into chunks of ``--encoder-chunk-length`` C tokens; a
  chunk's tokens attend to the tokens of the same chunk and of the previous
  chunk of the same document (``--no-previous-chunk``: the same chunk only),
  so each chunk costs O(C²) and the document O(L·C). Chunks of all documents
  of the batch are packed into one batch of chunks (no work on padding
  chunks);
* positions are rotary, relative inside the attention window (no maximum
  length); the global position of a token reaches the decoder through the
  basis position (i + ½)/L of its state in the memory;
* pre-norm blocks (self-attention, FFN), final LayerNorm.

Memory: the top encoder states of the whole document, gated by
X ⊙ sigmoid(Conv1d(X)) (paper §3.3; ``--no-memory-gate`` drops it), are
fitted by ridge regression (λ = ``--ridge-penalty``, zero padding at both
ends as in the LM) onto ``--num-basis-functions`` N Gaussian RBFs at positions
(i + ½)/L: B ∈ R^{N×e} per document, whatever L
(:func:`~fairseq_plugins.modules.continuous.fit.fit_sequences`). The fit is
differentiable: the encoder learns through it.

Decoder (cost per step independent of L): pre-norm blocks of causal
self-attention (fairseq's ``MultiheadAttention``, sinusoidal or learned
absolute positions), cross-attention = continuous Gaussian attention over B
(:class:`~fairseq_plugins.modules.attention.continuous_cross.ContinuousCrossAttention`,
one per layer) plus, when ``--lead-window`` W > 0, ordinary multi-head
attention over the first W encoder states (the lead of the document, always
W slots, masked beyond a shorter document), the two summed; then FFN. The
decoder returns ``extra["ltm_stats"]`` (per layer ``(μ, σ², valid)``) so that
``--criterion infinite_former_kl`` adds the variance KL (§3.4).

Generation: the encoder output holds only fixed-size tensors (B, the lead
window and its mask, the source lengths), reordered by
:meth:`InfiniteFormerSummarizerEncoder.reorder_encoder_out`; the decoder keeps
its self-attention cache, the lead window's keys/values and the memory's
keys/values in fairseq's ``incremental_state``. Works with the ``translation``
task, ``fairseq-generate`` and beam search. The source is never truncated:
set the task's ``--max-source-positions`` above the longest document.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum
from fairseq.models import FairseqEncoderDecoderModel, register_model
from fairseq.modules import PositionalEmbedding
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.config import (ContinuousMemoryConfig, EncoderDecoderConfig, check_not_empty, check_positive,
                                    check_sizes, register_named_architecture, sizes)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import PreNormDecoder, PreNormEncoder, build_embeddings
from fairseq_plugins.modules.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.inference import EveryExampleMixin
from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention
from fairseq_plugins.modules.attention.document import (LEAD_JOINS, DocumentMemoryAttention, JointDocumentAttention,
                                                        TopKAttention)
from fairseq_plugins.modules.attention.multihead import EncoderDecoderAttention, SelfAttention
from fairseq_plugins.modules.attention.rotary import ChunkWindow, ChunkWindowAttention
from fairseq_plugins.modules.block import BlockState, FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis, SmoothingGate


@dataclass
class InfiniteFormerSummarizerConfig(ContinuousMemoryConfig, EncoderDecoderConfig):
    encoder_chunk_length: int = field(
        default=256, metadata={"help": "C: the source is read in chunks of C tokens; encoder self-attention stays "
                                       "inside a chunk (and the previous one), so its cost is linear in the length"})
    no_previous_chunk: bool = field(
        default=False, metadata={"help": "encoder tokens attend to their own chunk only (default: also to the "
                                         "previous chunk of the document)"})
    decoder_learned_pos: bool = field(default=False, metadata={"help": "learned decoder positions"})
    lead_window: int = field(
        default=256, metadata={"help": "W: the decoder also attends (ordinary attention) to the first W encoder "
                                       "states of the document, beside the continuous memory; 0 disables"})
    num_basis_functions: int = field(
        default=256, metadata={"help": "N Gaussian basis functions of the document memory B (N x width, any "
                                       "source length)"})
    no_memory_gate: bool = field(
        default=False, metadata={"help": "fit the encoder states without the smoothing gate X*sigmoid(conv(X))"})
    memory_wiped: bool = field(
        default=False, metadata={"help": "evaluation control: every decoder read of the document memory sees an "
                                         "empty memory and adds nothing (the lead window is kept); summaries "
                                         "generated with and without it (--model-overrides \"{'memory_wiped': "
                                         "True}\") measure what the memory contributes; the parameters are "
                                         "unchanged"})
    no_document_memory: bool = field(
        default=False, metadata={"help": "no continuous memory B: the decoder reads the lead window (and the top-k "
                                         "read, if any) only, and the encoder reads only the chunks the lead "
                                         "window needs; the lead-only twin"})
    read_gate: bool = field(
        default=False, metadata={"help": "scale each decoder layer's continuous read by tanh(alpha), alpha a "
                                         "scalar initialised at 0, so the untrained read adds nothing (with "
                                         "--lead-join sum)"})
    lead_join: ChoiceEnum(LEAD_JOINS) = field(
        default="sum", metadata={"help": "how the continuous read and the lead window are put together: 'sum' "
                                         "(two attentions, outputs added) or 'softmax' (one attention: the read "
                                         "is one more slot in the lead window's softmax)"})
    retrieval_topk: int = field(
        default=0, metadata={"help": "k > 0: each decoder head also attends to its k best-matching encoder "
                                     "states of the whole document (exact top-k retrieval, Unlimiformer; keeps "
                                     "every encoder state); 0 disables"})
    max_source_positions: int = II("task.max_source_positions")
    max_target_positions: int = II("task.max_target_positions")


def validate_config(cfg) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    check_sizes(cfg, ("encoder", "decoder"))
    check_positive(cfg.encoder_chunk_length, "--encoder-chunk-length")
    check_positive(cfg.lead_window, "--lead-window", allow_zero=True, note=" (0 disables it)")
    check_positive(cfg.ridge_penalty, "--ridge-penalty (λ)")
    check_positive(cfg.sigma2_min, "--sigma2-min")
    check_positive(cfg.retrieval_topk, "--retrieval-topk", allow_zero=True, note=" (0 disables it)")
    if cfg.no_document_memory:
        if cfg.lead_window == 0 and cfg.retrieval_topk == 0:
            raise ConfigError("--no-document-memory with --lead-window 0 reads nothing of the document; give "
                              "--lead-window W > 0 or --retrieval-topk k")
        for flag, given in (("--read-gate", cfg.read_gate), ("--lead-join softmax", cfg.lead_join == "softmax"),
                            (f"--memory-read {cfg.memory_read}", cfg.memory_read != "location"),
                            ("--memory-wiped", cfg.memory_wiped)):
            if given:
                raise ConfigError(f"{flag} applies to the document memory, which --no-document-memory removes; "
                                  f"drop one of the two")
    if cfg.lead_join == "softmax":
        if cfg.lead_window == 0:
            raise ConfigError("--lead-join softmax joins the read with the lead window; give --lead-window W > 0 "
                              "or use --lead-join sum")
        if cfg.read_gate:
            raise ConfigError("--read-gate scales a read that is summed (--lead-join sum); with --lead-join softmax "
                              "the read competes inside the softmax: drop --read-gate")
    if cfg.share_all_embeddings and cfg.encoder_embed_dim != cfg.decoder_embed_dim:
        raise ConfigError(f"--share-all-embeddings needs --encoder-embed-dim ({cfg.encoder_embed_dim}) equal to "
                          f"--decoder-embed-dim ({cfg.decoder_embed_dim})")


# ---- encoder ------------------------------------------------------------------


def _predecessors(has_previous: Tensor):
    """``(previous, has_previous)`` of a run of consecutive packed chunks: each chunk's
    predecessor is the chunk before it (index 0 where it has none)."""
    previous = (torch.arange(has_previous.numel(), device=has_previous.device) - 1).clamp_min(0)
    return previous, has_previous


def _draws_random_numbers(layer: nn.Module) -> bool:
    """Whether ``layer`` in its current mode draws from torch's generator (an active dropout)."""
    return layer.training and any(getattr(m, "p", 0) > 0 or getattr(m, "attention_dropout", 0) > 0
                                  for m in layer.modules())


class InfiniteFormerSummarizerEncoder(PreNormEncoder):
    """Chunked encoder + continuous memory of the whole document (see the module docstring).

    Args:
        cfg: the model's config; dictionary, embed_tokens: the source side.
        basis: the memory's basis, shared with the decoder's reads.
    """

    def __init__(self, cfg: InfiniteFormerSummarizerConfig, dictionary, embed_tokens: nn.Embedding,
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
        x = self.dropout_module(self.embed_scale * self.embed_tokens(packed)).transpose(0, 1)  # (C, K, e)
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


# ---- decoder ------------------------------------------------------------------


def build_document_attention(cfg: InfiniteFormerSummarizerConfig, basis: ContinuousBasis) -> nn.Module:
    """The decoder's cross-attention over the document (:mod:`~fairseq_plugins.modules.attention.document`):
    the continuous read of B (unless ``--no-document-memory``), the lead window's attention
    (W > 0) and the top-k read (k > 0), summed, or the read and the lead window in one softmax
    (``--lead-join softmax``)."""
    dim, heads, memory_dim = cfg.decoder_embed_dim, cfg.decoder_attention_heads, cfg.encoder_embed_dim
    retrieval = TopKAttention(dim, heads, memory_dim, cfg.retrieval_topk) if cfg.retrieval_topk > 0 else None
    if cfg.lead_join == "softmax":
        joint = JointDocumentAttention(dim, heads, memory_dim, basis, read=cfg.memory_read, sigma2_min=cfg.sigma2_min,
                                       wiped=cfg.memory_wiped)
        return joint if retrieval is None else DocumentMemoryAttention(joint, retrieval=retrieval)
    memory_attn = None
    if not cfg.no_document_memory:
        memory_attn = ContinuousCrossAttention(dim, heads, memory_dim, basis, sigma2_min=cfg.sigma2_min,
                                               wiped=cfg.memory_wiped, read=cfg.memory_read)
    lead_attn = None
    if cfg.lead_window > 0:
        lead_attn = EncoderDecoderAttention(dim, heads, memory_dim, dropout=cfg.attention_dropout)
    return DocumentMemoryAttention(memory_attn, lead_attn, retrieval, gated=cfg.read_gate)


def build_decoder_block(cfg: InfiniteFormerSummarizerConfig, basis: ContinuousBasis) -> PreNormBlock:
    """Causal self-attention; the cross-attention over the document
    (:func:`build_document_attention`); FFN (created in that order)."""
    dim, heads = cfg.decoder_embed_dim, cfg.decoder_attention_heads
    self_attn = SelfAttention(dim, heads, dropout=cfg.attention_dropout)
    cross = build_document_attention(cfg, basis)
    ffn = FeedForward(dim, cfg.decoder_ffn_embed_dim, cfg.activation_fn, cfg.activation_dropout)
    return PreNormBlock(dim, self_attn, ffn, cross_attention=cross, dropout=cfg.dropout)


# ---- model ----------------------------------------------------------------------


@register_model("infinite_former_summarizer", dataclass=InfiniteFormerSummarizerConfig)
class InfiniteFormerSummarizerModel(EveryExampleMixin, DictionaryCheckMixin, FairseqEncoderDecoderModel):
    """Long-document summarizer on the ∞-former memory (see the module docstring).

    The decoder returns ``extra["ltm_stats"]`` (per layer the memory read's
    ``ReadStats``) so that ``--criterion infinite_former_kl`` adds the variance KL.
    """

    @classmethod
    def build_model(cls, cfg: InfiniteFormerSummarizerConfig, task):
        validate_config(cfg)
        basis = ContinuousBasis.from_config(cfg)  # one object for the encoder's fit and every decoder read
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed, decoder_embed = build_embeddings(cfg, task)
        encoder = InfiniteFormerSummarizerEncoder(cfg, src_dict, encoder_embed, basis)
        dim = cfg.decoder_embed_dim
        positions = PositionalEmbedding(cfg.max_target_positions, dim, tgt_dict.pad(), learned=cfg.decoder_learned_pos)
        layers = nn.ModuleList(build_decoder_block(cfg, basis) for _ in range(cfg.decoder_layers))
        decoder = PreNormDecoder(tgt_dict, decoder_embed, layers, embed_positions=positions, dropout=cfg.dropout,
                                 no_scale_embedding=cfg.no_scale_embedding,
                                 share_input_output_embed=cfg.share_decoder_input_output_embed or cfg.share_all_embeddings,
                                 max_positions=cfg.max_target_positions)
        model = cls(encoder, decoder)
        model.remember_dictionaries(src_dict, tgt_dict)
        return model


# ---- named architectures ----------------------------------------------------
# ``--arch infinite_former_summarizer`` is the tiny default of the config
# (2+2 blocks, width 128, 4 heads, FFN 512, N = 256, C = W = 256).


register_named_architecture(
    "infinite_former_summarizer", "infinite_former_summarizer_base",
    "6+6 blocks, width 512, 8 heads, FFN 2048 (transformer-base sized), N = 512 (paper).",
    **sizes("encoder", 6, 512, 8, 2048), **sizes("decoder", 6, 512, 8, 2048), num_basis_functions=512)
