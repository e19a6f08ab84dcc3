"""Continuous (Gaussian) cross-attention of decoder queries over a fixed-size
memory B ∈ R^{N×m} of basis coefficients.

This is the ∞-former's long-term-memory read (Martins et al., ACL 2022, §3.2,
eqs. 8–10) used as encoder–decoder attention: K = B W_K, V = B W_V, per head
scores s = K_h q_h / √d ∈ R^N, a Gaussian N(μ, σ²) per (head, query) with
μ = sigmoid(w_μᵀ s), σ² = softplus(w_σᵀ s) (clamped ≥ σ²_min), and the output
W_O [V_hᵀ E_{N(μ,σ²)}[ψ]]_h with the closed form of
:func:`~fairseq_plugins.modules.long_term_memory.expected_basis`.

Unlike :class:`~fairseq_plugins.modules.long_term_memory.LongTermMemory`
(which reads the host attention's query and owns the memory update and its
gate), this module has its own query projection and no update: the memory is
given (the encoder fits it once per document). Its cost per query is
O(N·e), whatever the length of the sequence B summarises.

During incremental decoding K and V (``(bsz, H, N, d)`` each) are computed at
the first step and kept in fairseq's ``incremental_state``; beam search
reorders them with :meth:`reorder_incremental_state`. All of this math runs
in float32 with autocast off (as the LTM).
"""

import math
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.long_term_memory import continuous_attention, rbf_basis

_STATE_KEY = "memory_kv"


@with_incremental_state
class ContinuousCrossAttention(nn.Module):
    """Gaussian attention over basis coefficients (paper §3.2).

    Args:
        embed_dim: e, the query (decoder) width; divisible by ``num_heads``.
        num_heads: h.
        memory_dim: m, the width of B's rows (the encoder width).
        num_basis: N basis functions (a multiple of ``len(basis_widths)``).
        basis_widths: Gaussian widths of the basis (see :func:`rbf_basis`).
        sigma2_min: lower clamp of σ².

    Raises:
        ConfigError: invalid sizes (one line naming the option).
    """

    def __init__(self, embed_dim: int, num_heads: int, memory_dim: int, num_basis: int,
                 basis_widths: Sequence[float], sigma2_min: float = 1e-4):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads != 0:
            raise ConfigError(f"--decoder-attention-heads ({num_heads}) must be positive and divide "
                              f"--decoder-embed-dim ({embed_dim})")
        if sigma2_min <= 0:
            raise ConfigError(f"--sigma2-min must be positive, got {sigma2_min}")
        centers, widths = rbf_basis(num_basis, basis_widths)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.num_basis, self.sigma2_min = num_basis, sigma2_min
        # float64 masters, kept out of the buffers so that model.half() cannot cast them;
        # fp32 copies per device (one entry per device, so the cache stays tiny)
        self._centers64, self._widths64 = centers, widths
        self._basis_cache: Dict[str, Tuple[Tensor, Tensor]] = {}
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(memory_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(memory_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.mu_proj = nn.Parameter(torch.empty(num_basis))  # w_μ ∈ R^N
        self.sigma_proj = nn.Parameter(torch.empty(num_basis))  # w_σ ∈ R^N
        self.reset_parameters()

    def reset_parameters(self):
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
        nn.init.zeros_(self.q_proj.bias)
        nn.init.normal_(self.mu_proj, std=1.0 / math.sqrt(self.num_basis))
        nn.init.normal_(self.sigma_proj, std=1.0 / math.sqrt(self.num_basis))

    def basis(self, device) -> Tuple[Tensor, Tensor]:
        """fp32 ``(centers, widths)``, each ``(N,)``, on ``device``."""
        key = str(device)
        if key not in self._basis_cache:
            self._basis_cache[key] = (self._centers64.to(device=device, dtype=torch.float32),
                                      self._widths64.to(device=device, dtype=torch.float32))
        return self._basis_cache[key]

    def memory_keys_values(self, coefficients: Tensor) -> Tuple[Tensor, Tensor]:
        """K = B W_K and V = B W_V split into heads: ``(bsz, H, N, d)`` each, float32."""
        bsz = coefficients.size(0)
        h, d = self.num_heads, self.head_dim
        with torch.autocast(device_type=coefficients.device.type, enabled=False):
            b = coefficients.float()
            keys = F.linear(b, self.k_proj.weight.float()).view(bsz, -1, h, d).transpose(1, 2)
            values = F.linear(b, self.v_proj.weight.float()).view(bsz, -1, h, d).transpose(1, 2)
        return keys, values

    def forward(self, query: Tensor, coefficients: Tensor,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None
                ) -> Tuple[Tensor, Tensor, Tensor]:
        """Read the memory.

        Args:
            query: ``(T, bsz, e)`` decoder states (the layer's normalised input).
            coefficients: ``(bsz, N, m)`` the memory B. With ``incremental_state``
                it is used only at the first step (its K, V are cached).
            incremental_state: fairseq's generation state, or ``None``.
        Returns:
            ``(out, mu, sigma2)``: ``out`` ``(T, bsz, e)`` in the query's dtype;
            ``mu``, ``sigma2`` ``(bsz, H, T)`` float32 (for the KL of §3.4).
        """
        tgt_len, bsz, _ = query.shape
        h, d = self.num_heads, self.head_dim
        saved = self.get_incremental_state(incremental_state, _STATE_KEY) if incremental_state is not None else None
        if saved is not None and saved.get("keys") is not None:
            keys, values = saved["keys"], saved["values"]
        else:
            keys, values = self.memory_keys_values(coefficients)
            if incremental_state is not None:
                self.set_incremental_state(incremental_state, _STATE_KEY, {"keys": keys, "values": values})
        with torch.autocast(device_type=query.device.type, enabled=False):
            q = F.linear(query.float(), self.q_proj.weight.float(), self.q_proj.bias.float())
            q = q.view(tgt_len, bsz, h, d).permute(1, 2, 0, 3)  # (bsz, H, T, d)
            centers, widths = self.basis(query.device)
            z, mu, sigma2 = continuous_attention(q, keys, values, self.mu_proj.float(), self.sigma_proj.float(),
                                                 centers, widths, self.sigma2_min)  # z: (bsz, H, T, d)
            z = z.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            out = F.linear(z, self.out_proj.weight.float())
        return out.to(query.dtype), mu, sigma2

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor):
        """Select the cached K, V of batch entries ``new_order`` (beam search)."""
        saved = self.get_incremental_state(incremental_state, _STATE_KEY)
        if saved is not None:
            saved = {k: (v.index_select(0, new_order) if v is not None else None) for k, v in saved.items()}
            incremental_state = self.set_incremental_state(incremental_state, _STATE_KEY, saved)
        return incremental_state

    def extra_repr(self) -> str:
        return f"N={self.num_basis}, heads={self.num_heads}, sigma2_min={self.sigma2_min}"
