"""``fastformer``: a Fastformer encoder–decoder for fairseq (translation,
summarisation).

Encoder: pre-norm blocks of bidirectional additive attention (Wu et al.,
arXiv 2108.09084, the paper's layer; :mod:`fairseq_plugins.modules.attention.additive`)
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
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.models import FairseqEncoderDecoderModel, register_model
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.modules import PositionalEmbedding
from omegaconf import II
from torch import Tensor, nn

from fairseq_plugins.config import (SHARE_CHOICES, AdditiveAttentionConfig, EncoderDecoderConfig, check_not_empty,
                                    check_positive, check_share, check_sizes, register_named_architecture,
                                    sizes)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import PreNormDecoder, PreNormEncoder, build_embeddings
from fairseq_plugins.modules.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.inference import EveryExampleMixin
from fairseq_plugins.modules.attention.additive import build_fastformer_blocks
from fairseq_plugins.modules.attention.multihead import EncoderDecoderAttention


@dataclass
class FastformerConfig(AdditiveAttentionConfig, EncoderDecoderConfig):
    encoder_learned_pos: bool = field(default=False, metadata={"help": "learned encoder positions"})
    decoder_type: ChoiceEnum(["fastformer", "transformer"]) = field(
        default="fastformer", metadata={"help": "causal Fastformer decoder with cross-attention, or fairseq's "
                                                "(pre-norm) transformer decoder"})
    decoder_learned_pos: bool = field(default=False, metadata={"help": "learned decoder positions"})
    encoder_query_value_sharing: bool = field(
        default=False, metadata={"help": "encoder attention without value projection (u_i = k ⊙ q_i)"})
    decoder_query_value_sharing: bool = field(
        default=False, metadata={"help": "Fastformer decoder attention without value projection"})
    encoder_share_layers: SHARE_CHOICES = field(
        default="none", metadata={"help": "encoder layer-wise sharing: none, attention or all"})
    decoder_share_layers: SHARE_CHOICES = field(
        default="none", metadata={"help": "Fastformer decoder layer-wise sharing: none, attention or all"})
    max_source_positions: int = II("task.max_source_positions")
    max_target_positions: int = II("task.max_target_positions")


def validate_config(cfg) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    check_sizes(cfg, ("encoder", "decoder"))
    for side in ("encoder", "decoder"):
        check_share(getattr(cfg, f"{side}_share_layers"), f"--{side}-share-layers")
    if str(cfg.decoder_type) == "transformer":
        if cfg.decoder_query_value_sharing or str(cfg.decoder_share_layers) != "none":
            raise ConfigError("--decoder-query-value-sharing and --decoder-share-layers apply to the Fastformer "
                              "decoder only; drop them or use --decoder-type fastformer")
    elif str(cfg.decoder_type) != "fastformer":
        raise ConfigError(f"--decoder-type must be fastformer or transformer, got {cfg.decoder_type!r}")
    if cfg.share_all_embeddings and cfg.encoder_embed_dim != cfg.decoder_embed_dim:
        raise ConfigError(f"--share-all-embeddings needs --encoder-embed-dim ({cfg.encoder_embed_dim}) equal to "
                          f"--decoder-embed-dim ({cfg.decoder_embed_dim})")
    check_positive(cfg.attention_chunk_size, "--attention-chunk-size")


class FastformerEncoder(PreNormEncoder):
    """Bidirectional Fastformer encoder; output in fairseq's transformer format."""

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
        x = self.dropout_module(embedding + self.embed_positions(src_tokens)).transpose(0, 1)  # (S, B, C)
        states = []
        for layer in self.layers:
            x = layer(x, padding_mask=padding_mask).x
            if return_all_hiddens:
                states.append(x)
        return {
            "encoder_out": [self.layer_norm(x)],
            "encoder_padding_mask": [padding_mask],
            "encoder_embedding": [embedding],
            "encoder_states": states,
            "src_tokens": [],
            "src_lengths": [src_lengths] if src_lengths is not None else [],
        }


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


def build_fastformer_decoder(cfg: FastformerConfig, dictionary, embed_tokens: nn.Embedding) -> PreNormDecoder:
    """Causal additive attention, cross-attention over the encoder output (fairseq's
    ``MultiheadAttention``) and FFN per block."""
    dim = cfg.decoder_embed_dim
    positions = PositionalEmbedding(cfg.max_target_positions, dim, dictionary.pad(), learned=cfg.decoder_learned_pos)

    def make_cross():
        return EncoderDecoderAttention(dim, cfg.decoder_attention_heads, cfg.encoder_embed_dim,
                                       dropout=cfg.attention_dropout)

    layers = build_fastformer_blocks(cfg, cfg.decoder_layers, cfg.decoder_share_layers, True,
                                     cfg.decoder_query_value_sharing, dim, cfg.decoder_attention_heads,
                                     cfg.decoder_ffn_embed_dim, make_cross=make_cross)
    return PreNormDecoder(dictionary, embed_tokens, layers, embed_positions=positions, dropout=cfg.dropout,
                          no_scale_embedding=cfg.no_scale_embedding,
                          share_input_output_embed=cfg.share_decoder_input_output_embed or cfg.share_all_embeddings,
                          max_positions=cfg.max_target_positions)


@register_model("fastformer", dataclass=FastformerConfig)
class FastformerModel(EveryExampleMixin, DictionaryCheckMixin, FairseqEncoderDecoderModel):
    """Fastformer encoder–decoder (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: FastformerConfig, task):
        validate_config(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed, decoder_embed = build_embeddings(cfg, task)
        dim = cfg.encoder_embed_dim
        positions = PositionalEmbedding(cfg.max_source_positions, dim, src_dict.pad(), learned=cfg.encoder_learned_pos)
        layers = build_fastformer_blocks(cfg, cfg.encoder_layers, cfg.encoder_share_layers, False,
                                         cfg.encoder_query_value_sharing, dim, cfg.encoder_attention_heads,
                                         cfg.encoder_ffn_embed_dim)
        encoder = FastformerEncoder(src_dict, encoder_embed, layers, embed_positions=positions, dropout=cfg.dropout,
                                    no_scale_embedding=cfg.no_scale_embedding, max_positions=cfg.max_source_positions)
        if str(cfg.decoder_type) == "transformer":
            decoder = build_transformer_decoder(cfg, tgt_dict, decoder_embed)
        else:
            decoder = build_fastformer_decoder(cfg, tgt_dict, decoder_embed)
        model = cls(encoder, decoder)
        model.remember_dictionaries(src_dict, tgt_dict)
        return model


# ---- named architectures ----------------------------------------------------


register_named_architecture("fastformer", "fastformer_tiny", "2+2 blocks, width 128, 4 heads, FFN 512.",
                            **sizes("encoder", 2, 128, 4, 512), **sizes("decoder", 2, 128, 4, 512))
register_named_architecture("fastformer", "fastformer_base",
                            "6+6 blocks, width 512, 8 heads, FFN 2048 (transformer-base sized).",
                            **sizes("encoder", 6, 512, 8, 2048), **sizes("decoder", 6, 512, 8, 2048))
