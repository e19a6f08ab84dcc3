"""``fastformer_lm``: a causal Fastformer language model for fairseq.

Wu et al., "Fastformer: Additive Attention Can Be All You Need" (arXiv
2108.09084), in its causal form (:mod:`fairseq_plugins.modules.additive_attention`):
each pre-norm block is x + Dropout(AdditiveAttention(LN(x))) followed by
x + Dropout(FFN(LN(x))); a final LayerNorm and the output projection follow.
Additive attention carries no relative position, so absolute positions
(fairseq's sinusoidal, or learned with ``--decoder-learned-pos``) are added to
the scaled token embeddings.

Training and scoring use the stock ``language_modeling`` task
(``fairseq-train``, ``fairseq-eval-lm``; the model keeps nothing between
batches, and its ``--max-target-positions`` default comes from that task, so
``streaming_lm`` is not supported); generation (``fairseq-generate``,
``fairseq-interactive``, beam search) uses the constant-size incremental state
of the attention layers. ``--share-layers attention`` reuses one attention
module in every block, ``--share-layers all`` one whole block (paper §3.3,
layer-wise sharing); ``--query-value-sharing`` drops the value projections.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (FairseqIncrementalDecoder, FairseqLanguageModel, register_model,
                            register_model_architecture)
from fairseq.modules import LayerNorm, PositionalEmbedding
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.utils import safe_getattr
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.modules.additive_attention import AdditiveAttention

SHARE_CHOICES = ChoiceEnum(["none", "attention", "all"])
DEFAULT_MAX_TARGET_POSITIONS = 1024


@dataclass
class FastformerLMConfig(FairseqDataclass):
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function in the feed-forward blocks"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    decoder_embed_dim: int = field(default=128, metadata={"help": "model width C"})
    decoder_ffn_embed_dim: int = field(default=512, metadata={"help": "feed-forward width"})
    decoder_layers: int = field(default=2, metadata={"help": "number of blocks"})
    decoder_attention_heads: int = field(default=4, metadata={"help": "attention heads H (must divide the width)"})
    decoder_learned_pos: bool = field(
        default=False, metadata={"help": "learned absolute positions instead of sinusoidal ones"})
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie the input embedding and the output projection"})
    no_scale_embedding: bool = field(default=False, metadata={"help": "do not scale embeddings by sqrt(width)"})
    query_value_sharing: bool = field(
        default=False, metadata={"help": "no value projection: u_i = k ⊙ q_i (paper §3.3)"})
    share_layers: SHARE_CHOICES = field(
        default="none", metadata={"help": "layer-wise sharing: 'attention' reuses one attention module in every "
                                          "block, 'all' one whole block (paper §3.3)"})
    no_score_scaling: bool = field(
        default=False, metadata={"help": "do not divide the additive-attention scores by sqrt(head width)"})
    attention_chunk_size: int = field(
        default=64, metadata={"help": "positions per chunk of the causal prefix computation (memory vs speed)"})
    tokens_per_sample: int = II("task.tokens_per_sample")
    max_target_positions: Optional[int] = II("task.max_target_positions")


def validate_config(cfg) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    if cfg.decoder_layers <= 0:
        raise ConfigError(f"--decoder-layers must be positive, got {cfg.decoder_layers}")
    if cfg.decoder_embed_dim <= 0 or cfg.decoder_ffn_embed_dim <= 0:
        raise ConfigError("--decoder-embed-dim and --decoder-ffn-embed-dim must be positive")
    if cfg.decoder_attention_heads <= 0 or cfg.decoder_embed_dim % cfg.decoder_attention_heads != 0:
        raise ConfigError(
            f"--decoder-attention-heads ({cfg.decoder_attention_heads}) must be positive and divide "
            f"--decoder-embed-dim ({cfg.decoder_embed_dim})")
    if str(cfg.share_layers) not in ("none", "attention", "all"):
        raise ConfigError(f"--share-layers must be none, attention or all, got {cfg.share_layers!r}")
    if cfg.attention_chunk_size <= 0:
        raise ConfigError(f"--attention-chunk-size must be positive, got {cfg.attention_chunk_size}")


class FastformerBlock(nn.Module):
    """Pre-norm block: additive attention then FFN, each with a residual.

    ``attention`` may be a module shared with other blocks; ``layer_index``
    names this block's slot in the incremental state. Shapes ``(T, B, C)``.
    """

    def __init__(self, embed_dim: int, ffn_embed_dim: int, attention: nn.Module, dropout: float = 0.1,
                 activation_dropout: float = 0.0, activation_fn: str = "gelu"):
        super().__init__()
        self.self_attn = attention
        self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.final_layer_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def feed_forward(self, x: Tensor) -> Tensor:
        h = self.activation_dropout_module(self.activation_fn(self.fc1(self.final_layer_norm(x))))
        return x + self.dropout_module(self.fc2(h))

    def forward(self, x: Tensor, padding_mask: Optional[Tensor] = None, incremental_state=None,
                layer_index: int = 0) -> Tensor:
        h = self.self_attn(self.self_attn_layer_norm(x), key_padding_mask=padding_mask,
                           incremental_state=incremental_state, state_slot=f"layer{layer_index}.")
        x = x + self.dropout_module(h)
        return self.feed_forward(x)


def build_blocks(num_layers: int, share: str, make_attention, make_block) -> nn.ModuleList:
    """``num_layers`` blocks with layer-wise sharing ``share`` (none | attention | all).

    With sharing, the same module object appears several times in the list;
    ``parameters()`` and the state_dict count it once.
    """
    share = str(share)
    if share == "all":
        block = make_block(make_attention())
        return nn.ModuleList([block] * num_layers)
    if share == "attention":
        attention = make_attention()
        return nn.ModuleList([make_block(attention) for _ in range(num_layers)])
    return nn.ModuleList([make_block(make_attention()) for _ in range(num_layers)])


def check_not_empty(tokens: Tensor, what: str) -> None:
    if tokens.dim() != 2 or tokens.size(1) == 0:
        raise ConfigError(f"{what} is an empty sequence (shape {tuple(tokens.shape)}); give at least one token")


class FastformerLMDecoder(FairseqIncrementalDecoder):
    """Causal Fastformer decoder (see the module docstring)."""

    def __init__(self, cfg: FastformerLMConfig, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        validate_config(cfg)
        self.cfg = cfg
        embed_dim = cfg.decoder_embed_dim
        self.embed_dim = embed_dim
        self.padding_idx = dictionary.pad()
        self.max_target_positions = cfg.max_target_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else embed_dim ** 0.5
        self.embed_positions = PositionalEmbedding(cfg.max_target_positions, embed_dim, self.padding_idx,
                                                   learned=cfg.decoder_learned_pos)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)

        def make_attention():
            return AdditiveAttention(embed_dim, cfg.decoder_attention_heads, causal=True,
                                     query_value_sharing=cfg.query_value_sharing,
                                     scale_scores=not cfg.no_score_scaling, chunk_size=cfg.attention_chunk_size)

        def make_block(attention):
            return FastformerBlock(embed_dim, cfg.decoder_ffn_embed_dim, attention, dropout=cfg.dropout,
                                   activation_dropout=cfg.activation_dropout, activation_fn=cfg.activation_fn)

        self.layers = build_blocks(cfg.decoder_layers, cfg.share_layers, make_attention, make_block)
        self.layer_norm = LayerNorm(embed_dim)
        self.output_projection = nn.Linear(embed_dim, len(dictionary), bias=False)
        if cfg.share_decoder_input_output_embed:
            self.output_projection.weight = self.embed_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0, std=embed_dim ** -0.5)

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, return_all_hiddens: bool = False, src_lengths=None, **unused):
        """
        Args:
            prev_output_tokens: ``(B, T)`` token ids. With ``incremental_state``
                the whole prefix is given and only the last token is processed.
        Returns:
            ``(logits (B, T, V), {"attn": [None], "inner_states": [...]})``.
        """
        x, extra = self.extract_features(prev_output_tokens, incremental_state=incremental_state,
                                         return_all_hiddens=return_all_hiddens)
        if not features_only:
            x = self.output_projection(x)
        return x, extra

    def extract_features(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                         return_all_hiddens: bool = False, **unused):
        check_not_empty(prev_output_tokens, "the decoder input")
        positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:]
        x = self.embed_scale * self.embed_tokens(prev_output_tokens) + positions
        x = self.dropout_module(x).transpose(0, 1)  # (T, B, C)
        padding_mask = prev_output_tokens.eq(self.padding_idx)
        if not padding_mask.any():
            padding_mask = None
        inner_states: List[Tensor] = [x]
        for i, layer in enumerate(self.layers):
            x = layer(x, padding_mask=padding_mask, incremental_state=incremental_state, layer_index=i)
            if return_all_hiddens:
                inner_states.append(x)
        x = self.layer_norm(x).transpose(0, 1)  # (B, T, C)
        return x, {"attn": [None], "inner_states": inner_states}

    def output_layer(self, features, **kwargs):
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor):
        # each AdditiveAttention reorders its own carry (reorder_incremental_state_scripting)
        return incremental_state


@register_model("fastformer_lm", dataclass=FastformerLMConfig)
class FastformerLanguageModel(DictionaryCheckMixin, FairseqLanguageModel):
    """Fastformer causal language model (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: FastformerLMConfig, task):
        if safe_getattr(cfg, "max_target_positions", None) is None:
            cfg.max_target_positions = safe_getattr(cfg, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)
        validate_config(cfg)
        dictionary = task.target_dictionary
        embed_tokens = nn.Embedding(len(dictionary), cfg.decoder_embed_dim, dictionary.pad())
        nn.init.normal_(embed_tokens.weight, mean=0, std=cfg.decoder_embed_dim ** -0.5)
        nn.init.constant_(embed_tokens.weight[dictionary.pad()], 0)
        model = cls(FastformerLMDecoder(cfg, dictionary, embed_tokens))
        model.remember_dictionaries(dictionary)
        return model


# ---- named architectures ----------------------------------------------------


def set_arch_defaults(args, **defaults):
    """Fill the options a named architecture fixes, keeping those given on the command line
    (shared by every architecture function of the plugin's models)."""
    for name, value in defaults.items():
        setattr(args, name, safe_getattr(args, name, value))


@register_model_architecture("fastformer_lm", "fastformer_lm_tiny")
def fastformer_lm_tiny(args):
    """2 blocks, width 128, 4 heads, FFN 512."""
    set_arch_defaults(args, decoder_layers=2, decoder_embed_dim=128, decoder_attention_heads=4,
                      decoder_ffn_embed_dim=512)


@register_model_architecture("fastformer_lm", "fastformer_lm_base")
def fastformer_lm_base(args):
    """12 blocks, width 768, 12 heads, FFN 3072 (GPT-2-small sized)."""
    set_arch_defaults(args, decoder_layers=12, decoder_embed_dim=768, decoder_attention_heads=12,
                      decoder_ffn_embed_dim=3072)
