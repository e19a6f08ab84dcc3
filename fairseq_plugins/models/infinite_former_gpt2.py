"""``infinite_former_gpt2``: GPT-2 with the ∞-former's unbounded long-term memory.

Martins, Marinho & Martins, "∞-former: Infinite Memory Transformer", ACL 2022, §4.2;
docs/design/gpt2.md. GPT-2's block exactly (learned absolute positions, pre-norm,
GELU with the tanh approximation, final LayerNorm, tied input/output embeddings,
LayerNorm ε 1e-5, biased projections), with the paper's setting: the input is cut into
blocks of ``--tokens-per-sample`` tokens, each block attends only to itself with
positions 0..L-1 (:class:`~fairseq_plugins.modules.attention.gpt2.GPT2Attention`,
:class:`~fairseq_plugins.modules.attention.gpt2.BlockPositions`), and every layer's
:class:`~fairseq_plugins.modules.memory.continuous.LongTermMemory` holds all earlier
blocks: the residual-stream input (before ``ln_1``, detached) of the previous block
enters it when the next block begins, and its read W_O^LTM z joins the attention output
after ``c_proj``. W_O^LTM starts at zero, so a model converted from Hugging Face
(``fairseq-longmem gpt2 convert``) computes exactly GPT-2 before fine-tuning;
``--no-long-term-memory`` is the GPT-2 baseline with the same weights.

Vocabulary (fairseq's GPT-2 BPE convention, docs/design/gpt2.md §5): the dictionary's
symbols are GPT-2 token ids in decimal; fairseq's ``</s>`` is GPT-2's ``<|endoftext|>``.
``<s>``, ``<pad>``, ``<unk>`` (and any ``madeupword``) are not GPT-2 tokens: their logits
are −∞, so the log-probabilities over GPT-2's tokens are GPT-2's own.

Memory across calls works as in ``infinite_former_lm``: the ``streaming_lm`` task sends
``memory_key``/``reset_memory`` and the decoder's
:class:`~fairseq_plugins.modules.memory_bank.MemoryBank` keeps one memory per key.

Generation (docs/generation.md, "GPT-2"; docs/gpt2.md): the decoder is incremental, as
``infinite_former_lm``'s (:class:`~fairseq_plugins.models.segment_decoder.SegmentIncrementalDecoder`).
Per layer ``incremental_state`` holds the keys and values of the current, partly
filled block, its residual-stream inputs so far and the long-term memory the block
reads; when the block is full it enters the memory exactly as in the full forward,
so incremental log-probs equal the full forward's.
"""

import logging
import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqLanguageModel, register_model
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.config import (CompressiveMemoryConfig, LongTermMemoryConfig, check_positive, check_sizes,
                                    register_named_architecture,
                                    sizes)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.segment_decoder import SegmentIncrementalDecoder
from fairseq_plugins.models.hub import HubMixin
from fairseq_plugins.modules.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.inference import EveryExampleMixin
from fairseq_plugins.modules.attention.gpt2 import BlockPositions, GPT2Attention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.memory.registry import build_memory, check_memory_read, shared_basis
from fairseq_plugins.modules.memory_bank import StreamingMemoryModel

logger = logging.getLogger(__name__)
INIT_STD = 0.02  # GPT-2's initializer_range


@dataclass
class GPT2SizeConfig(FairseqDataclass):
    """GPT-2's sizes (defaults: GPT-2 small, 124M parameters)."""

    decoder_layers: int = field(default=12, metadata={"help": "blocks (GPT-2 n_layer)"})
    decoder_embed_dim: int = field(default=768, metadata={"help": "width (GPT-2 n_embd)"})
    decoder_attention_heads: int = field(default=12, metadata={"help": "heads (GPT-2 n_head; must divide the width)"})
    decoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "feed-forward width (GPT-2 n_inner, 4 × width)"})
    max_positions: int = field(
        default=1024, metadata={"help": "rows of the learned position table (GPT-2 n_positions); "
                                        "--tokens-per-sample may not exceed it"})


@dataclass
class GPT2BlockConfig(FairseqDataclass):
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu_accurate", metadata={"help": "FFN activation (GPT-2: gelu_accurate, the tanh approximation)"})
    dropout: float = field(default=0.1, metadata={"help": "embedding and residual dropout (GPT-2: 0.1)"})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout on attention weights (GPT-2: 0.1)"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})


@dataclass
class InfiniteFormerGPT2Config(GPT2BlockConfig, CompressiveMemoryConfig, LongTermMemoryConfig, GPT2SizeConfig):
    segment_length: int = field(
        default=II("task.tokens_per_sample"),
        metadata={"help": "tokens per block L, attended to at once with positions 0..L-1 (default: the "
                          "task's --tokens-per-sample)"})


def validate_config(cfg: InfiniteFormerGPT2Config) -> None:
    """One-line errors before any allocation."""
    check_sizes(cfg)
    check_positive(cfg.max_positions, "--max-positions")
    check_positive(cfg.segment_length, "--tokens-per-sample (the block length)")
    if cfg.segment_length > cfg.max_positions:
        raise ConfigError(f"--tokens-per-sample ({cfg.segment_length}) exceeds GPT-2's position table "
                          f"({cfg.max_positions} positions); use --tokens-per-sample {cfg.max_positions} or less")
    check_memory_read(cfg)


def build_block(cfg: InfiniteFormerGPT2Config, basis: Optional[ContinuousBasis]) -> PreNormBlock:
    """One GPT-2 block with GPT-2's initialisation (N(0, 0.02); the residual output
    projections ``c_proj`` N(0, 0.02/√(2·layers)); biases 0) and, unless ``basis`` is
    ``None``, a long-term memory whose W_O^LTM is zero."""
    embed_dim, heads = cfg.decoder_embed_dim, cfg.decoder_attention_heads
    attention = GPT2Attention(embed_dim, heads, attention_dropout=cfg.attention_dropout)
    ffn = FeedForward(embed_dim, cfg.decoder_ffn_embed_dim, cfg.activation_fn, cfg.activation_dropout)
    residual_std = INIT_STD / math.sqrt(2 * cfg.decoder_layers)
    for linear in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj, ffn.fc1, ffn.fc2):
        std = residual_std if linear in (attention.out_proj, ffn.fc2) else INIT_STD
        nn.init.normal_(linear.weight, std=std)
        nn.init.zeros_(linear.bias)
    memory = build_memory(cfg, embed_dim, heads, basis)
    if memory is not None:
        memory.silence_()  # the converted model starts as GPT-2 (docs/design/gpt2.md §1)
    return PreNormBlock(embed_dim, attention, ffn, memory=memory, dropout=cfg.dropout, memory_input="residual")


def non_gpt2_symbols(dictionary) -> Tensor:
    """``(V,)`` bool, True for the dictionary's symbols that are no GPT-2 token (``<s>``,
    ``<pad>``, ``<unk>``, ``madeupword…``); ``</s>`` is ``<|endoftext|>``.

    Raises:
        ConfigError: a symbol that is neither (the dictionary was not made for GPT-2).
    """
    mask = torch.zeros(len(dictionary), dtype=torch.bool)
    for i, symbol in enumerate(dictionary.symbols):
        if i == dictionary.eos() or symbol.isdigit():
            continue
        if i in (dictionary.bos(), dictionary.pad(), dictionary.unk()) or symbol.startswith("madeupword"):
            mask[i] = True
            continue
        raise ConfigError(f"the dictionary holds {symbol!r}, which is no GPT-2 token id: binarize the data with "
                          "data-prep/prepare-lm.sh --bpe gpt2 (its dict.txt is the converted model's)")
    return mask


class GPT2Decoder(SegmentIncrementalDecoder):
    """Token + block positions → GPT-2 blocks with long-term memory, block by block
    (see the module docstring; both segment loops are :class:`SegmentIncrementalDecoder`'s,
    this class gives the blocks, the embedding of new tokens and the output mask)."""

    def __init__(self, cfg: InfiniteFormerGPT2Config, dictionary, embed_tokens: nn.Embedding):
        validate_config(cfg)
        positions = BlockPositions(cfg.max_positions, cfg.decoder_embed_dim, cfg.segment_length)
        basis = shared_basis(cfg)  # one for every layer, if the memory reads one
        layers = nn.ModuleList(build_block(cfg, basis) for _ in range(cfg.decoder_layers))
        super().__init__(dictionary, embed_tokens, layers, segment_length=cfg.segment_length,
                         embed_positions=positions, dropout=cfg.dropout, no_scale_embedding=True,
                         share_input_output_embed=True, max_positions=int(1e9))
        self.cfg = cfg
        self.register_buffer("non_gpt2", non_gpt2_symbols(dictionary), persistent=False)
        # −∞ for the symbols that are no GPT-2 token, 0 for the others: added by the output
        # projection's own matrix product (no pass over the logits of its own, forward or backward)
        self.register_buffer("output_bias", torch.zeros(len(dictionary)).masked_fill(self.non_gpt2, float("-inf")),
                             persistent=False)

    def embed_new(self, tokens: Tensor, filled: int) -> Tensor:
        """``(bsz, T)`` tokens that follow ``filled`` others of their block → ``(T, bsz, C)``:
        token + position ``filled + t`` (positions restart per block), as :meth:`embed` gives
        them in the full forward."""
        x = self.embed_scale * self.embed_tokens(tokens) + self.embed_positions(tokens, offset=filled)
        return self.dropout_module(x).transpose(0, 1)

    def output_layer(self, features, **kwargs):
        """Tied projection; −∞ for the symbols that are no GPT-2 token (``output_bias``)."""
        return F.linear(features, self.output_projection.weight, self.output_bias)


@register_model("infinite_former_gpt2", dataclass=InfiniteFormerGPT2Config)
class InfiniteFormerGPT2Model(HubMixin, EveryExampleMixin, DictionaryCheckMixin, StreamingMemoryModel,
                              FairseqLanguageModel):
    """GPT-2 + ∞-former long-term memory (see the module docstring); ``from_pretrained`` reads
    GPT-2's BPE from local files (:class:`~fairseq_plugins.models.hub.HubMixin`)."""

    default_bpe = "gpt2"

    @classmethod
    def build_model(cls, cfg: InfiniteFormerGPT2Config, task):
        dictionary = task.target_dictionary
        embed_tokens = nn.Embedding(len(dictionary), cfg.decoder_embed_dim, dictionary.pad())
        nn.init.normal_(embed_tokens.weight, std=INIT_STD)
        nn.init.zeros_(embed_tokens.weight[dictionary.pad()])
        model = cls(GPT2Decoder(cfg, dictionary, embed_tokens))
        model.remember_dictionaries(dictionary)
        return model

    def position_limit(self) -> int:
        """GPT-2's learned position table: blocks of at most ``--max-positions`` tokens."""
        return self.decoder.cfg.max_positions

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """One checkpoint serves both arms: with ``--no-long-term-memory`` the memory's
        parameters are ignored (the GPT-2 baseline); a checkpoint without them (the
        converter's: GPT-2's weights only) gets this model's new memory, W_O^LTM = 0."""
        state_dict = dict(state_dict)
        own = self.state_dict()
        for key in [k for k in state_dict if ".long_term_memory." in k and k not in own]:
            del state_dict[key]
        new = [k for k in own if ".long_term_memory." in k and k not in state_dict]
        if new:
            logger.info("the checkpoint has no long-term memory parameters: the memory starts new (W_O^LTM = 0)")
        for key in new:
            state_dict[key] = own[key]
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)


# ---- named architectures (GPT-2's four sizes) --------------------------------

GPT2_SIZES = {
    "infinite_former_gpt2": (12, 768, 12, 3072),
    "infinite_former_gpt2_medium": (24, 1024, 16, 4096),
    "infinite_former_gpt2_large": (36, 1280, 20, 5120),
    "infinite_former_gpt2_xl": (48, 1600, 25, 6400),
}
for _name, (_layers, _width, _heads, _ffn) in list(GPT2_SIZES.items())[1:]:
    register_named_architecture(
        "infinite_former_gpt2", _name,
        f"GPT-2 {_name.rsplit('_', 1)[1]} ({_layers} layers, width {_width}) with the long-term memory.",
        **sizes("decoder", _layers, _width, _heads, _ffn))
