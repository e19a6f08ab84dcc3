"""Streaming state: what a model carries from one call to the next, and who owns it.

* :class:`TensorState` is the base of every state object (the short-term memory
  of an attention, the long-term memory's state, a block's state): a dataclass of
  tensors, optional tensors and nested states, each field declaring its batch
  dimension. It gives ``batch_size``, ``index_select`` (beam search, a batch that
  shrinks), ``detach`` and the one serialised form, a flat ``{name: tensor}`` dict
  (``to_dict``/``from_dict``) — used for checkpoints and meant for fairseq's
  ``incremental_state``. ``reset_(slots)`` is each state's own.
* :class:`MemoryBank` keeps one list of per-layer states per stream key
  (``"train"``, ``"valid"``, ...), so that training and validation streams never mix.
* :class:`StreamingMemoryModel` is the declared protocol of a model whose memory
  outlives a call: the ``streaming_lm`` task and the scripts reset, save and
  restore memory through it and nothing else.
"""

import dataclasses
import functools
import typing
from typing import Dict, List, Optional

import torch
from torch import Tensor


def batch_dim(dim: int = 0):
    """Dataclass field metadata: the batch dimension of a tensor field."""
    return {"batch_dim": dim}


class TensorState:
    """Base of the dataclass states (see the module docstring)."""

    def _parts(self):
        for f in dataclasses.fields(self):
            yield f, getattr(self, f.name)

    @property
    def batch_size(self) -> Optional[int]:
        """Streams in this state (``None`` if it holds no tensor)."""
        for f, value in self._parts():
            if isinstance(value, Tensor):
                return value.size(f.metadata.get("batch_dim", 0))
            if isinstance(value, TensorState) and value.batch_size is not None:
                return value.batch_size
        return None

    def _map(self, fn) -> "TensorState":
        changes = {}
        for f, value in self._parts():
            if isinstance(value, Tensor):
                changes[f.name] = fn(value, f.metadata.get("batch_dim", 0))
            elif isinstance(value, TensorState):
                changes[f.name] = value._map(fn)
        return dataclasses.replace(self, **changes)

    def index_select(self, order: Tensor) -> "TensorState":
        """The states of slots ``order`` (``(bsz',)`` long), in that order."""
        return self._map(lambda t, dim: t.index_select(dim, order.to(t.device)))

    def detach(self) -> "TensorState":
        return self._map(lambda t, dim: t.detach())

    def to(self, device) -> "TensorState":
        return self._map(lambda t, dim: t.to(device))

    def to_dict(self) -> Dict[str, Tensor]:
        """Flat ``{name: tensor}`` (nested states as ``"field.name"``; ``None`` left out)."""
        out = {}
        for f, value in self._parts():
            if isinstance(value, Tensor):
                out[f.name] = value
            elif isinstance(value, TensorState):
                out.update({f"{f.name}.{k}": v for k, v in value.to_dict().items()})
        return out

    @classmethod
    def from_dict(cls, flat: Dict[str, Tensor]):
        """Inverse of :meth:`to_dict` (missing optional fields become ``None``)."""
        values = {}
        for f, kind in _field_kinds(cls):
            if kind is not None:
                sub = {k[len(f.name) + 1:]: v for k, v in flat.items() if k.startswith(f.name + ".")}
                values[f.name] = kind.from_dict(sub) if sub else None
            else:
                values[f.name] = flat.get(f.name)
        return cls(**values)


@functools.lru_cache(maxsize=None)
def _field_kinds(cls):
    """``((field, nested TensorState class or None), ...)`` of a state class (cached: the
    type hints are evaluated once per class, not at every generation step)."""
    hints = typing.get_type_hints(cls)
    return tuple((f, next((k for k in typing.get_args(hints[f.name]) or (hints[f.name],)
                           if isinstance(k, type) and issubclass(k, TensorState)), None))
                 for f in dataclasses.fields(cls))


def flatten_layers(states: List[TensorState]) -> Dict[str, Tensor]:
    """Per-layer states → one flat ``{"<layer>.<name>": tensor}`` dict (:meth:`TensorState.to_dict`)."""
    return {f"{i}.{name}": t for i, s in enumerate(states) for name, t in s.to_dict().items()}


def unflatten_layers(flat: Dict[str, Tensor], state_type, num_layers: int) -> List[TensorState]:
    """Inverse of :func:`flatten_layers` (keys without a layer number are ignored)."""
    per_layer: List[Dict[str, Tensor]] = [{} for _ in range(num_layers)]
    for name, tensor in flat.items():
        layer, _, rest = name.partition(".")
        if layer.isdigit() and tensor is not None:
            per_layer[int(layer)][rest] = tensor
    return [state_type.from_dict(d) for d in per_layer]


class MemoryBank:
    """Per-stream states kept between calls, one list of per-layer states per key.

    Args:
        state_type: the per-layer state class (a :class:`TensorState`), used to
            rebuild states from their flat form.
        legacy_names: old flat names → new ones, for states saved by earlier versions.
    """

    def __init__(self, state_type, legacy_names: Optional[Dict[str, str]] = None):
        self.state_type = state_type
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

    def load_state_dict(self, key: str, flat: Dict[str, Tensor], num_layers: int, device=None) -> None:
        """Restore what :meth:`state_dict` returned (an empty dict resets ``key``)."""
        if not flat:
            self.reset(key)
            return
        per_layer: List[Dict[str, Tensor]] = [{} for _ in range(num_layers)]
        for name, tensor in flat.items():
            layer, rest = name.split(".", 1)
            for old, new in self.legacy_names.items():
                if rest == old or rest.startswith(old + "."):
                    rest = new + rest[len(old):]
                    break
            per_layer[int(layer)][rest] = tensor if device is None else tensor.to(device)
        self._states[key] = [self.state_type.from_dict(d) for d in per_layer]


class StreamingMemoryModel:
    """Mixin declaring that a model keeps memory between calls (a ``BaseFairseqModel``).

    A language model whose decoder owns a ``memory_bank`` gets it wired by this mixin's
    ``__init__(decoder)``; another model calls ``self.init_memory_bank(bank, num_layers)``.
    The ``streaming_lm`` task and the scripts use only the methods below.
    """

    _memory_bank: MemoryBank
    _memory_layers: int

    def __init__(self, decoder, *args, **kwargs):
        super().__init__(decoder, *args, **kwargs)
        self.init_memory_bank(decoder.memory_bank, len(decoder.layers))

    def init_memory_bank(self, bank: MemoryBank, num_layers: int) -> None:
        self._memory_bank, self._memory_layers = bank, num_layers

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
        self._memory_bank.load_state_dict(key, flat, self._memory_layers, device)
