"""The ∞-former language model's unbounded long-term memory (LTM), one per layer.

Martins, Marinho & Martins, "∞-former: Infinite Memory Transformer", ACL 2022
(arXiv 2109.00301), §3; docs/design/infinite-former.md §1-§4. After every
segment the old signal is sampled at M points (uniformly, or with sticky
memories where the previous read put its mass), contracted to (0, τ], the L new
gated vectors are appended on (τ, 1] and B is re-fitted; every query of the next
segment reads B with continuous attention.

The module is a :class:`~fairseq_plugins.modules.memory.contract.Memory` (the block's
memory contract; docs/design/architecture.md, "Memory") and owns its state:
:meth:`LongTermMemory.empty_state` makes one and :meth:`LongTermMemory.step` is the
whole per-segment life (update with the chunk left pending by the previous step, read,
leave the new chunk pending); the host block never builds or changes a
:class:`LongTermMemoryState`. With ``report_holdings`` on, the state also records which
stream tokens B stands for and where on [0, 1]
(:mod:`~fairseq_plugins.modules.memory.contracted_timeline`). The math lives in
:mod:`~fairseq_plugins.modules.continuous.basis` (write side) and
:mod:`~fairseq_plugins.modules.continuous.read` (read side); all of it runs
in float32 even when the model is in fp16 or under autocast. Shapes are
fairseq's time-first ``(T, bsz, C)``.
"""

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from fairseq_plugins.config import LongTermMemoryConfig, check_heads
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.continuous.basis import ContinuousBasis, SmoothingGate, sticky_histogram, sticky_positions
from fairseq_plugins.modules.continuous.read import ContinuousRead, ReadMemory, ReadStats
from fairseq_plugins.modules.memory.contract import Memory, MemoryHoldings, MemoryStep, set_memory_wiped  # noqa: F401
from fairseq_plugins.modules.memory.contracted_timeline import enter_chunk
from fairseq_plugins.modules.ops.gaussian import evaluate_basis
from fairseq_plugins.modules.state import TensorState, batch_dim


@dataclass
class LongTermMemoryState(TensorState):
    """One layer's LTM state for ``bsz`` streams (not a parameter; never in the state_dict).

    Attributes:
        coefficients: ``(bsz, N, e)`` float32, the paper's B.
        valid: ``(bsz,)`` bool, False for slots whose memory is empty.
        mu, sigma: ``(bsz, H, T)`` float32, the last read's Gaussians (for sticky
            memories); ``None`` before the first read.
        pending: ``(L, bsz, e)`` the last segment's hidden states, which enter B at
            the next step; ``None`` before the first step.
        pending_valid: ``(bsz,)`` bool.
        holdings: which stream tokens B stands for and where on [0, 1], with
            ``report_holdings`` on (else ``None``).
    """

    coefficients: Tensor = field(metadata=batch_dim(0))
    valid: Tensor = field(metadata=batch_dim(0))
    mu: Optional[Tensor] = field(default=None, metadata=batch_dim(0))
    sigma: Optional[Tensor] = field(default=None, metadata=batch_dim(0))
    pending: Optional[Tensor] = field(default=None, metadata=batch_dim(1))
    pending_valid: Optional[Tensor] = field(default=None, metadata=batch_dim(0))
    holdings: Optional[MemoryHoldings] = field(default=None)

    @classmethod
    def empty(cls, bsz: int, num_basis: int, embed_dim: int, device,
              record_holdings: bool = False) -> "LongTermMemoryState":
        """An empty memory; with ``record_holdings``, an empty record of what it holds."""
        return cls(coefficients=torch.zeros(bsz, num_basis, embed_dim, device=device),
                   valid=torch.zeros(bsz, dtype=torch.bool, device=device),
                   holdings=MemoryHoldings.empty(bsz, device) if record_holdings else None)

    def reset_(self, slots: Tensor) -> None:
        """Empty the memory of the slots where ``slots`` (``(bsz,)`` bool) is True.

        Their sticky statistics are left as they are: an empty slot's next update
        fits the new chunk alone and never samples the old signal.
        """
        keep = (~slots).to(self.coefficients.dtype)
        self.coefficients = self.coefficients * keep[:, None, None]
        self.valid = self.valid & ~slots
        if self.pending_valid is not None:
            self.pending_valid = self.pending_valid & ~slots
        if self.holdings is not None:
            self.holdings.reset_(slots)


@dataclass
class LongTermMemoryCache(TensorState):
    """:class:`LongTermMemory`'s incremental-decoding state inside a segment.

    Attributes:
        memory: the state every token of the segment reads (pending chunk entered).
        scores, values: that memory prepared for reading (:class:`ReadMemory`):
            ``(bsz, 2H, e)`` and ``(bsz, H, N, d)`` (zero values for empty slots).
        mu, sigma2: ``(bsz, H, L)`` buffers for the Gaussians of the segment's L reads: the
            first ``filled`` (the decoder's count) hold those of its reads so far.
    """

    memory: LongTermMemoryState
    scores: Tensor = field(metadata=batch_dim(0))
    values: Tensor = field(metadata=batch_dim(0))
    mu: Tensor = field(metadata=batch_dim(0))
    sigma2: Tensor = field(metadata=batch_dim(0))


class LongTermMemory(Memory, ContinuousRead):
    """One layer's continuous long-term memory: gate, update and read; its output is added to
    the host attention's (``contribution`` ``"output"``).

    Args:
        embed_dim: e, the model width.
        num_heads: h; e must be divisible by h.
        num_basis: N basis functions (a multiple of ``len(basis_widths)``).
        basis_widths: Gaussian widths, each combined with every centre.
        ridge_penalty: λ > 0.
        tau: τ ∈ (0, 1), the share of [0, 1] kept for the old memory.
        num_samples: M > 0 samples of the old signal per update.
        (Defaults: the paper's language-modelling settings.)
        sticky: sample the old signal where attention went (§3.3).
        sticky_bins: D histogram bins.
        sigma2_min: lower clamp of σ².
        boundary_padding: ridge fit with zero padding on both sides.
        basis: a :class:`ContinuousBasis` shared with other layers (then N, the
            widths, λ and the padding come from it).
        wiped: the memory-wiped control (``--memory-wiped``,
            :func:`~fairseq_plugins.modules.memory.contract.set_memory_wiped`):
            every read sees an empty memory, so the module adds exactly zero; what enters
            the memory is dropped at the next segment.
        read: where each query reads: ``"location"`` (the paper's), ``"content"`` or ``"mixture"``
            (:data:`~fairseq_plugins.modules.continuous.read.READS`).

    Raises:
        ConfigError: for any invalid hyper-parameter (one line naming the fix).
    """

    state_type = LongTermMemoryState
    cache_type = LongTermMemoryCache
    inputs = ("segment", "evicted", "residual")
    contribution = "output"

    @classmethod
    def from_config(cls, cfg: LongTermMemoryConfig, embed_dim: int, num_heads: int,
                    basis: ContinuousBasis) -> "LongTermMemory":
        """One layer's memory with ``cfg``'s options (τ, M, sticky memories, D, σ²_min), on the
        model's shared ``basis`` (:meth:`ContinuousBasis.from_config`)."""
        return cls(embed_dim, num_heads, tau=cfg.tau, num_samples=cfg.num_samples, sticky=not cfg.no_sticky_memories,
                   sticky_bins=cfg.sticky_bins, sigma2_min=cfg.sigma2_min, basis=basis,
                   wiped=cfg.memory_wiped, read=cfg.memory_read)

    def __init__(self, embed_dim: int, num_heads: int, num_basis: int = 512,
                 basis_widths: Sequence[float] = (0.005, 0.01), ridge_penalty: float = 0.5, tau: float = 0.5,
                 num_samples: int = 512, sticky: bool = True, sticky_bins: int = 128, sigma2_min: float = 1e-4,
                 boundary_padding: bool = True, basis: Optional[ContinuousBasis] = None, wiped: bool = False,
                 read: str = "location"):
        super().__init__()
        check_heads(embed_dim, num_heads)
        if not 0.0 < tau < 1.0:
            raise ConfigError(f"--tau must lie strictly between 0 and 1, got {tau}")
        if num_samples <= 0:
            raise ConfigError(f"--num-samples (M) must be positive, got {num_samples}")
        if sticky_bins <= 0:
            raise ConfigError(f"--sticky-bins must be positive, got {sticky_bins}")
        if sigma2_min <= 0:
            raise ConfigError(f"--sigma2-min must be positive, got {sigma2_min}")
        self.signal = basis or ContinuousBasis(num_basis, basis_widths, ridge_penalty, boundary_padding)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.num_basis, self.num_samples = self.signal.num_basis, num_samples
        self.tau, self.sticky, self.sticky_bins, self.sigma2_min = tau, sticky, sticky_bins, sigma2_min
        self.wiped = wiped

        self.gate = SmoothingGate(embed_dim)
        self.build_read(embed_dim, embed_dim, self.num_basis, read)
        self.reset_parameters()

    def reset_parameters(self):
        self.reset_read_parameters()

    def silence_(self) -> None:
        """W_O^LTM = 0: the read adds exactly zero until training moves it."""
        nn.init.zeros_(self.out_proj.weight)

    def basis(self, device) -> Tuple[Tensor, Tensor]:
        """fp32 ``(centers, widths)``, each ``(N,)``, on ``device``."""
        return self.signal.basis(device)

    def empty_state(self, bsz: int, device) -> LongTermMemoryState:
        """An empty memory for ``bsz`` streams (recording its holdings with ``report_holdings``)."""
        return LongTermMemoryState.empty(bsz, self.num_basis, self.embed_dim, device, self.report_holdings)

    # ---- one segment ------------------------------------------------------

    def step(self, query: Tensor, state: LongTermMemoryState, chunk: Optional[Tensor],
             chunk_valid: Optional[Tensor] = None) -> MemoryStep:
        """One segment: enter the pending chunk, read with ``query``, keep ``chunk`` pending.

        Args:
            query: ``(T, bsz, e)`` the host attention's projected queries (before any
                positional rotation).
            state: this layer's state from the previous step (or :meth:`empty_state`).
            chunk: ``(L', bsz, e)`` the hidden states that enter the memory at the next
                step (the segment's, or what left the short-term memory), or ``None``.
            chunk_valid: ``(bsz,)`` bool, slots whose chunk enters (default: all).
        Returns:
            :class:`~fairseq_plugins.modules.memory.contract.MemoryStep` (``out`` ``(T, bsz, e)``
            W_O^LTM z in the query's dtype, zeros for empty slots; ``holdings``: those of the
            memory read, when recorded).
        """
        state = self.enter_pending(state)
        out, mu, sigma2 = self(query, state)
        following = self.leave(state, mu, sigma2, chunk, chunk_valid)
        return MemoryStep(out, following, ReadStats(mu, sigma2, state.valid), state.holdings)

    def enter_pending(self, state: LongTermMemoryState) -> LongTermMemoryState:
        """``state`` with its pending chunk entered into B (:meth:`update`), if any; with
        ``wiped``, an empty memory of as many streams (what every read then sees)."""
        if self.wiped:
            return self.empty_state(state.coefficients.size(0), state.coefficients.device)
        if state.pending is not None:
            state = self.update(state, state.pending, state.pending_valid)
        return state

    def leave(self, state: LongTermMemoryState, mu: Tensor, sigma2: Tensor, chunk: Optional[Tensor],
              chunk_valid: Optional[Tensor]) -> LongTermMemoryState:
        """The state after a segment that read ``state`` with Gaussians ``mu``, ``sigma2``
        ``(bsz, H, T)`` (all its queries), ``chunk`` left pending (detached)."""
        if chunk is not None and chunk_valid is None:
            chunk_valid = torch.ones(chunk.size(1), dtype=torch.bool, device=chunk.device)
        return LongTermMemoryState(state.coefficients, state.valid, mu, sigma2.sqrt(), chunk, chunk_valid,
                                   state.holdings).detach()

    # ---- incremental decoding (docs/generation.md) ------------------------

    def start_segment(self, state: LongTermMemoryState, length: int) -> LongTermMemoryCache:
        """The cache of a segment of ``length`` positions that starts from ``state``: the
        memory every token of the segment reads (pending chunk entered), prepared for reading,
        and zero buffers for the reads' Gaussians."""
        entered = self.enter_pending(state)
        state = LongTermMemoryState(entered.coefficients, entered.valid,  # the old μ, σ are not read again
                                    holdings=entered.holdings)
        prepared = self.prepare(state.coefficients, state.valid)
        reads = prepared.scores.new_zeros(prepared.scores.size(0), self.num_heads, length)
        return LongTermMemoryCache(state, prepared.scores, prepared.values, reads, reads.clone())

    def read_step(self, query: Tensor, cache: LongTermMemoryCache,
                  filled: int) -> Tuple[Tensor, LongTermMemoryCache]:
        """Read the segment's memory with the next T queries ``(T, bsz, e)``, which follow its
        first ``filled`` (as :meth:`forward`); their μ, σ² are written into the cache's buffers
        for the sticky update at the end. Returns ``(out (T, bsz, e), cache)``."""
        out, mu, sigma2 = self.read_prepared(query, ReadMemory(cache.scores, cache.values))
        cache.mu[..., filled:filled + query.size(0)] = mu
        cache.sigma2[..., filled:filled + query.size(0)] = sigma2
        return out, cache

    def end_segment(self, cache: LongTermMemoryCache, chunk: Optional[Tensor],
                    chunk_valid: Optional[Tensor] = None) -> LongTermMemoryState:
        """The state after the cached segment, ``chunk`` pending (as :meth:`step` returns it)."""
        return self.leave(cache.memory, cache.mu, cache.sigma2, chunk, chunk_valid)

    # ---- update (paper §3.3) ----------------------------------------------

    def smooth(self, x: Tensor) -> Tensor:
        """Gate the chunk: ``(L, bsz, e)`` → ``(bsz, L, e)`` float32."""
        return self.gate(x.transpose(0, 1))

    def update(self, state: LongTermMemoryState, chunk: Tensor, chunk_valid: Tensor) -> LongTermMemoryState:
        """Append a chunk of L hidden states to the memory and re-fit B.

        Slots with an empty memory fit the chunk alone on (i + ½)/L; the others
        sample the old signal at M points (uniform k/M, or sticky), contract it
        to (0, τ], append the chunk on (τ, 1] and re-fit. The old B is detached
        (no backpropagation through time); the gate's parameters receive
        gradients through the new B.

        Args:
            state: the layer's state (B of shape ``(bsz, N, e)``).
            chunk: ``(L, bsz, e)`` hidden states entering the memory (detached by
                the caller).
            chunk_valid: ``(bsz,)`` bool; slots where it is False keep their memory.
        Returns:
            a new state (μ, σ carried over for the next read; nothing pending; the holdings,
            when recorded, moved as the update moved B).
        """
        with torch.autocast(device_type=chunk.device.type, enabled=False):
            length, device = chunk.size(0), chunk.device
            x_new = self.smooth(chunk)  # (bsz, L, e)
            old = state.coefficients.detach().float()  # (bsz, N, e)
            m = self.num_samples
            # B_new = G_oldᵀ x̄(s) + G_newᵀ x_new (the update's G split by rows), or G_firstᵀ x_new
            # for a slot with an empty memory; the constant G's are cached by the basis
            g_old, new_rows = self.signal.update_matrices(m, length, self.tau, device)  # (M, N), (2, L, N)
            s = None  # where the old signal is sampled: None for uniform k/M
            with torch.no_grad():  # the old memory's part has no gradient (B_past is detached)
                if self.sticky and state.mu is not None:
                    hist = sticky_histogram(state.mu, state.sigma, self.sticky_bins)
                    s = sticky_positions(hist, m, random=self.training)  # (bsz, M)
                    centers, widths = self.basis(device)
                    x_old = torch.bmm(evaluate_basis(s, centers, widths), old)  # (bsz, M, e): x̄(s_k) = Bᵀψ(s_k)
                    b_old = torch.matmul(g_old.t(), x_old)
                else:  # uniform samples k/M: G_oldᵀ ψ(k/M) is a constant (N, N)
                    b_old = torch.matmul(self.signal.uniform_contraction(m, length, self.tau, device), old)
                b_old = b_old.masked_fill_(~state.valid[:, None, None], 0.0)  # a fresh tensor: in place
            g_new = new_rows.index_select(0, state.valid.long())  # (bsz, L, N): first fit where empty
            coefficients = torch.baddbmm(b_old, g_new.transpose(1, 2), x_new)  # one product, no sync
            coefficients = torch.where(chunk_valid[:, None, None], coefficients, old)
        holdings = state.holdings
        if holdings is not None:
            holdings = enter_chunk(holdings, length, self.tau, m, state.valid, chunk_valid, s)
        return LongTermMemoryState(coefficients, state.valid | chunk_valid, state.mu, state.sigma,
                                   holdings=holdings)

    # ---- read (paper §3.2) ------------------------------------------------

    def forward(self, query: Tensor, state: LongTermMemoryState) -> Tuple[Tensor, Tensor, Tensor]:
        """Continuous attention over the memory.

        Args:
            query: ``(T, bsz, e)`` the host attention's projected queries.
            state: the layer's memory; slots with ``valid`` False read zeros.
        Returns:
            ``(out, mu, sigma2)``: ``out`` ``(T, bsz, e)`` in the query's dtype
            (W_O^LTM z); ``mu`` and ``sigma2`` ``(bsz, H, T)`` float32.
        """
        return self.read_prepared(query, self.prepare(state.coefficients, state.valid))

    def read_prepared(self, query: Tensor, memory: ReadMemory) -> Tuple[Tensor, Tensor, Tensor]:
        """:meth:`forward` over B prepared by :meth:`prepare` (with the slots' ``valid``)."""
        out, mu, sigma2 = self.read(query, memory)
        return out.to(query.dtype), mu, sigma2

    def extra_repr(self) -> str:
        return (f"N={self.num_basis}, M={self.num_samples}, tau={self.tau}, "
                f"ridge_penalty={self.signal.ridge_penalty}, sticky={self.sticky}, read={self.read_kind}"
                + (", wiped" if self.wiped else ""))
