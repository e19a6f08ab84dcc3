"""``infinite_former_lm``: a causal ∞-former language model for fairseq.

Martins, Marinho & Martins, "∞-former: Infinite Memory Transformer", ACL 2022
(docs/design/infinite-former.md). Each block attends causally to the current
segment plus a short-term memory of the previous ``mem_len`` attention inputs
(:class:`~fairseq_plugins.modules.rotary_attention.ShortTermMemoryAttention`) and
adds a read of its continuous long-term memory
(:class:`~fairseq_plugins.modules.long_term_memory.LongTermMemory`).
``--no-long-term-memory`` gives the Transformer-XL-style twin with the same code.

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

import torch
from fairseq.models import FairseqLanguageModel, register_model
from fairseq.dataclass import ChoiceEnum
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.config import (AttentionDropoutConfig, BlockConfig, ContinuousMemoryConfig, DecoderSizeConfig,
                                    check_positive, check_sizes, parse_widths, register_named_architecture, sizes)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import SegmentIncrementalDecoder, build_embedding
from fairseq_plugins.models.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.inference import EveryExampleMixin
from fairseq_plugins.modules.block import LEGACY_STATE_NAMES, MEMORY_INPUTS, BlockState, FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous_signal import ContinuousBasis
from fairseq_plugins.modules.long_term_memory import LongTermMemory
from fairseq_plugins.modules.memory_bank import MemoryBank, StreamingMemoryModel
from fairseq_plugins.modules.rotary_attention import ShortTermMemoryAttention


@dataclass
class LongTermMemoryConfig(ContinuousMemoryConfig):
    """The LM memory's update (docs/design/infinite-former.md §3-§4)."""

    no_long_term_memory: bool = field(
        default=False, metadata={"help": "switch the continuous long-term memory off (Transformer-XL-style twin)"})
    no_sticky_memories: bool = field(
        default=False, metadata={"help": "sample the old memory uniformly instead of where attention went"})
    tau: float = field(default=0.5, metadata={"help": "τ in (0,1): share of [0,1] kept for the old memory "
                                                      "at each update (paper LM: 0.5)"})
    num_samples: int = field(default=512, metadata={"help": "M samples of the old signal per update (paper: 512)"})
    sticky_bins: int = field(default=128, metadata={"help": "D histogram bins of sticky memories (paper: 128)"})
    ltm_input: ChoiceEnum(MEMORY_INPUTS) = field(
        default="segment", metadata={"help": "what enters the long-term memory after each segment: 'segment' "
                                             "(the segment just read, which also enters the short-term memory) "
                                             "or 'evicted' (what leaves the short-term memory, as the paper's "
                                             "code: with --mem-len = segment length the segment before)"})


@dataclass
class InfiniteFormerLMConfig(LongTermMemoryConfig, AttentionDropoutConfig, BlockConfig, DecoderSizeConfig):
    segment_length: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "tokens per segment L processed at once (default: the task's --tokens-per-sample)"})
    mem_len: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "short-term memory: previous positions each layer attends to (0: none; "
                          "default: the task's --tokens-per-sample)"})


def validate_config(cfg: InfiniteFormerLMConfig) -> None:
    """One-line errors for inconsistent options (raised before any allocation; the
    long-term memory checks N, M, τ, λ and the widths when it is built)."""
    check_sizes(cfg)
    check_positive(cfg.segment_length, "--tokens-per-sample (the segment length)")
    check_positive(cfg.mem_len, "--mem-len", allow_zero=True)


def build_long_term_memory(cfg, embed_dim: int, num_heads: int, basis: ContinuousBasis) -> LongTermMemory:
    """One layer's long-term memory with ``cfg``'s options, on the model's shared basis."""
    return LongTermMemory(embed_dim, num_heads, tau=cfg.tau, num_samples=cfg.num_samples,
                          sticky=not cfg.no_sticky_memories, sticky_bins=cfg.sticky_bins,
                          sigma2_min=cfg.sigma2_min, basis=basis)


class InfiniteFormerDecoder(SegmentIncrementalDecoder):
    """Blocks of attention over short-term memory + segment, FFN and long-term memory,
    run segment by segment with one memory per stream key (see the module docstring).

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
            basis = None if cfg.no_long_term_memory else build_basis(cfg)  # one for every layer
            layers = nn.ModuleList(build_block(cfg, basis) for _ in range(cfg.decoder_layers))
        super().__init__(dictionary, embed_tokens, layers, dropout=cfg.dropout,
                         no_scale_embedding=cfg.no_scale_embedding,
                         share_input_output_embed=cfg.share_decoder_input_output_embed, max_positions=int(1e9))
        self.cfg = cfg
        self.segment_length = cfg.segment_length
        # one list of per-layer states per stream key, between calls; never in the state_dict
        self.memory_bank = MemoryBank(BlockState, legacy_names=LEGACY_STATE_NAMES)

    def extract_features(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                         return_all_hiddens: bool = False, memory_key: Optional[str] = None,
                         reset_memory: Optional[Tensor] = None, **unused):
        """
        Args:
            prev_output_tokens: ``(bsz, T)`` token ids; any T (split into segments).
            memory_key: keep the memory between calls under this key (the streaming
                task passes its split name); ``None``: start empty and keep nothing.
            reset_memory: ``(bsz,)`` bool, slots whose stream starts here.
        Returns:
            ``(features (bsz, T, C), extra)``; ``extra["ltm_stats"]`` lists, per layer and
            segment, the long-term memory reads' ``ReadStats`` (for the KL term).
        """
        if incremental_state is not None:
            return self.extract_incremental(prev_output_tokens, incremental_state)
        bsz, total_len = prev_output_tokens.shape
        states = self.memory_bank.get(memory_key, bsz, reset_memory)
        if states is None:
            states = [layer.empty_state(bsz, prev_output_tokens.device) for layer in self.layers]
        x, _, _ = self.embed(prev_output_tokens)  # (T, bsz, C); padding attends as any token
        outputs, ltm_stats = [], []
        for start in range(0, total_len, self.segment_length):
            h = x[start:start + self.segment_length]  # (L, bsz, C)
            for i, layer in enumerate(self.layers):
                out = layer(h, states[i])
                h, states[i] = out.x, out.state
                ltm_stats.extend(out.stats)
            outputs.append(h)
        x = self.layer_norm(torch.cat(outputs, dim=0)) if outputs else self.layer_norm(x)
        self.memory_bank.put(memory_key, states)
        inner_states = [x] if return_all_hiddens else []
        return x.transpose(0, 1), {"ltm_stats": ltm_stats, "inner_states": inner_states, "attn": [None]}

    # ---- incremental decoding (docs/generation.md): SegmentIncrementalDecoder's loop ----

    def check_incremental(self) -> None:
        for layer in self.layers:
            if not isinstance(layer.self_attn, ShortTermMemoryAttention):
                raise ConfigError("incremental decoding needs the short-term-memory attention in every block; "
                                  "score without incremental_state")


def build_basis(cfg: ContinuousMemoryConfig) -> ContinuousBasis:
    """The continuous memory's basis from ``cfg`` (N, widths, λ, boundary padding)."""
    return ContinuousBasis(cfg.num_basis_functions, parse_widths(cfg.basis_widths), cfg.ridge_penalty,
                           not cfg.no_boundary_padding)


def build_block(cfg: InfiniteFormerLMConfig, basis: Optional[ContinuousBasis]) -> PreNormBlock:
    """One ∞-former block (``basis`` is ``None`` with ``--no-long-term-memory``): the long-term
    memory is created first, then the attention and the FFN (the parameter order of
    earlier versions, so that a seed gives the same initial weights)."""
    embed_dim, heads = cfg.decoder_embed_dim, cfg.decoder_attention_heads
    memory = None if basis is None else build_long_term_memory(cfg, embed_dim, heads, basis)
    attention = ShortTermMemoryAttention(embed_dim, heads, cfg.mem_len, attention_dropout=cfg.attention_dropout)
    ffn = FeedForward(embed_dim, cfg.decoder_ffn_embed_dim, cfg.activation_fn, cfg.activation_dropout)
    return PreNormBlock(embed_dim, attention, ffn, memory=memory, dropout=cfg.dropout, memory_input=cfg.ltm_input)


@register_model("infinite_former_lm", dataclass=InfiniteFormerLMConfig)
class InfiniteFormerLanguageModel(EveryExampleMixin, DictionaryCheckMixin, StreamingMemoryModel, FairseqLanguageModel):
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
    "infinite_former_lm", "infinite_former_lm_gpt2_small",
    "GPT-2-small-sized model of the paper's fine-tuning runs (use --tokens-per-sample 512).",
    **sizes("decoder", 12, 768, 12, 3072), mem_len=512, num_basis_functions=512, num_samples=512, dropout=0.1,
    activation_fn="gelu")
