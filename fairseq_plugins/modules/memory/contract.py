"""The memory contract of the plugin's blocks (docs/design/architecture.md, "Memory").

A memory sits beside a block's self-attention and carries what the stream has seen beyond
the attention's window. The block (:class:`~fairseq_plugins.modules.block.PreNormBlock`)
knows no concrete memory: every memory is a :class:`Memory`, which declares, as class
attributes,

* ``state_type``: the :class:`~fairseq_plugins.modules.state.TensorState` class of its
  state between segments (``empty_state``, ``MemoryStep.state``; every memory declares one);
* ``cache_type``: the ``TensorState`` class of its incremental-decoding cache inside a
  segment (``start_segment``/``read_step``/``end_segment``; docs/generation.md), ``None``
  when it does not decode segment by segment;
* ``inputs``: which of :data:`MEMORY_INPUTS` it takes after each segment;
* ``contribution``: how it contributes to the block (:data:`MEMORY_CONTRIBUTIONS`).

and is called, per segment, ``step(query, state, chunk, chunk_valid) -> MemoryStep`` (update
with what the previous step left pending, read with the attention's query, leave ``chunk``
pending), and per generated token inside a segment ``start_segment`` / ``read_step`` /
``end_segment``. A memory whose contribution is ``"keys_values"`` is also asked, before the
host attention runs, for :meth:`Memory.keys_values` (what the host attends to ahead of its own
window, in the same softmax), and its ``step`` gets the host attention as ``host`` (to read
through the host's projections, e.g. for an auxiliary loss). Shapes are time-first ``(T, bsz, C)``.

What a memory holds: with ``report_holdings`` on (:func:`set_holdings_report`, which the
analysis sets; off by default, so that training computes and carries nothing more), its
empty state starts a record of which stream positions its content stands for, and each
``step`` returns, beside the read's statistics, the :class:`MemoryHoldings` of the memory
that step's read saw. Inputs enter in stream order, each position once (``"evicted"``:
when it leaves the short-term memory), so the k-th vector that entered a slot since its
stream began stands for the stream's token k.
"""

from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.read import ReadStats
from fairseq_plugins.modules.state import TensorState, batch_dim

# what may enter a memory after each segment (a block's memory_input; the attention declares
# which it offers, the memory which it takes): the segment's attention inputs, what leaves the
# attention's short-term memory, the segment's residual-stream inputs (GPT-2's setting)
MEMORY_INPUTS = ("segment", "evicted", "residual")

# how a memory contributes to its block: "output", an output (T, bsz, C) added to the attention's
# (the ∞-former's long-term memory, §3.2); "keys_values", extra keys and values for the host
# attention's softmax (the Compressive Transformer's compressed memory, Rae et al. 2020 §3), hosted
# by an attention that declares hosts_memory_keys_values
MEMORY_CONTRIBUTIONS = ("output", "keys_values")


@dataclass
class MemoryHoldings(TensorState):
    """Which stream positions a memory's content stands for, and where, per stream slot.

    Attributes:
        tokens: ``(bsz, n)`` int64, the stream positions held (counted from the slot's stream
            start, in the order they entered), ``-1`` where a slot holds fewer than n.
        positions: ``(bsz, n)`` float64, each held token's place in the memory (the
            ∞-former's: on [0, 1], docs/design/infinite-former.md §3), NaN where ``tokens``
            is ``-1``.
    """

    tokens: Tensor = field(metadata=batch_dim(0))
    positions: Tensor = field(metadata=batch_dim(0))

    @classmethod
    def empty(cls, bsz: int, device) -> "MemoryHoldings":
        return cls(torch.zeros(bsz, 0, dtype=torch.long, device=device),
                   torch.zeros(bsz, 0, dtype=torch.float64, device=device))

    def count(self) -> Tensor:
        """``(bsz,)`` int64: the tokens each slot holds."""
        return (self.tokens >= 0).sum(dim=1)

    def slot(self, index: int) -> Tuple[Tensor, Tensor]:
        """``(tokens (k,), positions (k,))`` of slot ``index``, on the CPU."""
        held = self.tokens[index] >= 0
        return self.tokens[index][held].cpu(), self.positions[index][held].cpu()

    def reset_(self, slots: Tensor) -> None:
        """Forget what the slots where ``slots`` (``(bsz,)`` bool) is True hold."""
        self.tokens = self.tokens.masked_fill(slots[:, None], -1)
        self.positions = self.positions.masked_fill(slots[:, None], float("nan"))


@dataclass
class MemoryKeysValues(TensorState):
    """What a ``"keys_values"`` memory offers its host attention: vectors in the space of the
    attention's inputs, which the host projects with its own W_K and W_V and places ahead of its
    window, in one softmax (:meth:`Memory.keys_values`).

    Attributes:
        states: ``(P, bsz, C)`` oldest first (detached).
        valid: ``(bsz, P)`` bool, False where a slot holds nothing of its stream.
    """

    states: Tensor = field(metadata=batch_dim(1))
    valid: Tensor = field(metadata=batch_dim(0))


class MemoryStep(NamedTuple):
    """What :meth:`Memory.step` returns.

    Attributes:
        out: ``(T, bsz, C)`` in the query's dtype, to add to the host attention's output
            (``contribution`` ``"output"``); ``None`` for a ``"keys_values"`` memory, which
            contributed through the host's softmax.
        state: the state for the next step (detached).
        stats: the read's :class:`ReadStats` (for the KL term), or ``None``.
        holdings: what the memory the read saw holds (:class:`MemoryHoldings`), with
            ``report_holdings`` on; else ``None``.
        loss: a scalar auxiliary loss of the memory's own parameters, which the criterion adds
            (the Compressive Transformer's attention-reconstruction loss), or ``None``.
    """

    out: Optional[Tensor]
    state: TensorState
    stats: Optional[ReadStats]
    holdings: Optional[MemoryHoldings] = None
    loss: Optional[Tensor] = None


class Wipeable(nn.Module):
    """A module that reads a memory and can be switched to the memory-wiped control
    (``--memory-wiped``, :func:`set_memory_wiped`): every :class:`Memory`, and the summarizer's
    continuous read of the document memory
    (:class:`~fairseq_plugins.modules.attention.continuous_cross.ContinuousCrossAttention`).

    Attributes:
        wiped: every read sees an empty memory, so it adds exactly zero; what the model attends
            to beside the memory (the short-term memory, the summarizer's lead window) is
            untouched (what the memory contributes, free of training noise). Off at construction.
    """

    def __init__(self):
        super().__init__()
        self.wiped = False


class Memory(Wipeable):
    """Base of every memory a block can hold (the module docstring); the defaults of the
    declarations are those of a memory that adds an output and takes any input.

    Attributes:
        report_holdings: the report of :class:`MemoryHoldings` (:func:`set_holdings_report`),
            off at construction.
        wiped: the memory-wiped control (:class:`Wipeable`).
    """

    state_type: Optional[type] = None
    cache_type: Optional[type] = None
    inputs: Tuple[str, ...] = MEMORY_INPUTS
    contribution: str = "output"

    def __init__(self):
        super().__init__()
        self.report_holdings = False

    def silence_(self) -> None:
        """Zero what scales this memory's contribution, so that a model starts as the same
        model without it (a pretrained model extended with a memory: docs/design/gpt2.md §1).

        Raises:
            ConfigError: a memory whose contribution cannot start at exactly zero.
        """
        raise ConfigError(f"{type(self).__name__} cannot start as the model without it (its contribution is "
                          "not an added output); choose --memory-type continuous")

    def empty_state(self, bsz: int, device) -> TensorState:
        """The state of ``bsz`` streams that have seen nothing (with ``report_holdings``, holding
        an empty record)."""
        raise NotImplementedError

    def step(self, query: Tensor, state: TensorState, chunk: Optional[Tensor],
             chunk_valid: Optional[Tensor] = None) -> MemoryStep:
        """One segment: enter what the previous step left pending, read with ``query``
        ``(T, bsz, C)`` (the host attention's projected queries), leave ``chunk``
        ``(L', bsz, C)`` (or ``None``: nothing) pending for the slots where ``chunk_valid``
        ``(bsz,)`` (default: all). A ``"keys_values"`` memory, whose content the host read in
        its softmax, enters ``chunk`` now and also takes the keyword ``host`` (the host
        attention, whose projections it may read through)."""
        raise NotImplementedError

    def keys_values(self, state: TensorState) -> MemoryKeysValues:
        """What the host attention attends to ahead of its window (``contribution``
        ``"keys_values"`` only), from the state the segment starts with."""
        raise NotImplementedError

    def start_segment(self, state: TensorState, length: int) -> TensorState:
        """The cache (``cache_type``) of a segment of ``length`` positions from ``state``."""
        raise NotImplementedError

    def read_step(self, query: Tensor, cache: TensorState, filled: int) -> Tuple[Tensor, TensorState]:
        """The read of the next T queries ``(T, bsz, C)`` after the segment's first ``filled``, as
        :meth:`step` reads them: ``(out (T, bsz, C), cache)`` (``out`` ``None`` for a
        ``"keys_values"`` memory, which the host's cache holds)."""
        raise NotImplementedError

    def end_segment(self, cache: TensorState, chunk: Optional[Tensor],
                    chunk_valid: Optional[Tensor] = None) -> TensorState:
        """The state after the cached segment, ``chunk`` pending: the state :meth:`step` returns."""
        raise NotImplementedError


def memories_of(model: nn.Module, kind: type, refusal: str) -> List[nn.Module]:
    """The modules of ``model`` that are ``kind`` (a :class:`Memory` class), in module order.

    Raises:
        ConfigError: with the message ``refusal`` when there is none.
    """
    memories = [m for m in model.modules() if isinstance(m, kind)]
    if not memories:
        raise ConfigError(refusal)
    return memories


def set_holdings_report(model: nn.Module, on: bool = True) -> int:
    """Switch ``report_holdings`` of every :class:`Memory` of ``model``; returns how many there
    are. A stream records its holdings from its first segment: switch it before the streams start.

    Raises:
        ConfigError: ``model`` has no memory.
    """
    memories = memories_of(model, Memory, f"this {type(model).__name__} has no memory to report on (trained with "
                                          "--no-long-term-memory, or another architecture); pass a model with a memory")
    for memory in memories:
        memory.report_holdings = on
    return len(memories)


def set_memory_wiped(model: nn.Module, wiped: bool = True) -> int:
    """Switch the memory-wiped control (``wiped``) of every :class:`Wipeable` module of ``model``
    (its memories, or the summarizer's reads of the document memory); returns how many there are.
    The same as building the model with ``--memory-wiped``, for a model already loaded.

    Raises:
        ConfigError: ``model`` has no memory (e.g. trained with ``--no-long-term-memory``).
    """
    memories = memories_of(model, Wipeable, f"--memory-wiped needs a model with a long-term memory; this "
                                          f"{type(model).__name__} has none (trained with --no-long-term-memory, or "
                                          "another architecture): drop --memory-wiped")
    for memory in memories:
        memory.wiped = wiped
    return len(memories)
