"""``infinite_former_lm``: a causal ∞-former language model for fairseq.

Martins, Marinho & Martins, "∞-former: Infinite Memory Transformer", ACL 2022
(docs/design/infinite-former.md). Each block attends causally to the current
segment plus a short-term memory of the previous ``mem_len`` attention inputs
(:class:`~fairseq_plugins.modules.attention.rotary.ShortTermMemoryAttention`) and
adds a read of its continuous long-term memory
(:class:`~fairseq_plugins.modules.memory.continuous.LongTermMemory`).
``--no-long-term-memory`` gives the Transformer-XL-style twin with the same code, and
``--memory-type compressive`` (``--arch compressive_transformer_lm``) the Compressive
Transformer (Rae et al., ICLR 2020, §3): the same blocks with a compressed memory of what
leaves the short-term memory
(:class:`~fairseq_plugins.modules.memory.compressive.CompressiveMemory`), attended in the
attention's own softmax.

Memory across calls: when the streaming task
(:mod:`fairseq_plugins.tasks.streaming_language_modeling`) sends ``memory_key``
(and per-slot ``reset_memory`` flags) in ``net_input``, the decoder keeps one
memory per key in its :class:`~fairseq_plugins.modules.memory_bank.MemoryBank`
between calls — training and validation streams never mix. Without a key (stock
``language_modeling`` task, scoring) every call starts from an empty memory.
Inputs longer than ``segment_length`` are processed segment by segment inside one
call, so no input is too long for the model.

Generation (``fairseq-generate``, beam search, ``scripts/continue.sh``;
docs/generation.md): the decoder is a ``FairseqIncrementalDecoder``. With an
``incremental_state`` it processes the tokens of the prefix it has not seen yet —
one per step from fairseq's generator, or a whole prompt at once (chunked
prefill) — and keeps in ``incremental_state`` only what the segmented full
forward carries: per layer the short-term memory and the long-term memory state
the current segment started with, the current segment's attention inputs,
rotated keys and values, the long-term memory's K, V and the segment's read
Gaussians. Every token of a segment reads the same long-term memory; when the
segment holds ``segment_length`` tokens it is pushed exactly as in the full
forward. So incremental log-probs equal the full forward's, and the state has a
bounded size whatever the prompt length.
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import FairseqLanguageModel, register_model
from omegaconf import II
from torch import nn

from fairseq_plugins.config import (AttentionDropoutConfig, BlockConfig, CompressiveMemoryConfig, DecoderSizeConfig,
                                    LongTermMemoryConfig, check_positive, check_sizes, declared_defaults,
                                    register_named_architecture, sizes)
from fairseq_plugins.models.backbone import build_embedding
from fairseq_plugins.models.segment_decoder import SegmentIncrementalDecoder
from fairseq_plugins.models.hub import HubMixin
from fairseq_plugins.modules.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.inference import EveryExampleMixin
from fairseq_plugins.modules.attention.rotary import ShortTermMemoryAttention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.memory.registry import build_memory, check_memory_options, check_memory_read, shared_basis
from fairseq_plugins.modules.memory_bank import StreamingMemoryModel


@dataclass
class InfiniteFormerLMConfig(CompressiveMemoryConfig, LongTermMemoryConfig, AttentionDropoutConfig, BlockConfig,
                             DecoderSizeConfig):
    segment_length: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "tokens per segment L processed at once (default: the task's --tokens-per-sample)"})
    mem_len: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "short-term memory: previous positions each layer attends to (0: none; "
                          "default: the task's --tokens-per-sample)"})


def validate_config(cfg: InfiniteFormerLMConfig) -> None:
    """One-line errors for inconsistent options (raised before any allocation; the
    long-term memory checks N, M, τ, λ and the widths when it is built), and one warning line
    for the options of a memory the model does not build
    (:func:`~fairseq_plugins.modules.memory.registry.check_memory_options`).

    Raises:
        ConfigError: a size that is not positive, heads that do not divide the width, a
            ``--memory-read`` or ``--memory-type`` that the memory chosen (or its absence) contradicts.
    """
    check_sizes(cfg)
    check_positive(cfg.segment_length, "--tokens-per-sample (the segment length)")
    check_positive(cfg.mem_len, "--mem-len", allow_zero=True)
    check_memory_read(cfg)
    check_memory_options(cfg, declared_defaults("infinite_former_lm"))


class InfiniteFormerDecoder(SegmentIncrementalDecoder):
    """Blocks of attention over short-term memory + segment, FFN and long-term memory,
    run segment by segment with one memory per stream key (see the module docstring;
    both segment loops are :class:`SegmentIncrementalDecoder`'s).

    Args:
        cfg: the model's config; dictionary: the target dictionary; embed_tokens: the
            input embedding.
        layers: the blocks, if built elsewhere (e.g. with another attention); default:
            the ∞-former's blocks from ``cfg``.
    """

    def __init__(self, cfg: InfiniteFormerLMConfig, dictionary, embed_tokens: nn.Embedding,
                 layers: Optional[nn.ModuleList] = None):
        validate_config(cfg)
        if layers is None:
            basis = shared_basis(cfg)  # one for every layer, if the memory reads one
            layers = nn.ModuleList(build_block(cfg, basis) for _ in range(cfg.decoder_layers))
        super().__init__(dictionary, embed_tokens, layers, segment_length=cfg.segment_length,
                         short_term_memory_length=cfg.mem_len, dropout=cfg.dropout,
                         no_scale_embedding=cfg.no_scale_embedding,
                         share_input_output_embed=cfg.share_decoder_input_output_embed, max_positions=int(1e9))
        self.cfg = cfg


def build_block(cfg: InfiniteFormerLMConfig, basis: Optional[ContinuousBasis]) -> PreNormBlock:
    """One ∞-former block (``basis``: the continuous memory's, ``None`` without one): the long-term
    memory is created first, then the attention and the FFN: the creation order a seed's
    initial weights depend on."""
    embed_dim, heads = cfg.decoder_embed_dim, cfg.decoder_attention_heads
    memory = build_memory(cfg, embed_dim, heads, basis)
    attention = ShortTermMemoryAttention(embed_dim, heads, cfg.mem_len, attention_dropout=cfg.attention_dropout)
    ffn = FeedForward(embed_dim, cfg.decoder_ffn_embed_dim, cfg.activation_fn, cfg.activation_dropout)
    return PreNormBlock(embed_dim, attention, ffn, memory=memory, dropout=cfg.dropout, memory_input=cfg.ltm_input)


@register_model("infinite_former_lm", dataclass=InfiniteFormerLMConfig)
class InfiniteFormerLanguageModel(HubMixin, EveryExampleMixin, DictionaryCheckMixin, StreamingMemoryModel,
                                  FairseqLanguageModel):
    """∞-former language model (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: InfiniteFormerLMConfig, task):
        embed_tokens = build_embedding(task.source_dictionary, cfg.decoder_embed_dim)
        model = cls(InfiniteFormerDecoder(cfg, task.target_dictionary, embed_tokens))
        model.remember_dictionaries(task.target_dictionary)
        return model


# ---- named architectures ----------------------------------------------------


register_named_architecture(
    "infinite_former_lm", "infinite_former_lm_wiki103",
    "Paper §4.2 from-scratch WikiText-103 model (use --tokens-per-sample 150).",
    **sizes("decoder", 16, 410, 10, 2100), mem_len=150, num_basis_functions=150, num_samples=150, dropout=0.1)
register_named_architecture(
    "infinite_former_lm", "compressive_transformer_lm",
    "Compressive Transformer (Rae et al., ICLR 2020, §3): short-term memory + a compressed memory of what leaves it, "
    "attended in one softmax; the default sizes of infinite_former_lm.",
    memory_type="compressive", ltm_input="evicted")
register_named_architecture(
    "infinite_former_lm", "infinite_former_lm_gpt2_small",
    "GPT-2-small-sized model of the paper's fine-tuning runs (use --tokens-per-sample 512).",
    **sizes("decoder", 12, 768, 12, 3072), mem_len=512, num_basis_functions=512, num_samples=512, dropout=0.1,
    activation_fn="gelu")
