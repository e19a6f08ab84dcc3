"""Continuous (Gaussian) cross-attention of decoder queries over a fixed-size
memory B ∈ R^{N×m} of basis coefficients.

:class:`ContinuousCrossAttention` is the ∞-former's long-term-memory read
(Martins et al., ACL 2022, §3.2, eqs. 8–10; docs/design/infinite-former.md §2)
used as encoder–decoder attention: K = B W_K, V = B W_V, per head scores
s = K_h q_h / √d ∈ R^N, a Gaussian N(μ, σ²) per (head, query) with
μ = sigmoid(w_μᵀ s), σ² = softplus(w_σᵀ s) (clamped ≥ σ²_min; or the content read,
``--memory-read content``), and the output W_O [V_hᵀ E_{N(μ,σ²)}[ψ]]_h
(:meth:`~fairseq_plugins.modules.continuous.read.ContinuousRead.read`).
Unlike the LM's :class:`~fairseq_plugins.modules.memory.continuous.LongTermMemory`
it has its own query projection and no update: the memory is given (the encoder
fits it once per document). Its cost per query is O(N·e), whatever the length of
the sequence B summarises. The summarizer decoder puts it together with the lead
window's attention (:mod:`fairseq_plugins.modules.attention.document`).

It follows the attention contract (:mod:`fairseq_plugins.modules.attention.contract`) with
``encoder_out`` holding ``memory_coefficients`` ``[(bsz, N, m)]``. During
incremental decoding the prepared memory (:class:`~fairseq_plugins.modules.continuous.read.ReadMemory`)
is computed at the first step and kept in fairseq's ``incremental_state``; beam search reorders it. All of
the memory math runs in float32 with autocast off.
"""

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from fairseq_plugins.config import check_heads
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention.contract import AttentionOutput
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.continuous.read import ContinuousRead, ReadMemory, ReadStats
from fairseq_plugins.modules.memory.contract import Wipeable

_STATE_KEY = "memory_kv"


@with_incremental_state
class ContinuousCrossAttention(ContinuousRead, Wipeable):
    """Gaussian attention over basis coefficients (paper §3.2).

    Args:
        embed_dim: e, the query (decoder) width; divisible by ``num_heads``.
        num_heads: h.
        memory_dim: m, the width of B's rows (the encoder width).
        basis: the :class:`ContinuousBasis` B was fitted with (shared with the encoder).
        sigma2_min: lower clamp of σ².
        read: ``"location"`` (the paper's), ``"content"`` or ``"mixture"``
            (:data:`~fairseq_plugins.modules.continuous.read.READS`).
        wiped: the memory-wiped control (``--memory-wiped``,
            :func:`~fairseq_plugins.modules.memory.contract.set_memory_wiped`): every read
            sees an empty memory (zero values), so it adds exactly zero and its statistics are
            marked invalid (no KL).

    Raises:
        ConfigError: invalid sizes (one line naming the option).
    """

    def __init__(self, embed_dim: int, num_heads: int, memory_dim: int, basis: ContinuousBasis,
                 sigma2_min: float = 1e-4, wiped: bool = False, read: str = "location"):
        super().__init__()
        self.wiped = wiped
        check_heads(embed_dim, num_heads)
        if sigma2_min <= 0:
            raise ConfigError(f"--sigma2-min must be positive, got {sigma2_min}")
        self.signal = basis
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.num_basis, self.sigma2_min = basis.num_basis, sigma2_min
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.build_read(memory_dim, embed_dim, self.num_basis, read)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.q_proj.weight)
        self.reset_read_parameters()
        nn.init.zeros_(self.q_proj.bias)

    def forward(self, x: Tensor, *, encoder_out: Dict, incremental_state=None, **unused) -> AttentionOutput:
        """Read the memory.

        Args:
            x: ``(T, bsz, e)`` decoder states (the layer's normalised input).
            encoder_out: holds ``memory_coefficients`` ``[(bsz, N, m)]``, the memory B.
                With ``incremental_state`` it is used only at the first step (then cached).
            incremental_state: fairseq's generation state, or ``None``.
        Returns:
            :class:`AttentionOutput`: ``out`` ``(T, bsz, e)`` in ``x``'s dtype and
            ``stats`` (μ, σ² ``(bsz, H, T)`` float32, for the KL of §3.4).
        """
        bsz = x.size(1)
        if encoder_out is None or not encoder_out.get("memory_coefficients"):
            raise ConfigError("the summarizer decoder needs the encoder output (encoder_out with "
                              "memory_coefficients)")
        saved = self.get_incremental_state(incremental_state, _STATE_KEY) if incremental_state is not None else None
        if saved is not None and saved.get("scores") is not None:
            memory = ReadMemory(saved["scores"], saved["values"])
        else:
            coefficients = encoder_out["memory_coefficients"][0]
            empty = coefficients.new_zeros(coefficients.size(0), dtype=torch.bool) if self.wiped else None
            memory = self.prepare(coefficients, empty)  # wiped: zero values, so the read adds exactly zero
            if incremental_state is not None:
                self.set_incremental_state(incremental_state, _STATE_KEY, memory._asdict())
        with torch.autocast(device_type=x.device.type, enabled=False):
            q = F.linear(x.float(), self.q_proj.weight.float(), self.q_proj.bias.float())
        out, mu, sigma2 = self.read(q, memory)
        valid = torch.full((bsz,), not self.wiped, dtype=torch.bool, device=x.device)
        return AttentionOutput(out.to(x.dtype), stats=ReadStats(mu, sigma2, valid))

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor):
        """Select the cached prepared memory of batch entries ``new_order`` (beam search)."""
        saved = self.get_incremental_state(incremental_state, _STATE_KEY)
        if saved is not None:
            saved = {k: (v.index_select(0, new_order) if v is not None else None) for k, v in saved.items()}
            incremental_state = self.set_incremental_state(incremental_state, _STATE_KEY, saved)
        return incremental_state

    def extra_repr(self) -> str:
        return (f"N={self.num_basis}, heads={self.num_heads}, sigma2_min={self.sigma2_min}, read={self.read_kind}"
                + (", wiped" if self.wiped else ""))
