"""The skeleton every plugin model is built on: embeddings, positions, dropout, the
layer loop over :class:`~fairseq_plugins.modules.block.PreNormBlock` s, the final
LayerNorm, the output projection and the encoder-output reordering for beam search
(docs/design/architecture.md), and the segment loops of the segmented memory models
(:class:`SegmentIncrementalDecoder`). A model file only chooses the blocks' parts.

Parameters are created in the order the caller builds the parts (embeddings, then
positions, then layers, then the final norm and output projection), so that a
model's random initialisation depends only on its own ``build_model``.
"""

import math
from typing import Dict, List, Optional, Tuple

import torch

from fairseq.models import FairseqDecoder, FairseqEncoder, FairseqIncrementalDecoder
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn

from fairseq_plugins.config import check_not_empty
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.block import LEGACY_STATE_NAMES
from fairseq_plugins.modules.memory_bank import MemoryBank
from fairseq_plugins.modules.state import flatten_layers, unflatten_layers

# encoder-output entries stored time first, (T, bsz, C); the others are batch first
TIME_FIRST = ("encoder_out", "encoder_states")


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


class SegmentIncrementalDecoder(PreNormDecoder):
    """:class:`PreNormDecoder` of a segmented memory model (the ∞-former LM, GPT-2): blocks
    of ``segment_length`` tokens, state carried between segments and, through the
    :class:`~fairseq_plugins.modules.memory_bank.MemoryBank`, between calls. It owns both
    segment loops: the full forward (:meth:`extract_segments`) and incremental decoding
    with the blocks' ``start_segment`` / ``step`` / ``end_segment`` (docs/generation.md).
    A subclass builds the blocks and says only what differs: how new tokens are embedded
    (:meth:`embed_new`) and the output layer.

    Args: as :class:`PreNormDecoderBase`, and segment_length: L, the tokens of a segment.
        short_term_memory_length: S, the positions of the blocks' short-term memory (0: none;
            reported by ``StreamingMemoryModel.segment_lengths``).

    Incremental decoding keeps in fairseq's ``incremental_state`` one flat dict of the
    per-layer :class:`~fairseq_plugins.modules.block.BlockCache` (``flatten_layers``) plus
    ``seen`` ``(bsz,)``, the prefix tokens consumed, and ``filled`` ``(bsz,)``, the tokens of
    the current segment so far (the next token's position in it); a segment is pushed
    (``end_segment`` → ``start_segment``) as soon as it is full, as the full forward does.
    Code outside the decoder reaches it only through :meth:`decoding_state` and :meth:`continue_from`.
    """

    def __init__(self, dictionary, embed_tokens: nn.Embedding, layers: nn.ModuleList, *, segment_length: int,
                 short_term_memory_length: int = 0, **kwargs):
        super().__init__(dictionary, embed_tokens, layers, **kwargs)
        self.segment_length = segment_length
        self.short_term_memory_length = short_term_memory_length
        # one list of per-layer states per stream key, between calls; never in the state_dict
        self.memory_bank = MemoryBank([layer.state_from_dict for layer in self.layers],
                                      legacy_names=LEGACY_STATE_NAMES)

    def extract_features(self, prev_output_tokens: Tensor, encoder_out=None, incremental_state=None,
                         return_all_hiddens: bool = False, memory_key: Optional[str] = None,
                         reset_memory: Optional[Tensor] = None, **unused):
        """
        Args:
            prev_output_tokens: ``(bsz, T)`` token ids, T ≥ 1; any T (cut into segments of L).
                With ``incremental_state``: the whole prefix, of which only the tokens not
                seen yet are processed (:meth:`extract_incremental`).
            memory_key: keep the memory between calls under this key (the ``streaming_lm``
                task passes its split name); ``None``: start empty and keep nothing.
            reset_memory: ``(bsz,)`` bool, slots whose stream starts here.
        Returns:
            ``(features (bsz, T, C), extra)``; ``extra["ltm_stats"]`` lists, per segment and
            layer, the long-term memory reads' ``ReadStats`` (for the KL term).
        Raises:
            ConfigError: an empty input (T = 0).
        """
        if incremental_state is not None:
            return self.extract_incremental(prev_output_tokens, incremental_state)
        return self.extract_segments(prev_output_tokens, memory_key, reset_memory, return_all_hiddens)

    def extract_segments(self, prev_output_tokens: Tensor, memory_key: Optional[str] = None,
                         reset_memory: Optional[Tensor] = None, return_all_hiddens: bool = False):
        """The full forward, segment by segment, with the memory of ``memory_key`` taken from
        the bank and put back (arguments and result: :meth:`extract_features`)."""
        check_not_empty(prev_output_tokens, "the decoder input")
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
        x = self.layer_norm(torch.cat(outputs, dim=0))
        self.memory_bank.put(memory_key, states)
        inner_states = [x] if return_all_hiddens else []
        return x.transpose(0, 1), {"ltm_stats": ltm_stats, "inner_states": inner_states, "attn": [None]}

    def check_incremental(self) -> None:
        """Raise ConfigError unless every block's attention decodes incrementally (declares a ``cache_type``)."""
        for layer in self.layers:
            if layer.self_attn.cache_type is None:
                raise ConfigError(f"incremental decoding needs an attention with a segment cache in every block "
                                  f"({type(layer.self_attn).__name__} has none); score without incremental_state")

    def embed_new(self, tokens: Tensor, filled: int) -> Tensor:
        """``(bsz, T)`` new tokens that follow ``filled`` others of their segment → ``(T, bsz, C)``
        block inputs (default: no absolute positions, so ``filled`` does not matter)."""
        return self.embed(tokens)[0]

    def extract_incremental(self, prev_output_tokens: Tensor, incremental_state):
        """The features of the prefix's tokens not seen yet, state in ``incremental_state``.

        Args:
            prev_output_tokens: ``(bsz, P)`` the whole prefix; the first P₀ tokens (those
                of earlier calls) are already in the state, the P − P₀ others are
                processed segment by segment (one token per call from fairseq's
                generator; a whole prompt at once is a chunked prefill).
        Returns:
            ``(features (bsz, P − P₀, C), extra)``.
        Raises:
            ConfigError: nothing new in the prefix, or padding among several new tokens
                (a batch of prompts of different lengths).
        """
        x = self._advance(prev_output_tokens, incremental_state, keep=True)
        return x.transpose(0, 1), {"ltm_stats": [], "inner_states": [x], "attn": [None]}

    def prefill(self, prev_output_tokens: Tensor, incremental_state) -> Tensor:
        """:meth:`extract_incremental` for a long prompt: the same state, but the new tokens
        are embedded and run one segment at a time and only the last position's features are
        kept, so memory never holds more than one segment of activations, whatever the
        prompt's length (docs/generation.md).

        Returns:
            ``(bsz, 1, C)`` the features of the prefix's last token.
        Raises:
            ConfigError: as :meth:`extract_incremental`.
        """
        return self._advance(prev_output_tokens, incremental_state, keep=False).transpose(0, 1)

    def _advance(self, prev_output_tokens: Tensor, incremental_state, keep: bool) -> Tensor:
        bsz, device = prev_output_tokens.size(0), prev_output_tokens.device
        seen, filled, caches = self.load_caches(incremental_state, bsz, device)
        new = self._new_tokens(prev_output_tokens, seen)
        x, filled = self._read(new, filled, caches, keep)
        self.store_caches(incremental_state, seen + new.size(1), filled, caches, bsz, device)
        return x

    def decoding_state(self, incremental_state) -> Optional[Dict[str, Tensor]]:
        """What incremental decoding keeps in ``incremental_state``: one flat ``{name: tensor}``
        dict (the per-layer caches of docs/generation.md's tables, ``seen`` and ``filled``),
        or ``None`` before the first call."""
        return self.get_incremental_state(incremental_state, "memory")

    def continue_from(self, incremental_state, state: Dict[str, Tensor]) -> None:
        """Start ``incremental_state`` from ``state`` (a :meth:`decoding_state`, e.g. after a
        :meth:`prefill`), counting no token as seen: the whole prefix of the next call is new
        and follows the tokens ``state`` holds (a generator's own tokens after a prompt).
        Decoding goes on in a copy (the caches' buffers are written in place), so ``state``
        can start other continuations."""
        state = {name: tensor.clone() for name, tensor in state.items()}
        state["seen"] = torch.zeros_like(state["seen"])
        self.set_incremental_state(incremental_state, "memory", state)

    def _new_tokens(self, prev_output_tokens: Tensor, seen: int) -> Tensor:
        new = prev_output_tokens[:, seen:]
        if new.size(1) == 0:
            raise ConfigError(f"the incremental state has seen {seen} tokens and the prefix has "
                              f"{prev_output_tokens.size(1)}: pass a longer prefix or a fresh incremental_state")
        if new.size(1) > 1 and bool(new.eq(self.padding_idx).any()):  # (the generator's dead beams may hold pad)
            raise ConfigError("padding in a prompt: generate prompts of different lengths one at a time "
                              "(or in batches of equal length)")
        return new

    def _read(self, new: Tensor, filled: int, caches: list, keep: bool) -> Tuple[Tensor, int]:
        """Run ``new`` ``(bsz, T)`` after ``filled`` tokens of the current segment through the
        blocks, piece by piece up to each segment's end, updating ``caches`` in place. Returns the
        final-normed features ``(T, bsz, C)`` of every new token (``keep``) or of the last one
        ``(1, bsz, C)``, and the tokens of the then current segment."""
        bsz, device = new.shape[0], new.device
        outputs, start = [], 0
        while start < new.size(1):
            stop = min(new.size(1), start + self.segment_length - filled)
            h = self.embed_new(new[:, start:stop], filled)  # (T', bsz, C)
            for i, layer in enumerate(self.layers):
                h, caches[i] = layer.step(h, caches[i], filled)
            outputs = outputs + [h] if keep else [h[-1:]]
            filled += stop - start
            start = stop
            if filled == self.segment_length:  # the segment is full: push it
                caches[:] = [layer.start_segment(layer.end_segment(c), bsz, device, self.segment_length)
                             for layer, c in zip(self.layers, caches)]
                filled = 0
        return self.layer_norm(torch.cat(outputs, dim=0)), filled

    def load_caches(self, incremental_state, bsz: int, device):
        """``(tokens seen, tokens of the current segment, per-layer caches)`` from
        ``incremental_state`` (empty ones first)."""
        flat = self.decoding_state(incremental_state)
        if flat is None:
            self.check_incremental()
            return 0, 0, [layer.start_segment(layer.empty_state(bsz, device), bsz, device, self.segment_length)
                          for layer in self.layers]
        return int(flat["seen"][0]), int(flat["filled"][0]), unflatten_layers(flat, self._cache_types())

    def _cache_types(self):
        return [layer.cache_from_dict for layer in self.layers]

    def store_caches(self, incremental_state, seen: int, filled: int, caches, bsz: int, device) -> None:
        flat = flatten_layers(caches)
        flat["seen"] = torch.full((bsz,), seen, dtype=torch.long, device=device)
        flat["filled"] = torch.full((bsz,), filled, dtype=torch.long, device=device)
        self.set_incremental_state(incremental_state, "memory", flat)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Select hypotheses ``new_order`` of every cached tensor (beam search, finished
        hypotheses leaving the batch)."""
        flat = self.decoding_state(incremental_state)
        if flat is None:
            return
        caches = [c.index_select(new_order) for c in unflatten_layers(flat, self._cache_types())]
        self.store_caches(incremental_state, int(flat["seen"][0]), int(flat["filled"][0]), caches,
                          new_order.numel(), new_order.device)


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
