"""The registry of long-term memories a block can hold beside its attention
(docs/design/architecture.md, "Memory"): ``--memory-type NAME`` is a lookup here.

Each entry is a :class:`MemorySpec`: whether the memory reads the model's shared continuous
basis (one :class:`~fairseq_plugins.modules.continuous.basis.ContinuousBasis` for every layer)
and how one layer's memory is built from the model's config. A new memory is one module in
this package, one entry of :data:`MEMORIES` and its name in
:data:`fairseq_plugins.config.MEMORY_TYPES` (the option's choices; a test holds the two equal).
"""

from typing import Callable, Dict, NamedTuple, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.memory.compressive import CompressiveMemory
from fairseq_plugins.modules.memory.continuous import LongTermMemory
from fairseq_plugins.modules.memory.contract import Memory


class MemorySpec(NamedTuple):
    """How a memory is built: ``build(cfg, embed_dim, num_heads, basis) -> Memory`` (``basis``
    ``None`` unless ``needs_basis``, which also says that it is read by continuous attention, so
    that ``--memory-read`` applies to it)."""

    needs_basis: bool
    build: Callable[..., Memory]


def _compressive(cfg, embed_dim: int, num_heads: int, basis: Optional[ContinuousBasis]) -> Memory:
    """As many compressed slots as the continuous memory has basis functions unless
    ``--compressed-memory-slots`` says otherwise (both then hold as many vectors per layer)."""
    slots = cfg.compressed_memory_slots
    return CompressiveMemory(embed_dim, cfg.num_basis_functions if slots is None else slots, cfg.compression_rate,
                             str(cfg.compression), segment_length=cfg.segment_length, wiped=cfg.memory_wiped)


MEMORIES: Dict[str, MemorySpec] = {
    "continuous": MemorySpec(True, LongTermMemory.from_config),
    "compressive": MemorySpec(False, _compressive),
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
