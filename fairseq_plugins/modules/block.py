"""The one pre-norm block of every plugin model: an attention, a feed-forward network
and, optionally, a long-term memory and a cross-attention.

    x = x + Dropout(attention(LN(x)) [+ memory.step(query, ...).out])    (contribution "output")
    x = x + Dropout(attention(LN(x), memory_kv=memory.keys_values(...)))  (contribution "keys_values")
    x = x + Dropout(cross_attention(LN(x)))          (encoder–decoder models)
    x = x + Dropout(FFN(LN(x)))

The attention is any variant of the contract in
:mod:`fairseq_plugins.modules.attention.contract`, which declares its own state and cache
types and the memory inputs it supports; the memory is any
:class:`~fairseq_plugins.modules.memory.contract.Memory` (it reads with the attention's
query, keeps its own state and declares its state and cache types, the inputs it takes and
how it contributes); the block threads the parts' states (:class:`BlockState`,
:class:`BlockCache`) without looking inside them. Module names follow fairseq's
transformer layers (``self_attn``, ``self_attn_layer_norm``, ``encoder_attn``,
``encoder_attn_layer_norm``, ``final_layer_norm``) plus ``ffn`` and
``long_term_memory``. Shapes are time-first ``(T, bsz, C)``.
"""

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, List, NamedTuple, Optional, Tuple

import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.read import ReadStats
from fairseq_plugins.modules.memory.contract import MEMORY_INPUTS, Memory, MemoryHoldings
from fairseq_plugins.modules.state import TensorState, batch_dim

# parameter names of checkpoints written before the shared block (old → new, relative
# to the block); see upgrade_state_dict_named
LEGACY_PARAMETER_NAMES = {
    "q_proj.": "self_attn.q_proj.", "k_proj.": "self_attn.k_proj.", "v_proj.": "self_attn.v_proj.",
    "out_proj.": "self_attn.out_proj.", "rotary.": "self_attn.rotary.",
    "fc1.": "ffn.fc1.", "fc2.": "ffn.fc2.",
    "memory_attn.": "encoder_attn.memory_attn.", "lead_attn.": "encoder_attn.lead_attn.",
}
# flat names of the training memory saved in checkpoints before BlockState (old → new)
LEGACY_STATE_NAMES = {"stm": "attention.states", "stm_valid": "attention.valid", "chunk": "memory.pending",
                      "chunk_valid": "memory.pending_valid", "ltm": "memory"}


# activations computed by one fused kernel instead of fairseq's formula (the same function; values
# within 5e-7): gelu_accurate, GPT-2's tanh approximation of GELU, is seven elementwise passes
# forward and more backward as fairseq writes it (docs/benchmark.md, "GPT-2 against transformers")
FUSED_ACTIVATIONS = {"gelu_accurate": functools.partial(F.gelu, approximate="tanh")}


class FeedForward(nn.Module):
    """fc2(Dropout(activation(fc1(x)))): ``(..., C)`` → ``(..., C)``; ``activation_fn`` is one of
    fairseq's (``gelu_accurate`` runs as :data:`FUSED_ACTIVATIONS`' fused kernel)."""

    def __init__(self, embed_dim: int, ffn_embed_dim: int, activation_fn: str = "gelu",
                 activation_dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.activation_fn: Callable = (FUSED_ACTIVATIONS.get(str(activation_fn))
                                        or utils.get_activation_fn(str(activation_fn)))
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))


@dataclass
class BlockState(TensorState):
    """What a block carries to the next segment: its attention's state (of the type the
    attention declares, ``state_type``: the ∞-former's short-term memory; for the
    summarizer's encoder, the chunk window) and its memory's state (of the type the memory
    declares, ``state_type``), each ``None`` when absent.
    :meth:`PreNormBlock.state_from_dict` rebuilds it from its flat form."""

    attention: Optional[TensorState] = field(default=None)
    memory: Optional[TensorState] = field(default=None)

    def reset_(self, slots: Tensor) -> None:
        for part in (self.attention, self.memory):
            if part is not None:
                part.reset_(slots)


@dataclass
class BlockCache(TensorState):
    """A block's incremental-decoding state inside a segment (:meth:`PreNormBlock.step`):
    its attention's cache (of the type the attention declares, ``cache_type``) and its
    memory's cache (the memory's ``cache_type``), each ``None`` when absent; with a memory, ``memory_inputs``
    ``(L, bsz, C)``, a buffer of what of the segment's L positions enters the memory when
    the segment is full (per ``memory_input``: attention or residual-stream inputs, detached;
    positions not reached yet are zero),
    and for ``"evicted"`` ``start``, the attention state the segment started with.
    :meth:`PreNormBlock.cache_from_dict` rebuilds it from its flat form."""

    attention: Optional[TensorState] = field(default=None)
    memory: Optional[TensorState] = field(default=None)
    memory_inputs: Optional[Tensor] = field(default=None, metadata=batch_dim(1))
    start: Optional[TensorState] = field(default=None)


class BlockOutput(NamedTuple):
    """``x`` ``(T, bsz, C)``; the block's next state; the continuous reads' statistics
    (memory, then cross-attention); the cross-attention's weights when asked for; what the
    memory its read saw holds (its report, with ``report_holdings`` on; else ``None``); the
    memory's auxiliary loss (``MemoryStep.loss``, which the criterion adds), or ``None``."""

    x: Tensor
    state: Optional[BlockState]
    stats: List[ReadStats]
    attn: Optional[Tensor]
    holdings: Optional[MemoryHoldings] = None
    loss: Optional[Tensor] = None


class PreNormBlock(nn.Module):
    """See the module docstring.

    Args:
        embed_dim: C.
        attention: the self-attention (any variant of the contract).
        ffn: the feed-forward network.
        memory: a :class:`~fairseq_plugins.modules.memory.contract.Memory` that adds an output
            (reading with the attention's query) or offers the attention extra keys and values
            (an attention that declares ``hosts_memory_keys_values``), or ``None``.
        cross_attention: attention over the encoder output, or ``None``.
        dropout: residual dropout.
        memory_input: what enters the memory after each segment (:data:`MEMORY_INPUTS`),
            one of those the attention declares (``memory_inputs``): ``"segment"`` (the
            segment's attention inputs), ``"evicted"`` (what leaves the attention's
            short-term memory, its ``evicted``) or ``"residual"`` (the segment's
            residual-stream input, before the LayerNorm: GPT-2's setting,
            docs/design/gpt2.md §1); with a memory, also one the memory takes (``inputs``).

    Raises:
        ConfigError: a ``memory_input`` that is unknown or that the attention does not offer
            or the memory does not take; a ``"keys_values"`` memory beside an attention that does
            not host one.
    """

    def __init__(self, embed_dim: int, attention: nn.Module, ffn: nn.Module, memory: Optional[Memory] = None,
                 cross_attention: Optional[nn.Module] = None, dropout: float = 0.1, memory_input: str = "segment"):
        super().__init__()
        memory_input = str(memory_input)
        if memory_input not in MEMORY_INPUTS:
            raise ConfigError(f"--ltm-input must be one of {', '.join(MEMORY_INPUTS)}, got {memory_input!r}")
        if memory is not None:
            check_host(memory, attention)
        if memory_input not in attention.memory_inputs:
            raise ConfigError(f"--ltm-input {memory_input} needs an attention that offers it ({type(attention).__name__} "
                              f"offers {', '.join(attention.memory_inputs)}); use --ltm-input segment")
        if memory is not None:
            check_memory(memory, memory_input)
        self.memory_input = memory_input
        # registered in reading order (norm before its sub-layer): parameters() — and so the
        # summation order of fairseq's gradient norm for --clip-norm — follow it
        self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.self_attn = attention
        self.long_term_memory = memory
        self.encoder_attn_layer_norm = LayerNorm(embed_dim) if cross_attention is not None else None
        self.encoder_attn = cross_attention
        self.final_layer_norm = LayerNorm(embed_dim)
        self.ffn = ffn
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)

    def empty_state(self, bsz: int, device) -> BlockState:
        """The state of ``bsz`` streams that have seen nothing yet."""
        memory = self.long_term_memory
        return BlockState(self.self_attn.empty_state(bsz, device),
                          memory.empty_state(bsz, device) if memory is not None else None)

    def forward(self, x: Tensor, state: Optional[BlockState] = None, *, padding_mask: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None, incremental_state=None, encoder_out=None, slot: str = "",
                need_attn: bool = False) -> BlockOutput:
        """
        Args:
            x: ``(T, bsz, C)`` the residual stream.
            state: this block's state from the previous segment (``None``: stateless use).
            padding_mask, attn_mask, incremental_state, encoder_out, slot: passed to the
                attentions (see :mod:`fairseq_plugins.modules.attention.contract`).
            need_attn: return the cross-attention's weights.
        Returns:
            :class:`BlockOutput`.
        """
        hidden = self.self_attn_layer_norm(x)
        hosted = self.hosted_memory(state.memory if state else None)
        attn = self.self_attn(hidden, padding_mask=padding_mask, attn_mask=attn_mask,
                              incremental_state=incremental_state, state=state.attention if state else None,
                              slot=slot, **hosted)
        y, stats, memory_state, holdings, loss = attn.out, [], None, None, None
        if self.long_term_memory is not None:
            inputs = x if self.memory_input == "residual" else hidden
            chunk, chunk_valid = self.memory_chunk(inputs, state.attention if state else None)
            host = {"host": self.self_attn} if hosted else {}
            step = self.long_term_memory.step(attn.query, state.memory, chunk, chunk_valid, **host)
            memory_state, holdings, loss = step.state, step.holdings, step.loss
            if step.out is not None:
                y = y + step.out
            if step.stats is not None:
                stats.append(step.stats)
        x = x + self.dropout_module(y)
        weights = None
        if self.encoder_attn is not None:
            cross = self.encoder_attn(self.encoder_attn_layer_norm(x), encoder_out=encoder_out,
                                      incremental_state=incremental_state, need_weights=need_attn)
            x = x + self.dropout_module(cross.out)
            if cross.stats is not None:
                stats.append(cross.stats)
            weights = cross.weights
        x = x + self.dropout_module(self.ffn(self.final_layer_norm(x)))
        following = BlockState(attn.state, memory_state) if state is not None else None
        return BlockOutput(x, following, stats, weights, holdings, loss)

    def hosted_memory(self, memory_state) -> dict:
        """The attention's ``memory_kv`` keyword for a ``"keys_values"`` memory, from the state the
        segment starts with (``{}`` for any other memory or none)."""
        memory = self.long_term_memory
        if memory is None or memory.contribution != "keys_values":
            return {}
        return {"memory_kv": memory.keys_values(memory_state)}

    def memory_chunk(self, inputs: Tensor, attention_state) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """What enters the memory after the segment whose ``memory_input`` inputs (residual
        stream or attention inputs) are ``inputs`` ``(T, bsz, C)``, the attention having
        started the segment with ``attention_state``: ``(chunk (L', bsz, C) or None, valid
        (bsz,) or None)``."""
        if self.memory_input == "evicted":
            return self.self_attn.evicted(inputs.detach(), attention_state)
        return inputs.detach(), None

    def state_from_dict(self, flat) -> BlockState:
        """:meth:`BlockState.from_dict` with the ``state_type`` of this block's attention and memory."""
        memory = self.long_term_memory
        return BlockState.from_dict(flat, attention=self.self_attn.state_type,
                                    memory=memory.state_type if memory is not None else None)

    def cache_from_dict(self, flat) -> BlockCache:
        """:meth:`BlockCache.from_dict` with the ``cache_type`` of this block's attention and memory
        and its attention's ``state_type``."""
        memory = self.long_term_memory
        return BlockCache.from_dict(flat, attention=self.self_attn.cache_type, start=self.self_attn.state_type,
                                    memory=memory.cache_type if memory is not None else None)

    # ---- incremental decoding (docs/generation.md) --------------------------
    # Only for an attention and a memory that declare a cache_type (the decoder checks it):
    # they have start_segment / step (the memory: read_step) / end_segment.

    def start_segment(self, state: BlockState, bsz: int, device, length: int) -> BlockCache:
        """The cache of a segment of ``length`` positions that starts from ``state`` (what
        :meth:`forward` got)."""
        memory = self.long_term_memory
        inputs = start = None
        if memory is not None:
            inputs = self.final_layer_norm.weight.new_zeros(length, bsz, self.final_layer_norm.weight.size(0))
            start = state.attention if self.memory_input == "evicted" else None
        hosted = self.hosted_memory(state.memory)
        return BlockCache(self.self_attn.start_segment(state.attention, bsz, device, length, **hosted),
                          memory.start_segment(state.memory, length) if memory is not None else None, inputs, start)

    def step(self, x: Tensor, cache: BlockCache, filled: int) -> Tuple[Tensor, BlockCache]:
        """The next T positions ``(T, bsz, C)`` of the segment, which follow its first
        ``filled``, as :meth:`forward` computes them for the whole segment (no
        cross-attention). Returns ``(x, cache)``; ``cache``'s buffers are written in place."""
        hidden = self.self_attn_layer_norm(x)
        if cache.memory_inputs is not None:
            cache.memory_inputs[filled:filled + x.size(0)] = (x if self.memory_input == "residual" else hidden).detach()
        attn, attention_cache = self.self_attn.step(hidden, cache.attention, filled)
        y, memory_cache = attn.out, None
        if self.long_term_memory is not None:
            out, memory_cache = self.long_term_memory.read_step(attn.query, cache.memory, filled)
            if out is not None:
                y = y + out
        x = x + self.dropout_module(y)
        x = x + self.dropout_module(self.ffn(self.final_layer_norm(x)))
        return x, dataclasses.replace(cache, attention=attention_cache, memory=memory_cache)

    def end_segment(self, cache: BlockCache) -> BlockState:
        """The state after the cached (full) segment: what :meth:`forward` returns as ``state``."""
        memory = None
        if self.long_term_memory is not None:
            chunk, chunk_valid = self.memory_chunk(cache.memory_inputs, cache.start)
            memory = self.long_term_memory.end_segment(cache.memory, chunk, chunk_valid)
        return BlockState(self.self_attn.end_segment(cache.attention), memory)

    def upgrade_state_dict_named(self, state_dict, name: str) -> None:
        """Rename the parameters of checkpoints written before the shared block."""
        prefix = f"{name}." if name else ""
        for key in list(state_dict):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            for old, new in LEGACY_PARAMETER_NAMES.items():
                if rest.startswith(old):
                    state_dict[prefix + new + rest[len(old):]] = state_dict.pop(key)
                    break


def check_host(memory: Memory, attention: nn.Module) -> None:
    """Raise ConfigError unless ``attention`` can host ``memory``'s contribution: extra keys and
    values (``"keys_values"``) need an attention that declares ``hosts_memory_keys_values``."""
    if memory.contribution == "keys_values" and not attention.hosts_memory_keys_values:
        raise ConfigError(f"{type(memory).__name__} contributes extra keys and values to the attention's softmax, "
                          f"which {type(attention).__name__} cannot host; pair it with the softmax attention over "
                          "[memory; segment] (ShortTermMemoryAttention, e.g. --arch compressive_transformer_lm)")


def check_memory(memory: Memory, memory_input: str) -> None:
    """Raise ConfigError unless ``memory`` takes ``memory_input``."""
    if memory_input not in memory.inputs:
        raise ConfigError(f"--ltm-input {memory_input} needs a memory that takes it ({type(memory).__name__} takes "
                          f"{', '.join(memory.inputs)}); use --ltm-input {memory.inputs[0]}")


def build_blocks(num_layers: int, share: str, make_attention: Callable[[], nn.Module],
                 make_block: Callable[[nn.Module], nn.Module]) -> nn.ModuleList:
    """``num_layers`` blocks with layer-wise sharing ``share`` (none | attention | all).

    With sharing, the same module object appears several times in the list;
    ``parameters()`` and the state_dict count it once.
    """
    share = str(share)
    if share == "all":
        return nn.ModuleList([make_block(make_attention())] * num_layers)
    if share == "attention":
        attention = make_attention()
        return nn.ModuleList([make_block(attention) for _ in range(num_layers)])
    return nn.ModuleList([make_block(make_attention()) for _ in range(num_layers)])
