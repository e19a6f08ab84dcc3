"""The segmented memory decoders' common skeleton: :class:`SegmentIncrementalDecoder`, which
owns both segment loops of the ∞-former LM and GPT-2 — the full forward, segment by segment with
the memory bank, and incremental decoding with the blocks' ``start_segment`` / ``step`` /
``end_segment`` (docs/generation.md, docs/design/architecture.md).
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq_plugins.config import check_not_empty
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import PreNormDecoder
from fairseq_plugins.modules.block import LEGACY_STATE_NAMES
from fairseq_plugins.modules.memory_bank import MemoryBank
from fairseq_plugins.modules.state import flatten_layers, unflatten_layers


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
            layer, the long-term memory reads' ``ReadStats`` (for the KL term);
            ``extra["memory_holdings"]``, per segment and layer, what the memory each read saw
            holds (:class:`~fairseq_plugins.modules.memory.contract.MemoryHoldings`, with the
            memories' ``report_holdings`` on; else ``None``; empty under ``incremental_state``);
            ``extra["memory_losses"]`` the memories' auxiliary losses (scalars, per segment and
            layer that has one: the compressive memory's attention-reconstruction loss).
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
        outputs, ltm_stats, holdings, losses = [], [], [], []
        for start in range(0, total_len, self.segment_length):
            h = x[start:start + self.segment_length]  # (L, bsz, C)
            for i, layer in enumerate(self.layers):
                out = layer(h, states[i])
                h, states[i] = out.x, out.state
                ltm_stats.extend(out.stats)
                holdings.append(out.holdings)
                if out.loss is not None:
                    losses.append(out.loss)
            outputs.append(h)
        x = self.layer_norm(torch.cat(outputs, dim=0))
        self.memory_bank.put(memory_key, states)
        inner_states = [x] if return_all_hiddens else []
        return x.transpose(0, 1), {"ltm_stats": ltm_stats, "memory_holdings": holdings, "memory_losses": losses,
                                   "inner_states": inner_states, "attn": [None]}

    def check_incremental(self) -> None:
        """Raise ConfigError unless every block's attention and memory decode incrementally (declare a
        ``cache_type``)."""
        for layer in self.layers:
            for part, name in ((layer.self_attn, "an attention"), (layer.long_term_memory, "a memory")):
                if part is not None and part.cache_type is None:
                    raise ConfigError(f"incremental decoding needs {name} with a segment cache in every block "
                                      f"({type(part).__name__} has none); score without incremental_state")

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
        return x.transpose(0, 1), {"ltm_stats": [], "memory_holdings": [], "inner_states": [x], "attn": [None]}

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
