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

from fairseq.dataclass import ChoiceEnum
from fairseq.models import FairseqEncoderDecoderModel, register_model
from fairseq.modules import PositionalEmbedding
from omegaconf import II
from torch import nn

from fairseq_plugins.config import (ContinuousMemoryConfig, EncoderDecoderConfig, check_positive, check_sizes,
                                    register_named_architecture, sizes)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import PreNormDecoder, build_embeddings
from fairseq_plugins.models.document_encoder import ENCODER_POSITIONS, InfiniteFormerSummarizerEncoder
from fairseq_plugins.modules.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.inference import EveryExampleMixin
from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention
from fairseq_plugins.modules.attention.document import (LEAD_JOINS, DocumentMemoryAttention, JointDocumentAttention,
                                                        TopKAttention)
from fairseq_plugins.modules.attention.multihead import EncoderDecoderAttention, SelfAttention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.continuous.read import READS


@dataclass
class InfiniteFormerSummarizerConfig(ContinuousMemoryConfig, EncoderDecoderConfig):
    memory_read: ChoiceEnum(READS) = field(
        default="mixture", metadata={"help": "how the decoder reads the document memory: 'mixture' (the default: "
                                             "a softmax over the N basis scores weighting the basis functions' "
                                             "Gaussians, the read that learns to retrieve, docs/results/copy.md), "
                                             "'location' (the paper's: one Gaussian at mu = sigmoid(w_mu . s)) or "
                                             "'content' (one Gaussian at the mean of the basis centres under the "
                                             "softmax); a checkpoint keeps the read it was trained with"})
    encoder_chunk_length: int = field(
        default=256, metadata={"help": "C: the source is read in chunks of C tokens; encoder self-attention stays "
                                       "inside a chunk (and the previous one), so its cost is linear in the length"})
    no_previous_chunk: bool = field(
        default=False, metadata={"help": "encoder tokens attend to their own chunk only (default: also to the "
                                         "previous chunk of the document)"})
    decoder_learned_pos: bool = field(default=False, metadata={"help": "learned decoder positions"})
    encoder_positions: ChoiceEnum(ENCODER_POSITIONS) = field(
        default="relative", metadata={"help": "'relative': rotary positions inside the encoder's attention window "
                                              "only (the lead window's states then carry no place in the "
                                              "document); 'absolute': also each token's place in the document, "
                                              "sinusoidal, added to its embedding (as fairseq's transformer)"})
    lead_window: int = field(
        default=256, metadata={"help": "W: the decoder also attends (ordinary attention) to the first W encoder "
                                       "states of the document, beside the continuous memory; 0 disables"})
    num_basis_functions: int = field(
        default=256, metadata={"help": "N Gaussian basis functions of the document memory B (N x width, any "
                                       "source length)"})
    no_memory_gate: bool = field(
        default=False, metadata={"help": "fit the encoder states without the smoothing gate X*sigmoid(conv(X))"})
    memory_wiped: bool = field(
        default=False, metadata={"help": "evaluation control: every decoder read of the document memory (and the "
                                         "top-k read) sees an empty memory and adds nothing (the lead window is "
                                         "kept); summaries "
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
    """One-line errors for inconsistent options (raised before any allocation).

    Raises:
        ConfigError: a size that is not positive, a ``--lead-window`` or ``--encoder-chunk-length``
            longer than any source (``--max-source-positions``), options of the document memory
            without it, a join that contradicts the lead window or the read gate.
    """
    check_sizes(cfg, ("encoder", "decoder"))
    check_positive(cfg.encoder_chunk_length, "--encoder-chunk-length")
    check_positive(cfg.lead_window, "--lead-window", allow_zero=True, note=" (0 disables it)")
    longest = cfg.max_source_positions
    if isinstance(longest, int) and not isinstance(longest, bool):  # the task's limit, once resolved
        for option, value, what in (("--lead-window", cfg.lead_window, "its last slots would only ever be padding"),
                                    ("--encoder-chunk-length", cfg.encoder_chunk_length,
                                     "no document would ever fill one chunk")):
            if value > longest:
                raise ConfigError(f"{option} {value} exceeds --max-source-positions {longest}, the longest source: "
                                  f"{what}; pass {option} {longest} or less, or raise --max-source-positions")
    check_positive(cfg.ridge_penalty, "--ridge-penalty (λ)")
    check_positive(cfg.sigma2_min, "--sigma2-min")
    check_positive(cfg.retrieval_topk, "--retrieval-topk", allow_zero=True, note=" (0 disables it)")
    if cfg.no_document_memory:
        if cfg.lead_window == 0 and cfg.retrieval_topk == 0:
            raise ConfigError("--no-document-memory with --lead-window 0 reads nothing of the document; give "
                              "--lead-window W > 0 or --retrieval-topk k")
        for flag, given in (("--read-gate", cfg.read_gate), ("--lead-join softmax", cfg.lead_join == "softmax"),
                            (f"--memory-read {cfg.memory_read}", cfg.memory_read != "mixture"),
                            ("--memory-wiped", cfg.memory_wiped and cfg.retrieval_topk == 0)):
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


# ---- decoder ------------------------------------------------------------------


def build_document_attention(cfg: InfiniteFormerSummarizerConfig, basis: ContinuousBasis) -> nn.Module:
    """The decoder's cross-attention over the document (:mod:`~fairseq_plugins.modules.attention.document`):
    the continuous read of B (unless ``--no-document-memory``), the lead window's attention
    (W > 0) and the top-k read (k > 0), summed, or the read and the lead window in one softmax
    (``--lead-join softmax``)."""
    dim, heads, memory_dim = cfg.decoder_embed_dim, cfg.decoder_attention_heads, cfg.encoder_embed_dim
    retrieval = None
    if cfg.retrieval_topk > 0:
        retrieval = TopKAttention(dim, heads, memory_dim, cfg.retrieval_topk, wiped=cfg.memory_wiped)
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
