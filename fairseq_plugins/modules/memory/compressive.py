"""The Compressive Transformer's compressed memory, one per layer.

Rae, Potapenko, Jayakumar & Lillicrap, "Compressive Transformers for Long-Range Sequence
Modelling", ICLR 2020 (arXiv 1911.05507), §3; docs/design/architecture.md, "Memory". The FIFO
memory of the last n_m hidden states is the host attention's short-term memory
(:class:`~fairseq_plugins.modules.attention.rotary.ShortTermMemoryAttention`, ``--mem-len``);
this module keeps the compressed memory of n_cm slots. The states that leave the short-term
memory when a segment enters it (the block's ``"evicted"`` input: the n_s oldest once the
short-term memory is full) are compressed at rate c into ⌈n_s / c⌉ slots that enter the
compressed memory, the oldest slots leaving past n_cm. The host attends over [compressed
memory; memory; segment] in one softmax (``contribution`` ``"keys_values"``), so the temporal
range is n_s + n_m + c·n_cm.

Compression f_c, kernel and stride c along time: ``"mean"`` pooling (no parameters) or
``"conv"``, a 1D convolution C → C trained by the attention-reconstruction loss (§3.2, Alg. 2)

    L_attn = mean over the slots whose chunk entered, the segment's queries and the channels of
             (attn(h, old_mem) − attn(h, f_c(old_mem)))²

with attn the host's content-based attention (:meth:`~fairseq_plugins.modules.attention.contract.
ProjectedAttention.content_read`: its W_K, W_V held fixed, the queries h detached), so that L_attn
trains f_c only; the compressed memory enters the main network detached, so the main loss does
not train f_c. ``MemoryStep.loss`` carries L_attn to the criterion (``infinite_former_kl``,
``--memory-loss-weight``). A chunk whose length is not a multiple of c (a first eviction with
``--mem-len`` not a multiple of c, or after a partial last segment) ends in a slot that pools
its last r < c states (mean over r; the convolution sees them zero-padded to c).

What it holds (``report_holdings``): each compressed slot pools a span of stream positions,
reported as :class:`~fairseq_plugins.modules.memory.contract.MemoryHoldings` with every pooled
token at its slot's index in the compressed memory (0 = oldest). Shapes are time-first
``(T, bsz, C)``.
"""

from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_plugins.config import COMPRESSIONS
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.memory.contract import Memory, MemoryHoldings, MemoryKeysValues, MemoryStep
from fairseq_plugins.modules.state import TensorState, batch_dim


@dataclass
class CompressedMemoryState(TensorState):
    """One layer's compressed memory for ``bsz`` streams (not a parameter; never in the state_dict).

    Attributes:
        slots: ``(P, bsz, C)`` the compressed slots, oldest first, detached; P ≤ n_cm.
        valid: ``(bsz, P)`` bool, False where a slot holds nothing of its stream.
        spans: ``(bsz, P, 2)`` int64, the first stream position and the count of positions each
            slot pools, with ``report_holdings`` on (else ``None``).
        entered: ``(bsz,)`` int64, the positions that entered since each stream began, with
            ``report_holdings`` on (else ``None``).
    """

    slots: Tensor = field(metadata=batch_dim(1))
    valid: Tensor = field(metadata=batch_dim(0))
    spans: Optional[Tensor] = field(default=None, metadata=batch_dim(0))
    entered: Optional[Tensor] = field(default=None, metadata=batch_dim(0))

    @classmethod
    def empty(cls, bsz: int, embed_dim: int, device, record_holdings: bool = False) -> "CompressedMemoryState":
        spans = torch.zeros(bsz, 0, 2, dtype=torch.long, device=device) if record_holdings else None
        entered = torch.zeros(bsz, dtype=torch.long, device=device) if record_holdings else None
        return cls(torch.zeros(0, bsz, embed_dim, device=device), torch.zeros(bsz, 0, dtype=torch.bool, device=device),
                   spans, entered)

    def reset_(self, slots: Tensor) -> None:
        """Empty the memory of the slots where ``slots`` (``(bsz,)`` bool) is True."""
        self.valid = self.valid & ~slots[:, None]
        if self.entered is not None:
            self.entered = self.entered.masked_fill(slots, 0)

    def holdings(self) -> MemoryHoldings:
        """The stream positions each valid slot pools, each at its slot's index (float64)."""
        rows = []
        for b in range(self.valid.size(0)):
            tokens, places = [], []
            for p in torch.nonzero(self.valid[b]).flatten().tolist():
                first, count = (int(v) for v in self.spans[b, p])
                tokens.append(torch.arange(first, first + count, dtype=torch.long))
                places.append(torch.full((count,), float(p), dtype=torch.float64))
            rows.append((torch.cat(tokens) if tokens else torch.zeros(0, dtype=torch.long),
                         torch.cat(places) if places else torch.zeros(0, dtype=torch.float64)))
        width = max([t.numel() for t, _ in rows] + [0])
        out_tokens = torch.full((len(rows), width), -1, dtype=torch.long)
        out_places = torch.full((len(rows), width), float("nan"), dtype=torch.float64)
        for b, (tokens, places) in enumerate(rows):
            out_tokens[b, :tokens.numel()], out_places[b, :places.numel()] = tokens, places
        device = self.valid.device
        return MemoryHoldings(out_tokens.to(device), out_places.to(device))


class CompressiveMemory(Memory):
    """One layer's compressed memory (the module docstring): compression, FIFO and the
    attention-reconstruction loss; its content joins the host attention's keys and values.

    Args:
        embed_dim: C, the width of the host attention's inputs.
        slots: n_cm > 0, the compressed slots kept.
        rate: c > 0, the states pooled into one slot (kernel and stride of f_c).
        compression: ``"conv"`` (trained by the reconstruction loss) or ``"mean"``.
        segment_length: n_s, which c must divide (``None``: not checked).
        wiped: the memory-wiped control (:class:`~fairseq_plugins.modules.memory.contract.Memory`).

    Raises:
        ConfigError: an invalid option (one line naming the fix).
    """

    state_type = CompressedMemoryState
    cache_type = CompressedMemoryState
    inputs = ("evicted",)
    contribution = "keys_values"

    def __init__(self, embed_dim: int, slots: int, rate: int, compression: str = "conv",
                 segment_length: Optional[int] = None, wiped: bool = False):
        super().__init__()
        self.wiped = wiped
        if slots <= 0:
            raise ConfigError(f"--compressed-memory-slots (n_cm) must be positive, got {slots}; for no compressed "
                              "memory use --no-long-term-memory")
        if rate <= 0:
            raise ConfigError(f"--compression-rate (c) must be positive, got {rate}")
        if segment_length is not None and segment_length % rate != 0:
            rates = [str(r) for r in range(2, min(segment_length, 16) + 1) if segment_length % r == 0] or ["1"]
            raise ConfigError(f"--compression-rate {rate} does not divide the segment length {segment_length} "
                              f"(the model's segment); choose a rate that divides it: {', '.join(rates)}")
        if compression not in COMPRESSIONS:
            raise ConfigError(f"--compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
        self.embed_dim, self.slots, self.rate, self.compression = embed_dim, slots, rate, compression
        self.conv = nn.Conv1d(embed_dim, embed_dim, kernel_size=rate, stride=rate) if compression == "conv" else None

    def empty_state(self, bsz: int, device) -> CompressedMemoryState:
        """An empty compressed memory for ``bsz`` streams (recording its holdings with ``report_holdings``)."""
        return CompressedMemoryState.empty(bsz, self.embed_dim, device, self.report_holdings)

    def keys_values(self, state: CompressedMemoryState) -> MemoryKeysValues:
        """The compressed slots ``(P, bsz, C)`` and their validity, for the host's softmax (none
        with ``wiped``: the read sees an empty compressed memory)."""
        if self.wiped:
            return MemoryKeysValues(state.slots[:0], state.valid[:, :0])
        return MemoryKeysValues(state.slots, state.valid)

    # ---- one segment ------------------------------------------------------

    def step(self, query: Tensor, state: CompressedMemoryState, chunk: Optional[Tensor],
             chunk_valid: Optional[Tensor] = None, host: Optional[nn.Module] = None) -> MemoryStep:
        """After the host attended over ``state``'s slots: compress what left the short-term memory.

        Args:
            query: ``(T, bsz, C)`` the host attention's projected queries (the reconstruction
                loss's h, detached here).
            state: this layer's compressed memory the segment read.
            chunk: ``(n, bsz, C)`` what left the short-term memory (detached), or ``None``.
            chunk_valid: ``(bsz,)`` bool, slots whose chunk enters (default: all).
            host: the host attention; with it and ``"conv"``, the step computes L_attn.
        Returns:
            ``MemoryStep(None, state after the chunk entered, None, holdings of ``state``, L_attn or None)``.
        """
        holdings = state.holdings() if state.spans is not None else None
        if chunk is None:
            return MemoryStep(None, state.detach(), None, holdings)
        valid = self.chunk_valid(chunk, chunk_valid)
        compressed = self.compress(chunk)
        loss = None
        if host is not None and self.conv is not None:
            loss = self.reconstruction_loss(query.detach(), chunk, compressed, valid, host)
        return MemoryStep(None, self.enter(state, compressed.detach(), chunk.size(0), valid), None, holdings, loss)

    @staticmethod
    def chunk_valid(chunk: Tensor, chunk_valid: Optional[Tensor]) -> Tensor:
        if chunk_valid is None:
            return torch.ones(chunk.size(1), dtype=torch.bool, device=chunk.device)
        return chunk_valid

    def compress(self, chunk: Tensor) -> Tensor:
        """f_c: ``(n, bsz, C)`` → ``(⌈n / c⌉, bsz, C)``, slot j pooling states j·c … j·c + c − 1."""
        n, bsz, width = chunk.shape
        count = -(-n // self.rate)
        pad = count * self.rate - n
        x = F.pad(chunk.permute(1, 2, 0), (0, pad))  # (bsz, C, count·c)
        if self.conv is not None:
            pooled = self.conv(x)
        else:
            sizes = torch.full((count,), float(self.rate), dtype=x.dtype, device=x.device)
            sizes[-1] = self.rate - pad
            pooled = x.reshape(bsz, width, count, self.rate).sum(dim=-1) / sizes
        return pooled.permute(2, 0, 1)

    def reconstruction_loss(self, query: Tensor, old: Tensor, compressed: Tensor, valid: Tensor,
                            host: nn.Module) -> Tensor:
        """L_attn of the module docstring: ``query`` ``(T, bsz, C)`` detached, ``old`` ``(n, bsz, C)``,
        ``compressed`` ``(⌈n/c⌉, bsz, C)``, ``valid`` ``(bsz,)``; a float32 scalar (0 when no slot
        is valid)."""
        target = host.content_read(query, old)
        approx = host.content_read(query, compressed)
        error = (approx.float() - target.float()).pow(2).mean(dim=(0, 2))  # (bsz,)
        weight = valid.float()
        return (error * weight).sum() / weight.sum().clamp_min(1.0)

    def enter(self, state: CompressedMemoryState, compressed: Tensor, length: int,
              valid: Tensor) -> CompressedMemoryState:
        """The FIFO: ``compressed`` ``(k, bsz, C)`` (pooling ``length`` positions) appended, then the
        last n_cm slots kept; the slots of streams where ``valid`` is False get invalid slots."""
        k, bsz = compressed.size(0), compressed.size(1)
        slots = torch.cat([state.slots, compressed.to(state.slots.dtype)], dim=0)[-self.slots:]
        fresh = valid[:, None].expand(bsz, k)
        new_valid = torch.cat([state.valid, fresh], dim=1)[:, -self.slots:]
        spans, entered = state.spans, state.entered
        if spans is not None:
            first = torch.arange(k, device=valid.device) * self.rate  # (k,)
            counts = (length - first).clamp(max=self.rate)
            new = torch.stack([entered[:, None] + first, counts.expand(bsz, k)], dim=-1)
            spans = torch.cat([spans, new], dim=1)[:, -self.slots:]
            entered = entered + valid.long() * length
        return CompressedMemoryState(slots, new_valid, spans, entered).detach()

    # ---- incremental decoding (docs/generation.md) ------------------------

    def start_segment(self, state: CompressedMemoryState, length: int) -> CompressedMemoryState:
        """The cache of a segment is the compressed memory it reads (the host caches its keys and values)."""
        return state

    def read_step(self, query: Tensor, cache: CompressedMemoryState,
                  filled: int) -> Tuple[None, CompressedMemoryState]:
        """Nothing to add: the host's softmax read the slots (``(None, cache)``)."""
        return None, cache

    def end_segment(self, cache: CompressedMemoryState, chunk: Optional[Tensor],
                    chunk_valid: Optional[Tensor] = None) -> CompressedMemoryState:
        """The state after the cached segment: what :meth:`step` returns as its state."""
        if chunk is None:
            return cache.detach()
        valid = self.chunk_valid(chunk, chunk_valid)
        return self.enter(cache, self.compress(chunk).detach(), chunk.size(0), valid)

    def extra_repr(self) -> str:
        return f"slots={self.slots}, rate={self.rate}, compression={self.compression}"
