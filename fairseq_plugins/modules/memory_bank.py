"""Streaming state between calls: who keeps it and how a model declares it
(docs/design/architecture.md, "Memory bank"; the state objects are
:class:`~fairseq_plugins.modules.state.TensorState` s).

* :class:`MemoryBank` keeps one list of per-layer states per stream key
  (``"train"``, ``"valid"``, ...), so that training and validation streams never mix.
* :class:`StreamingMemoryModel` is the declared protocol of a model whose memory
  outlives a call: the ``streaming_lm`` task and the scripts reset, save and
  restore memory through it and nothing else.
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_plugins.modules.state import TensorState


class MemoryBank:
    """Per-stream states kept between calls, one list of per-layer states per key.

    Args:
        restore: per layer, the function that rebuilds its state from its flat form
            (a block's ``state_from_dict``).
        legacy_names: old flat names → new ones, for the states of checkpoints written
            before the block's state had its parts (docs/design/architecture.md, "Checkpoints").
    """

    def __init__(self, restore: Sequence[Callable[[Dict[str, Tensor]], TensorState]],
                 legacy_names: Optional[Dict[str, str]] = None):
        self.restore = list(restore)
        self.legacy_names = dict(legacy_names or {})
        self._states: Dict[str, List[TensorState]] = {}

    def get(self, key: Optional[str], bsz: int, reset: Optional[Tensor] = None) -> Optional[List[TensorState]]:
        """The states kept under ``key`` for a batch of ``bsz`` streams, with the slots
        where ``reset`` (``(bsz,)`` bool) is True emptied; ``None`` when there are none,
        when ``key`` is ``None``, or when the batch's streams changed (another size)."""
        states = self._states.get(key) if key is not None else None
        if states is None or any(s.batch_size not in (None, bsz) for s in states):
            return None
        if reset is not None and bool(reset.any()):
            for s in states:
                s.reset_(reset.to(torch.bool))
        return states

    def peek(self, key: str) -> Optional[List[TensorState]]:
        """The states kept under ``key`` as they are (``None`` if none)."""
        return self._states.get(key)

    def put(self, key: Optional[str], states: List[TensorState]) -> None:
        if key is not None:
            self._states[key] = states

    def reset(self, key: Optional[str] = None) -> None:
        """Forget the states of one key (``None``: of every key)."""
        if key is None:
            self._states.clear()
        else:
            self._states.pop(key, None)

    def state_dict(self, key: str) -> Dict[str, Tensor]:
        """The states of ``key`` as ``{"<layer>.<name>": tensor}`` (empty if none),
        detached, for checkpoints (loads with ``weights_only=True``)."""
        states = self._states.get(key)
        if states is None:
            return {}
        return {f"{i}.{name}": t.detach() for i, s in enumerate(states) for name, t in s.to_dict().items()}

    def load_state_dict(self, key: str, flat: Dict[str, Tensor], device=None) -> None:
        """Restore what :meth:`state_dict` returned (an empty dict resets ``key``)."""
        if not flat:
            self.reset(key)
            return
        per_layer: List[Dict[str, Tensor]] = [{} for _ in self.restore]
        for name, tensor in flat.items():
            layer, rest = name.split(".", 1)
            for old, new in self.legacy_names.items():
                if rest == old or rest.startswith(old + "."):
                    rest = new + rest[len(old):]
                    break
            per_layer[int(layer)][rest] = tensor if device is None else tensor.to(device)
        self._states[key] = [rebuild(d) for rebuild, d in zip(self.restore, per_layer)]


class StreamingMemoryModel:
    """Mixin declaring that a model keeps memory between calls (a ``BaseFairseqModel``).

    A language model whose decoder owns a ``memory_bank`` (a
    :class:`~fairseq_plugins.models.segment_decoder.SegmentIncrementalDecoder`) gets it wired by
    this mixin's ``__init__(decoder)``; another model calls
    ``self.init_memory_bank(bank, segment_lengths)``. The ``streaming_lm`` task and the
    tools use only the methods below.
    """

    _memory_bank: MemoryBank
    _segment_lengths: Tuple[int, int]

    def __init__(self, decoder, *args, **kwargs):
        super().__init__(decoder, *args, **kwargs)
        self.init_memory_bank(decoder.memory_bank, (decoder.segment_length, decoder.short_term_memory_length))

    def init_memory_bank(self, bank: MemoryBank, segment_lengths: Tuple[int, int]) -> None:
        self._memory_bank, self._segment_lengths = bank, segment_lengths

    def segment_lengths(self) -> Tuple[int, int]:
        """``(L, S)``: the tokens of each segment the model runs at once and the positions
        of its short-term memory (0: none), both fixed by its configuration (a checkpoint
        keeps them, whatever the task's ``--tokens-per-sample``)."""
        return self._segment_lengths

    def position_limit(self) -> Optional[int]:
        """The longest segment the model's position table holds (``None``: no table, e.g.
        rotary positions)."""
        return None

    @property
    def memory_bank(self) -> MemoryBank:
        return self._memory_bank

    def reset_memory(self, key: Optional[str] = None) -> None:
        """Forget the memory of stream key ``key`` (``None``: every key)."""
        self._memory_bank.reset(key)

    def memory_state_dict(self, key: str) -> Dict[str, Tensor]:
        """The memory of ``key`` as a flat dict of tensors (empty if none)."""
        return self._memory_bank.state_dict(key)

    def load_memory_state_dict(self, key: str, flat: Dict[str, Tensor]) -> None:
        """Restore a :meth:`memory_state_dict` (an empty dict resets ``key``)."""
        device = next(self.parameters()).device
        self._memory_bank.load_state_dict(key, flat, device)
