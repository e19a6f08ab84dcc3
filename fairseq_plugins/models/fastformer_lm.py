"""``fastformer_lm``: a causal Fastformer language model for fairseq.

Wu et al., "Fastformer: Additive Attention Can Be All You Need" (arXiv
2108.09084), in its causal form (:mod:`fairseq_plugins.modules.attention.additive`;
docs/design/fastformer.md): each pre-norm block is x + Dropout(AdditiveAttention(LN(x)))
followed by x + Dropout(FFN(LN(x))); a final LayerNorm and the output projection
follow. Additive attention carries no relative position, so absolute positions
(fairseq's sinusoidal, or learned with ``--decoder-learned-pos``) are added to the
scaled token embeddings.

Training and scoring use the stock ``language_modeling`` task (``fairseq-train``,
``fairseq-eval-lm``; the model keeps nothing between batches, and its
``--max-target-positions`` default comes from that task, so ``streaming_lm`` is not
supported). Sinusoidal positions extend to any length (fairseq computes more on demand),
so the model accepts inputs longer than it was trained on and ``max_positions()`` says so;
learned positions stop at ``--max-target-positions``, and fairseq-eval-lm refuses
(one line) to score a split of which it would have to skip longer blocks or lines.
Generation (``fairseq-generate``, ``fairseq-interactive``, beam search)
uses the constant-size incremental state of the attention layers.
``--share-layers attention`` reuses one attention module in every block,
``--share-layers all`` one whole block (paper §3.3, layer-wise sharing);
``--query-value-sharing`` drops the value projections.
"""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import FairseqLanguageModel, register_model
from fairseq.modules import PositionalEmbedding
from fairseq.utils import safe_getattr
from omegaconf import II

from fairseq_plugins.config import (SHARE_CHOICES, AdditiveAttentionConfig, BlockConfig, DecoderSizeConfig,
                                    check_positive, check_share, check_sizes, register_named_architecture, sizes)
from fairseq_plugins.models.backbone import PreNormDecoder, build_embedding
from fairseq_plugins.modules.dictionary_check import DictionaryCheckMixin
from fairseq_plugins.models.inference import EveryExampleMixin
from fairseq_plugins.modules.attention.additive import build_fastformer_blocks

DEFAULT_MAX_TARGET_POSITIONS = 1024


@dataclass
class FastformerLMConfig(AdditiveAttentionConfig, BlockConfig, DecoderSizeConfig):
    decoder_learned_pos: bool = field(
        default=False, metadata={"help": "learned absolute positions instead of sinusoidal ones"})
    query_value_sharing: bool = field(
        default=False, metadata={"help": "no value projection: u_i = k ⊙ q_i (paper §3.3)"})
    share_layers: SHARE_CHOICES = field(
        default="none", metadata={"help": "layer-wise sharing: 'attention' reuses one attention module in every "
                                          "block, 'all' one whole block (paper §3.3)"})
    tokens_per_sample: int = II("task.tokens_per_sample")
    max_target_positions: Optional[int] = II("task.max_target_positions")


def validate_config(cfg) -> None:
    """One-line errors for inconsistent options (raised before any allocation)."""
    check_sizes(cfg)
    check_share(cfg.share_layers, "--share-layers")
    check_positive(cfg.attention_chunk_size, "--attention-chunk-size")


@register_model("fastformer_lm", dataclass=FastformerLMConfig)
class FastformerLanguageModel(EveryExampleMixin, DictionaryCheckMixin, FairseqLanguageModel):
    """Fastformer causal language model (see the module docstring)."""

    @classmethod
    def build_model(cls, cfg: FastformerLMConfig, task):
        if safe_getattr(cfg, "max_target_positions", None) is None:
            cfg.max_target_positions = safe_getattr(cfg, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)
        validate_config(cfg)
        dictionary = task.target_dictionary
        dim = cfg.decoder_embed_dim
        embed_tokens = build_embedding(dictionary, dim)
        positions = PositionalEmbedding(cfg.max_target_positions, dim, dictionary.pad(),
                                        learned=cfg.decoder_learned_pos)
        layers = build_fastformer_blocks(cfg, cfg.decoder_layers, cfg.share_layers, True, cfg.query_value_sharing,
                                         dim, cfg.decoder_attention_heads, cfg.decoder_ffn_embed_dim)
        decoder = PreNormDecoder(dictionary, embed_tokens, layers, embed_positions=positions, dropout=cfg.dropout,
                                 no_scale_embedding=cfg.no_scale_embedding,
                                 share_input_output_embed=cfg.share_decoder_input_output_embed,
                                 max_positions=positions.max_positions)
        model = cls(decoder)
        model.remember_dictionaries(dictionary)
        return model


# ---- named architectures ----------------------------------------------------


register_named_architecture("fastformer_lm", "fastformer_lm_tiny", "2 blocks, width 128, 4 heads, FFN 512.",
                            **sizes("decoder", 2, 128, 4, 512))
register_named_architecture("fastformer_lm", "fastformer_lm_base",
                            "12 blocks, width 768, 12 heads, FFN 3072 (GPT-2-small sized).",
                            **sizes("decoder", 12, 768, 12, 3072))
