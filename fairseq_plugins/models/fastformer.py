"""``fastformer``: a Fastformer encoder–decoder for fairseq (translation,
summarisation).

Encoder: pre-norm blocks of bidirectional additive attention (Wu et al.,
arXiv 2108.09084, the paper's layer; :mod:`fairseq_plugins.modules.additive_attention`)
and FFN, absolute positions (sinusoidal, or learned with
``--encoder-learned-pos``), final LayerNorm; padding gets zero weight.

Decoder (``--decoder-type``):

* ``fastformer``: pre-norm blocks of causal additive attention, standard
  cross-attention (fairseq's ``MultiheadAttention``, its keys/values of the
  encoder output cached in the incremental state) and FFN; constant-size
  self-attention state during generation;
* ``transformer``: fairseq's own ``TransformerDecoderBase`` (pre-norm).

Layer-wise sharing: ``--encoder-share-layers`` / ``--decoder-share-layers``
``attention`` (one attention module in every block) or ``all`` (one block);
``--encoder-query-value-sharing`` / ``--decoder-query-value-sharing``.
Works with the ``translation`` task and ``fairseq-generate`` (beam search).
"""

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Dict, List, Optional

from fairseq import utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import (FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder,
                            register_model, register_model_architecture)
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.modules import LayerNorm, MultiheadAttention, PositionalEmbedding
from fairseq.modules.fairseq_dropout import FairseqDropout
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.fastformer_lm import (SHARE_CHOICES, FastformerBlock, build_blocks, check_not_empty,
                                                  set_arch_defaults)
from fairseq_plugins.modules.additive_attention import AdditiveAttention


@dataclass
class FastformerConfig(FairseqDataclass):
    activation_fn: ChoiceEnum(utils.get_available_activation_fns()) = field(
        default="gelu", metadata={"help": "activation function in the feed-forward blocks"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on cross-attention weights"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    encoder_embed_dim: int = field(default=128, metadata={"help": "encoder width"})
    encoder_ffn_embed_dim: int = field(default=512, metadata={"help": "encoder feed-forward width"})
    encoder_layers: int = field(default=2, metadata={"help": "encoder blocks"})
    encoder_attention_heads: int = field(default=4, metadata={"help": "encoder heads (must divide the width)"})
    encoder_learned_pos: bool = field(default=False, metadata={"help": "learned encoder positions"})
    decoder_type: ChoiceEnum(["fastformer", "transformer"]) = field(
        default="fastformer", metadata={"help": "causal Fastformer decoder with cross-attention, or fairseq's "
                                                "(pre-norm) transformer decoder"})
    decoder_embed_dim: int = field(default=128, metadata={"help": "decoder width"})
    decoder_ffn_embed_dim: int = field(default=512, metadata={"help": "decoder feed-forward width"})
    decoder_layers: int = field(default=2, metadata={"help": "decoder blocks"})
    decoder_attention_heads: int = field(default=4, metadata={"help": "decoder heads (must divide the width)"})
    decoder_learned_pos: bool = field(default=False, metadata={"help": "learned decoder positions"})
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie the decoder input embedding and the output projection"})
    share_all_embeddings: bool = field(
        default=False, metadata={"help": "one embedding for source, target and output (joined dictionary)"})
    no_scale_embedding: bool = field(default=False, metadata={"help": "do not scale embeddings by sqrt(width)"})
    encoder_query_value_sharing: bool = field(
        default=False, metadata={"help": "encoder attention without value projection (u_i = k ⊙ q_i)"})
    decoder_query_value_sharing: bool = field(
        default=False, metadata={"help": "Fastformer decoder attention without value projection"})
    encoder_share_layers: SHARE_CHOICES = field(
        default="none", metadata={"help": "encoder layer-wise sharing: none, attention or all"})
    decoder_share_layers: SHARE_CHOICES = field(
        default="none", metadata={"help": "Fastformer decoder layer-wise sharing: none, attention or all"})
    no_score_scaling: bool = field(
        default=False, metadata={"help": "do not divide the additive-attention scores by sqrt(head width)"})
    attention_chunk_size: int = field(
        default=64, metadata={"help": "positions per chunk of the causal prefix computation"})
    max_source_positions: int = II("task.max_source_positions")
    max_target_positions: int = II("task.max_target_positions")


def validate_config(cfg) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    for side in ("encoder", "decoder"):
        layers, width = getattr(cfg, f"{side}_layers"), getattr(cfg, f"{side}_embed_dim")
        heads = getattr(cfg, f"{side}_attention_heads")
        if layers <= 0:
            raise ConfigError(f"--{side}-layers must be positive, got {layers}")
        if width <= 0 or getattr(cfg, f"{side}_ffn_embed_dim") <= 0:
            raise ConfigError(f"--{side}-embed-dim and --{side}-ffn-embed-dim must be positive")
        if heads <= 0 or width % heads != 0:
            raise ConfigError(f"--{side}-attention-heads ({heads}) must be positive and divide "
                              f"--{side}-embed-dim ({width})")
        share = str(getattr(cfg, f"{side}_share_layers"))
        if share not in ("none", "attention", "all"):
            raise ConfigError(f"--{side}-share-layers must be none, attention or all, got {share!r}")
    if str(cfg.decoder_type) == "transformer":
        if cfg.decoder_query_value_sharing or str(cfg.decoder_share_layers) != "none":
            raise ConfigError("--decoder-query-value-sharing and --decoder-share-layers apply to the Fastformer "
                              "decoder only; drop them or use --decoder-type fastformer")
    elif str(cfg.decoder_type) != "fastformer":
        raise ConfigError(f"--decoder-type must be fastformer or transformer, got {cfg.decoder_type!r}")
    if cfg.share_all_embeddings and cfg.encoder_embed_dim != cfg.decoder_embed_dim:
        raise ConfigError(f"--share-all-embeddings needs --encoder-embed-dim ({cfg.encoder_embed_dim}) equal to "
                          f"--decoder-embed-dim ({cfg.decoder_embed_dim})")
    if cfg.attention_chunk_size <= 0:
        raise ConfigError(f"--attention-chunk-size must be positive, got {cfg.attention_chunk_size}")


class FastformerEncoder(FairseqEncoder):
    """Bidirectional Fastformer encoder; output in fairseq's transformer format."""

    def __init__(self, cfg: FastformerConfig, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        embed_dim = cfg.encoder_embed_dim
        self.padding_idx = dictionary.pad()
        self.max_source_positions = cfg.max_source_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else embed_dim ** 0.5
        self.embed_positions = PositionalEmbedding(cfg.max_source_positions, embed_dim, self.padding_idx,
                                                   learned=cfg.encoder_learned_pos)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)

        def make_attention():
            return AdditiveAttention(embed_dim, cfg.encoder_attention_heads, causal=False,
                                     query_value_sharing=cfg.encoder_query_value_sharing,
                                     scale_scores=not cfg.no_score_scaling)

        def make_block(attention):
            return FastformerBlock(embed_dim, cfg.encoder_ffn_embed_dim, attention, dropout=cfg.dropout,
                                   activation_dropout=cfg.activation_dropout, activation_fn=cfg.activation_fn)

        self.layers = build_blocks(cfg.encoder_layers, cfg.encoder_share_layers, make_attention, make_block)
        self.layer_norm = LayerNorm(embed_dim)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                **unused):
        """
        Args:
            src_tokens: ``(B, S)`` (left or right padded).
        Returns:
            dict with ``encoder_out`` ``[(S, B, C)]``, ``encoder_padding_mask``
            ``[(B, S)]``, ``encoder_embedding`` ``[(B, S, C)]``,
            ``encoder_states``, ``src_tokens`` ``[]``, ``src_lengths``.
        Raises:
            ConfigError: an empty source, or a source of padding only.
        """
        check_not_empty(src_tokens, "the source")
        padding_mask = src_tokens.eq(self.padding_idx)
        embedding = self.embed_scale * self.embed_tokens(src_tokens)
        x = embedding + self.embed_positions(src_tokens)
        x = self.dropout_module(x).transpose(0, 1)  # (S, B, C)
        states: List[Tensor] = []
        for layer in self.layers:
            x = layer(x, padding_mask=padding_mask)
            if return_all_hiddens:
                states.append(x)
        x = self.layer_norm(x)
        return {
            "encoder_out": [x],
            "encoder_padding_mask": [padding_mask],
            "encoder_embedding": [embedding],
            "encoder_states": states,
            "src_tokens": [],
            "src_lengths": [src_lengths] if src_lengths is not None else [],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Select batch entries ``new_order`` (beam expansion and reordering)."""
        def pick(key, dim):
            return [t.index_select(dim, new_order) for t in encoder_out.get(key, [])]

        return {
            "encoder_out": pick("encoder_out", 1),
            "encoder_padding_mask": pick("encoder_padding_mask", 0),
            "encoder_embedding": pick("encoder_embedding", 0),
            "encoder_states": pick("encoder_states", 1),
            "src_tokens": pick("src_tokens", 0),
            "src_lengths": pick("src_lengths", 0),
        }

    def max_positions(self):
        return self.max_source_positions


class FastformerDecoderBlock(FastformerBlock):
    """Pre-norm block: causal additive attention, cross-attention, FFN."""

    def __init__(self, embed_dim, ffn_embed_dim, attention, encoder_embed_dim, num_heads, dropout=0.1,
                 attention_dropout=0.0, activation_dropout=0.0, activation_fn="gelu"):
        super().__init__(embed_dim, ffn_embed_dim, attention, dropout=dropout,
                         activation_dropout=activation_dropout, activation_fn=activation_fn)
        self.encoder_attn = MultiheadAttention(embed_dim, num_heads, kdim=encoder_embed_dim, vdim=encoder_embed_dim,
                                               dropout=attention_dropout, encoder_decoder_attention=True)
        self.encoder_attn_layer_norm = LayerNorm(embed_dim)

    def forward(self, x, encoder_out=None, encoder_padding_mask=None, padding_mask=None, incremental_state=None,
                layer_index=0, need_attn=False):
        h = self.self_attn(self.self_attn_layer_norm(x), key_padding_mask=padding_mask,
                           incremental_state=incremental_state, state_slot=f"layer{layer_index}.")
        x = x + self.dropout_module(h)
        h, attn = self.encoder_attn(query=self.encoder_attn_layer_norm(x), key=encoder_out, value=encoder_out,
                                    key_padding_mask=encoder_padding_mask, incremental_state=incremental_state,
                                    static_kv=True, need_weights=need_attn)
        x = x + self.dropout_module(h)
        return self.feed_forward(x), attn


class FastformerDecoder(FairseqIncrementalDecoder):
    """Causal Fastformer decoder with cross-attention to the encoder output."""

    def __init__(self, cfg: FastformerConfig, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        embed_dim = cfg.decoder_embed_dim
        self.padding_idx = dictionary.pad()
        self.max_target_positions = cfg.max_target_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else embed_dim ** 0.5
        self.embed_positions = PositionalEmbedding(cfg.max_target_positions, embed_dim, self.padding_idx,
                                                   learned=cfg.decoder_learned_pos)
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)

        def make_attention():
            return AdditiveAttention(embed_dim, cfg.decoder_attention_heads, causal=True,
                                     query_value_sharing=cfg.decoder_query_value_sharing,
                                     scale_scores=not cfg.no_score_scaling, chunk_size=cfg.attention_chunk_size)

        def make_block(attention):
            return FastformerDecoderBlock(embed_dim, cfg.decoder_ffn_embed_dim, attention, cfg.encoder_embed_dim,
                                          cfg.decoder_attention_heads, dropout=cfg.dropout,
                                          attention_dropout=cfg.attention_dropout,
                                          activation_dropout=cfg.activation_dropout, activation_fn=cfg.activation_fn)

        self.layers = build_blocks(cfg.decoder_layers, cfg.decoder_share_layers, make_attention, make_block)
        self.layer_norm = LayerNorm(embed_dim)
        self.output_projection = nn.Linear(embed_dim, len(dictionary), bias=False)
        if cfg.share_decoder_input_output_embed or cfg.share_all_embeddings:
            self.output_projection.weight = self.embed_tokens.weight
        else:
            nn.init.normal_(self.output_projection.weight, mean=0, std=embed_dim ** -0.5)

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, return_all_hiddens: bool = False, src_lengths=None, **unused):
        """
        Args:
            prev_output_tokens: ``(B, T)``; with ``incremental_state`` the
                whole prefix, of which only the last token is processed.
            encoder_out: the encoder's output dict.
        Returns:
            ``(logits (B, T, V), {"attn": [(B, T, S) cross-attention of the last
            block, averaged over heads], "inner_states": [...]})``.
        """
        x, extra = self.extract_features(prev_output_tokens, encoder_out=encoder_out,
                                         incremental_state=incremental_state, return_all_hiddens=return_all_hiddens)
        if not features_only:
            x = self.output_projection(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         return_all_hiddens: bool = False, **unused):
        check_not_empty(prev_output_tokens, "the decoder input")
        if encoder_out is None or not encoder_out.get("encoder_out"):
            raise ConfigError("the Fastformer decoder needs the encoder output (encoder_out)")
        enc = encoder_out["encoder_out"][0]
        enc_mask = encoder_out["encoder_padding_mask"][0] if encoder_out.get("encoder_padding_mask") else None
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
        attn = None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x, layer_attn = layer(x, encoder_out=enc, encoder_padding_mask=enc_mask, padding_mask=padding_mask,
                                  incremental_state=incremental_state, layer_index=i, need_attn=(i == last))
            if i == last:
                attn = layer_attn
            if return_all_hiddens:
                inner_states.append(x)
        x = self.layer_norm(x).transpose(0, 1)
        return x, {"attn": [attn], "inner_states": inner_states}

    def output_layer(self, features, **kwargs):
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions


def build_transformer_decoder(cfg: FastformerConfig, dictionary, embed_tokens: nn.Embedding):
    """fairseq's pre-norm transformer decoder with this model's sizes."""
    args = SimpleNamespace(
        decoder_embed_dim=cfg.decoder_embed_dim, decoder_ffn_embed_dim=cfg.decoder_ffn_embed_dim,
        decoder_layers=cfg.decoder_layers, decoder_attention_heads=cfg.decoder_attention_heads,
        decoder_input_dim=cfg.decoder_embed_dim, decoder_output_dim=cfg.decoder_embed_dim,
        decoder_normalize_before=True, decoder_learned_pos=cfg.decoder_learned_pos,
        encoder_embed_dim=cfg.encoder_embed_dim, dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout, activation_fn=str(cfg.activation_fn),
        share_decoder_input_output_embed=cfg.share_decoder_input_output_embed or cfg.share_all_embeddings,
        max_target_positions=cfg.max_target_positions, no_scale_embedding=cfg.no_scale_embedding)
    return TransformerDecoderBase(TransformerConfig.from_namespace(args), dictionary, embed_tokens)


def _embedding(dictionary, dim: int) -> nn.Embedding:
    emb = nn.Embedding(len(dictionary), dim, dictionary.pad())
    nn.init.normal_(emb.weight, mean=0, std=dim ** -0.5)
    nn.init.constant_(emb.weight[dictionary.pad()], 0)
    return emb


@register_model("fastformer", dataclass=FastformerConfig)
class FastformerModel(DictionaryCheckMixin, FairseqEncoderDecoderModel):
    """Fastformer encoder–decoder (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: FastformerConfig, task):
        validate_config(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed = _embedding(src_dict, cfg.encoder_embed_dim)
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ConfigError("--share-all-embeddings needs one joined dictionary for source and target "
                                  "(fairseq-preprocess --joined-dictionary)")
            decoder_embed = encoder_embed
        else:
            decoder_embed = _embedding(tgt_dict, cfg.decoder_embed_dim)
        encoder = FastformerEncoder(cfg, src_dict, encoder_embed)
        if str(cfg.decoder_type) == "transformer":
            decoder = build_transformer_decoder(cfg, tgt_dict, decoder_embed)
        else:
            decoder = FastformerDecoder(cfg, tgt_dict, decoder_embed)
        model = cls(encoder, decoder)
        model.remember_dictionaries(src_dict, tgt_dict)
        return model


# ---- named architectures ----------------------------------------------------


@register_model_architecture("fastformer", "fastformer_tiny")
def fastformer_tiny(args):
    """2+2 blocks, width 128, 4 heads, FFN 512."""
    set_arch_defaults(args, encoder_layers=2, encoder_embed_dim=128, encoder_attention_heads=4,
                      encoder_ffn_embed_dim=512, decoder_layers=2, decoder_embed_dim=128, decoder_attention_heads=4,
                      decoder_ffn_embed_dim=512)


@register_model_architecture("fastformer", "fastformer_base")
def fastformer_base(args):
    """6+6 blocks, width 512, 8 heads, FFN 2048 (transformer-base sized)."""
    set_arch_defaults(args, encoder_layers=6, encoder_embed_dim=512, encoder_attention_heads=8,
                      encoder_ffn_embed_dim=2048, decoder_layers=6, decoder_embed_dim=512, decoder_attention_heads=8,
                      decoder_ffn_embed_dim=2048)
