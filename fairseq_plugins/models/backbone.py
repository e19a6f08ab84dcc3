"""The skeleton every plugin model is built on: embeddings, positions, dropout, the
layer loop over :class:`~fairseq_plugins.modules.block.PreNormBlock` s, the final
LayerNorm, the output projection and the encoder-output reordering for beam search
(docs/design/architecture.md); the segment loops of the segmented memory models are
:mod:`fairseq_plugins.models.segment_decoder`'s. A model file only chooses the blocks' parts.

Parameters are created in the order the caller builds the parts (embeddings, then
positions, then layers, then the final norm and output projection), so that a
model's random initialisation depends only on its own ``build_model``.
"""

import math
from typing import Dict, List, Optional, Tuple


from fairseq.models import FairseqDecoder, FairseqEncoder, FairseqIncrementalDecoder
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn

from fairseq_plugins.config import check_not_empty
from fairseq_plugins.errors import ConfigError

# encoder-output entries stored time first, (T, bsz, C); the others are batch first
TIME_FIRST = ("encoder_out", "encoder_states", "document_states")


def build_embedding(dictionary, dim: int) -> nn.Embedding:
    """``nn.Embedding`` with N(0, dim^-½) weights and a zero padding row (fairseq's transformer init)."""
    emb = nn.Embedding(len(dictionary), dim, dictionary.pad())
    nn.init.normal_(emb.weight, mean=0, std=dim ** -0.5)
    nn.init.constant_(emb.weight[dictionary.pad()], 0)
    return emb


def build_output_projection(embed_tokens: nn.Embedding, num_symbols: int, share: bool) -> nn.Linear:
    """The output projection: tied to ``embed_tokens`` when ``share``, else N(0, dim^-½)."""
    dim = embed_tokens.embedding_dim
    projection = nn.Linear(dim, num_symbols, bias=False)
    if share:
        projection.weight = embed_tokens.weight
    else:
        nn.init.normal_(projection.weight, mean=0, std=dim ** -0.5)
    return projection


def build_embeddings(cfg, task) -> Tuple[nn.Embedding, nn.Embedding]:
    """Encoder and decoder embeddings of an encoder–decoder model (one object with
    ``--share-all-embeddings``).

    Raises:
        ConfigError: ``--share-all-embeddings`` with two dictionaries.
    """
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    encoder_embed = build_embedding(src_dict, cfg.encoder_embed_dim)
    if not cfg.share_all_embeddings:
        return encoder_embed, build_embedding(tgt_dict, cfg.decoder_embed_dim)
    if src_dict != tgt_dict:
        raise ConfigError("--share-all-embeddings needs one joined dictionary for source and target "
                          "(fairseq-preprocess --joined-dictionary)")
    return encoder_embed, encoder_embed


def reorder_encoder_dict(encoder_out: Dict[str, List[Tensor]], new_order: Tensor) -> Dict[str, List[Tensor]]:
    """Select batch entries ``new_order`` of every tensor of a fairseq encoder-output dict."""
    return {key: [t.index_select(1 if key in TIME_FIRST else 0, new_order) for t in tensors]
            for key, tensors in encoder_out.items()}


class _Embedder:
    """Token embedding (scaled), optional absolute positions and dropout, the blocks and
    the final LayerNorm; shared by both sides."""

    def _build(self, dictionary, embed_tokens: nn.Embedding, layers: nn.ModuleList,
               embed_positions: Optional[nn.Module], dropout: float, no_scale_embedding: bool) -> None:
        self.padding_idx = dictionary.pad()
        self.embed_tokens = embed_tokens
        self.embed_dim = embed_tokens.embedding_dim
        self.embed_scale = 1.0 if no_scale_embedding else math.sqrt(self.embed_dim)
        self.embed_positions = embed_positions
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.layers = layers
        self.layer_norm = LayerNorm(self.embed_dim)

    def embed(self, tokens: Tensor, incremental_state=None) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """``(bsz, T)`` ids → ``(x (T', bsz, C), tokens used (bsz, T'), padding mask or None)``;
        with ``incremental_state`` only the last position is embedded (T' = 1)."""
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            tokens = tokens[:, -1:]
            positions = positions[:, -1:] if positions is not None else None
        x = self.embed_scale * self.embed_tokens(tokens)
        if positions is not None:
            x = x + positions
        x = self.dropout_module(x).transpose(0, 1)
        padding_mask = tokens.eq(self.padding_idx)
        return x, tokens, (padding_mask if padding_mask.any() else None)


class PreNormDecoderBase(_Embedder, FairseqDecoder):
    """Embedding → blocks → final LayerNorm → output projection (see the module docstring).

    Args:
        dictionary: the target dictionary.
        embed_tokens: the input embedding (``build_embedding``).
        layers: the blocks (already built: their parameters come before the final norm's).
        embed_positions: absolute positions added to the embedding, or ``None``.
        dropout: embedding dropout; no_scale_embedding: do not scale by √C.
        share_input_output_embed: tie the output projection to ``embed_tokens``.
        max_positions: what :meth:`max_positions` reports.
    """

    def __init__(self, dictionary, embed_tokens: nn.Embedding, layers: nn.ModuleList,
                 embed_positions: Optional[nn.Module] = None, dropout: float = 0.1,
                 no_scale_embedding: bool = False, share_input_output_embed: bool = False,
                 max_positions: Optional[int] = None):
        super().__init__(dictionary)
        self._build(dictionary, embed_tokens, layers, embed_positions, dropout, no_scale_embedding)
        self.output_projection = build_output_projection(embed_tokens, len(dictionary), share_input_output_embed)
        self.max_target_positions = max_positions

    def forward(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                features_only: bool = False, return_all_hiddens: bool = False, **kwargs):
        """
        Args:
            prev_output_tokens: ``(bsz, T)`` token ids; with ``incremental_state`` the
                whole prefix, of which only the last token is processed.
            encoder_out: the encoder's output dict (encoder–decoder models).
        Returns:
            ``(logits (bsz, T, V), extra)``; ``extra`` holds ``attn`` ``[weights or None]``,
            ``inner_states`` and ``ltm_stats`` (the continuous reads'
            :class:`~fairseq_plugins.modules.continuous.read.ReadStats`, for
            ``--criterion infinite_former_kl``).
        """
        x, extra = self.extract_features(prev_output_tokens, encoder_out=encoder_out,
                                         incremental_state=incremental_state,
                                         return_all_hiddens=return_all_hiddens, **kwargs)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                         return_all_hiddens: bool = False, **unused):
        check_not_empty(prev_output_tokens, "the decoder input")
        x, _, padding_mask = self.embed(prev_output_tokens, incremental_state)
        inner_states: List[Tensor] = [x]
        stats, attn, last = [], None, len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            out = layer(x, padding_mask=padding_mask, incremental_state=incremental_state,
                        encoder_out=encoder_out, slot=f"layer{i}.", need_attn=(i == last))
            x = out.x
            stats.extend(out.stats)
            if i == last:
                attn = out.attn
            if return_all_hiddens:
                inner_states.append(x)
        x = self.layer_norm(x).transpose(0, 1)  # (bsz, T, C)
        return x, {"attn": [attn], "inner_states": inner_states, "ltm_stats": stats}

    def output_layer(self, features, **kwargs):
        return self.output_projection(features)

    def max_positions(self):
        return self.max_target_positions


class PreNormDecoder(PreNormDecoderBase, FairseqIncrementalDecoder):
    """:class:`PreNormDecoderBase` for ``fairseq-generate``: each module keeps its own part
    of ``incremental_state`` (and reorders it for beam search)."""

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        # every attention reorders its own cache (reorder_incremental_state_scripting)
        return incremental_state


class PreNormEncoder(_Embedder, FairseqEncoder):
    """Embedding (+ positions) → blocks → final LayerNorm, with the generic
    ``reorder_encoder_out``. Subclasses write ``forward``.

    Args: as :class:`PreNormDecoderBase` (without the output projection).
    """

    def __init__(self, dictionary, embed_tokens: nn.Embedding, layers: nn.ModuleList,
                 embed_positions: Optional[nn.Module] = None, dropout: float = 0.1,
                 no_scale_embedding: bool = False, max_positions: Optional[int] = None):
        super().__init__(dictionary)
        self._build(dictionary, embed_tokens, layers, embed_positions, dropout, no_scale_embedding)
        self.max_source_positions = max_positions

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Select batch entries ``new_order`` (beam expansion and reordering)."""
        return reorder_encoder_dict(encoder_out, new_order)

    def max_positions(self):
        return self.max_source_positions
