"""The registry of long-term memories a block can hold beside its attention
(docs/design/architecture.md, "Memory"): ``--memory-type NAME`` is a lookup here.

Each entry is a :class:`MemorySpec`: whether the memory reads the model's shared continuous
basis (one :class:`~fairseq_plugins.modules.continuous.basis.ContinuousBasis` for every layer),
how one layer's memory is built from the model's config, and the options only it reads. A new
memory is one module in this package, one entry of :data:`MEMORIES` and its name in
:data:`fairseq_plugins.config.MEMORY_TYPES` (the option's choices; a test holds the two equal).
:func:`check_memory_options` refuses a memory that ``--no-long-term-memory`` removes and names,
in one warning line, the options of another memory than the one chosen.
"""

import logging
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Tuple

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.memory.compressive import CompressiveMemory
from fairseq_plugins.modules.memory.continuous import LongTermMemory
from fairseq_plugins.modules.memory.contract import Memory


logger = logging.getLogger(__name__)


class MemorySpec(NamedTuple):
    """How a memory is built: ``build(cfg, embed_dim, num_heads, basis) -> Memory`` (``basis``
    ``None`` unless ``needs_basis``, which also says that it is read by continuous attention, so
    that ``--memory-read`` applies to it); ``options``: the config fields that this memory alone
    reads (set for another memory, they change nothing)."""

    needs_basis: bool
    build: Callable[..., Memory]
    options: Tuple[str, ...] = ()


def _compressive(cfg, embed_dim: int, num_heads: int, basis: Optional[ContinuousBasis]) -> Memory:
    """As many compressed slots as the continuous memory has basis functions unless
    ``--compressed-memory-slots`` says otherwise (both then hold as many vectors per layer)."""
    slots = cfg.compressed_memory_slots
    return CompressiveMemory(embed_dim, cfg.num_basis_functions if slots is None else slots, cfg.compression_rate,
                             str(cfg.compression), segment_length=cfg.segment_length, wiped=cfg.memory_wiped)


MEMORIES: Dict[str, MemorySpec] = {
    "continuous": MemorySpec(True, LongTermMemory.from_config,
                             ("tau", "no_sticky_memories", "sticky_bins", "num_samples", "basis_widths",
                              "ridge_penalty", "sigma2_min", "no_boundary_padding")),
    "compressive": MemorySpec(False, _compressive, ("compressed_memory_slots", "compression_rate", "compression")),
}


def memory_spec(name: str) -> MemorySpec:
    """The entry of ``--memory-type name``.

    Raises:
        ConfigError: an unregistered name (the line lists the choices).
    """
    if str(name) not in MEMORIES:
        raise ConfigError(f"--memory-type must be one of {', '.join(MEMORIES)}, got {name!r}")
    return MEMORIES[str(name)]


def shared_basis(cfg) -> Optional[ContinuousBasis]:
    """The one basis every layer's memory shares, or ``None`` (no memory, or one without a basis)."""
    if cfg.no_long_term_memory or not memory_spec(cfg.memory_type).needs_basis:
        return None
    return ContinuousBasis.from_config(cfg)


def build_memory(cfg, embed_dim: int, num_heads: int, basis: Optional[ContinuousBasis]) -> Optional[Memory]:
    """One layer's memory of ``--memory-type`` (``None`` with ``--no-long-term-memory``)."""
    if cfg.no_long_term_memory:
        return None
    return memory_spec(cfg.memory_type).build(cfg, embed_dim, num_heads, basis)


def check_memory_read(cfg) -> None:
    """Refuse ``--memory-read`` other than the paper's for a model without a continuous memory.

    Raises:
        ConfigError: one line naming both options.
    """
    if cfg.memory_read == "location":
        return
    if cfg.no_long_term_memory:
        raise ConfigError(f"--memory-read {cfg.memory_read} reads the long-term memory, which --no-long-term-memory "
                          "removes; drop one of the two")
    if not memory_spec(cfg.memory_type).needs_basis:
        raise ConfigError(f"--memory-read {cfg.memory_read} reads a continuous memory, which --memory-type "
                          f"{cfg.memory_type} is not; drop one of the two")


def _flag(name: str, value) -> str:
    """``name`` as the command line gives it with ``value`` (a flag alone when it is a bool)."""
    option = "--" + name.replace("_", "-")
    return option if isinstance(value, bool) else f"{option} {value}"


def inapplicable_options(cfg, defaults: Mapping[str, object]) -> Tuple[str, ...]:
    """The options of ``cfg`` set away from their ``defaults`` (the model config's declared
    defaults) that only another memory than ``--memory-type``'s reads, as the command line gives
    them (empty without a long-term memory: the memory-off twin keeps the memory arm's options,
    so that the two command lines differ in one flag)."""
    if cfg.no_long_term_memory:
        return ()
    chosen = memory_spec(cfg.memory_type)
    others = [name for spec in MEMORIES.values() if spec is not chosen for name in spec.options
              if name not in chosen.options]
    found = []
    for name in others:
        value = getattr(cfg, name, None)
        if name in defaults and value is not None and str(value) != str(defaults[name]):
            found.append(_flag(name, value))
    return tuple(found)


def check_memory_options(cfg, defaults: Mapping[str, object]) -> None:
    """Refuse a ``--memory-type`` that ``--no-long-term-memory`` removes; warn, in one line, of the
    options that only another memory reads (:func:`inapplicable_options`).

    Raises:
        ConfigError: ``--memory-type`` other than ``continuous`` with ``--no-long-term-memory``.
    """
    if cfg.no_long_term_memory and str(cfg.memory_type) != "continuous":
        raise ConfigError(f"--memory-type {cfg.memory_type} builds a long-term memory, which --no-long-term-memory "
                          "removes; drop one of the two (the memory-off twin is --no-long-term-memory alone)")
    unused = inapplicable_options(cfg, defaults)
    if unused:
        owners = [name for name, spec in MEMORIES.items() if str(cfg.memory_type) != name and any(
            flag.split()[0][2:].replace("-", "_") in spec.options for flag in unused)]
        one = len(unused) == 1
        logger.warning("%s %s of --memory-type %s, not of --memory-type %s, the memory built: %s no effect; drop %s",
                       ", ".join(unused), "is an option" if one else "are options", " or ".join(owners),
                       cfg.memory_type, "it has" if one else "they have", "it" if one else "them")
