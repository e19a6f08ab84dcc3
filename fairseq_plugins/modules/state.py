"""The state protocol: :class:`TensorState`, the base of every object a model carries
from one segment or generation step to the next (docs/design/architecture.md,
"Streaming state").

A state is a dataclass of tensors, optional tensors and nested states, each tensor field
declaring its batch dimension (:func:`batch_dim`). It gives ``batch_size``,
``index_select`` (beam search, a batch that shrinks), ``detach`` and the one serialised
form, a flat ``{name: tensor}`` dict (``to_dict``/``from_dict``), used for checkpoints
and for fairseq's ``incremental_state``; ``reset_(slots)`` is each state's own.
:func:`flatten_layers`/:func:`unflatten_layers` do the same for a list of per-layer states.
"""

import dataclasses
import functools
import typing
from typing import Callable, Dict, List, Optional, Sequence

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
    def from_dict(cls, flat: Dict[str, Tensor], **kinds: Optional[type]):
        """Inverse of :meth:`to_dict` (missing optional fields become ``None``).

        ``kinds`` name the class of a nested field whose owner chooses it (declared as a
        plain :class:`TensorState`, e.g. a block's attention state: the attention declares
        its own type); ``None`` there means the part is absent.
        """
        values = {}
        for f, kind in _field_kinds(cls):
            if f.name in kinds:
                kind = kinds[f.name]
                sub = {k[len(f.name) + 1:]: v for k, v in flat.items() if k.startswith(f.name + ".")}
                values[f.name] = kind.from_dict(sub) if sub and kind is not None else None
            elif kind is not None:
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


def unflatten_layers(flat: Dict[str, Tensor],
                     restore: Sequence[Callable[[Dict[str, Tensor]], TensorState]]) -> List[TensorState]:
    """Inverse of :func:`flatten_layers`: ``restore[i]`` rebuilds layer i's state from its
    flat dict (e.g. a block's ``cache_from_dict``); keys without a layer number are ignored."""
    per_layer: List[Dict[str, Tensor]] = [{} for _ in restore]
    for name, tensor in flat.items():
        layer, _, rest = name.partition(".")
        if layer.isdigit() and tensor is not None:
            per_layer[int(layer)][rest] = tensor
    return [rebuild(d) for rebuild, d in zip(restore, per_layer)]
