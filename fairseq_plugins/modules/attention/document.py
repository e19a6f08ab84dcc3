"""The summarizer decoder's cross-attentions over a document: how the continuous read of the
document memory B, the ordinary attention over the lead window and an exact top-k read over
every encoder state are put together (docs/summarization.md, "How the decoder reads the
document").

* :class:`DocumentMemoryAttention` (``--lead-join sum``): the parts' outputs summed; with
  ``--read-gate`` the continuous read is scaled by tanh(α), α a per-layer scalar initialised
  at 0, so that the untrained read adds exactly nothing (Flamingo's gated cross-attention,
  Alayrac et al. 2022, §2.2).
* :class:`JointDocumentAttention` (``--lead-join softmax``): one attention whose softmax runs
  over the W lead states *and* the continuous read: per head and query the read contributes
  one more slot, with key and value E_{N(μ,σ²)}[ψ]ᵀ B W_K and E[ψ]ᵀ B W_V (the attention's own
  W_K, W_V applied to the Gaussian-averaged signal x̄ = Bᵀψ, which lives in the encoder
  states' space), so the lead and the memory compete for each query's weight instead of
  being added.
* :class:`TopKAttention` (``--retrieval-topk k``): each head attends to its k best-matching
  encoder states of the whole document (Unlimiformer, Bertsch et al., NeurIPS 2023, §2),
  the exact retrieving read, beside the others. It keeps every encoder state (its memory
  grows with the document), so it is the reference a continuous read is measured against;
  the memory-wiped control wipes it too (it retrieves nothing).

All follow the attention contract (:mod:`fairseq_plugins.modules.attention.contract`); keys and
values are computed once per document and kept in fairseq's ``incremental_state`` while
decoding (beam search reorders them).
"""

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from fairseq_plugins.config import check_heads
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention
from fairseq_plugins.modules.attention.contract import AttentionOutput
from fairseq_plugins.modules.attention.multihead import EncoderDecoderAttention
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.continuous.read import ContinuousRead, ReadMemory, ReadStats
from fairseq_plugins.modules.memory.contract import Wipeable

# the --lead-join choices
LEAD_JOINS = ("sum", "softmax")


def _heads(x: Tensor, heads: int) -> Tensor:
    """``(S, bsz, e)`` → ``(bsz, H, S, d)``."""
    length, bsz, dim = x.shape
    return x.view(length, bsz, heads, dim // heads).permute(1, 2, 0, 3)


def reorder_saved(module, incremental_state, key: str, new_order: Tensor):
    """Select batch entries ``new_order`` of the tensors ``module`` keeps under ``key`` in fairseq's
    ``incremental_state`` (batch first); returns the state."""
    saved = module.get_incremental_state(incremental_state, key)
    if saved is not None:
        saved = {name: value.index_select(0, new_order) for name, value in saved.items()}
        incremental_state = module.set_incremental_state(incremental_state, key, saved)
    return incremental_state


class DocumentMemoryAttention(nn.Module):
    """The continuous read of the document memory B plus, when given, ordinary attention over
    the lead window (``encoder_out["encoder_out"]``) and a top-k read, summed.

    Args:
        memory_attn: the :class:`ContinuousCrossAttention`, or ``None`` (no document memory).
        lead_attn: an :class:`~fairseq_plugins.modules.attention.EncoderDecoderAttention`
            over the lead window, or ``None``.
        retrieval: a :class:`TopKAttention` over every encoder state, or ``None``.
        gated: scale the continuous read by tanh(α), α initialised at 0 (``--read-gate``).

    Raises:
        ConfigError: no part at all.
    """

    def __init__(self, memory_attn: Optional[ContinuousCrossAttention],
                 lead_attn: Optional[EncoderDecoderAttention] = None, retrieval: Optional["TopKAttention"] = None,
                 gated: bool = False):
        super().__init__()
        if memory_attn is None and lead_attn is None and retrieval is None:
            raise ConfigError("the decoder reads nothing of the document: keep the memory, or give --lead-window "
                              "or --retrieval-topk")
        self.memory_attn = memory_attn
        self.lead_attn = lead_attn
        self.retrieval = retrieval
        self.read_gate = nn.Parameter(torch.zeros(())) if gated and memory_attn is not None else None

    def forward(self, x: Tensor, *, encoder_out: Dict, incremental_state=None, **unused) -> AttentionOutput:
        out, stats = None, None
        if self.memory_attn is not None:
            read = self.memory_attn(x, encoder_out=encoder_out, incremental_state=incremental_state)
            out, stats = read.out, read.stats
            if self.read_gate is not None:
                out = torch.tanh(self.read_gate).to(out.dtype) * out
        for part in (self.lead_attn, self.retrieval):
            if part is not None:
                more = part(x, encoder_out=encoder_out, incremental_state=incremental_state).out
                out = more if out is None else out + more
        return AttentionOutput(out, stats=stats)


@with_incremental_state
class JointDocumentAttention(ContinuousRead, Wipeable):
    """One multi-head attention over the lead window and the continuous read of B together
    (see the module docstring): W_Q (with bias), W_K, W_V, W_O (no bias) shared by both, and
    the read's placement (w_μ, w_σ for the location read).

    Args:
        embed_dim: e (the decoder width); num_heads: H, dividing e.
        memory_dim: m, the width of B's rows and of the lead states (the encoder width).
        basis: the :class:`ContinuousBasis` B was fitted with.
        read: ``"location"``, ``"content"`` or ``"mixture"`` (:data:`~fairseq_plugins.modules.continuous.read.READS`).
        sigma2_min: lower clamp of σ².
        wiped: the memory-wiped control: the read's slot leaves the softmax, which then runs
            over the lead window alone (its statistics marked invalid).

    Raises:
        ConfigError: invalid sizes or read.
    """

    def __init__(self, embed_dim: int, num_heads: int, memory_dim: int, basis: ContinuousBasis,
                 read: str = "location", sigma2_min: float = 1e-4, wiped: bool = False):
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.wiped = wiped
        self.signal = basis
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.num_basis, self.sigma2_min = basis.num_basis, sigma2_min
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.build_read(memory_dim, embed_dim, self.num_basis, read)
        nn.init.xavier_uniform_(self.q_proj.weight)
        nn.init.zeros_(self.q_proj.bias)
        self.reset_read_parameters()

    def _prepared(self, encoder_out: Dict, incremental_state) -> Dict[str, Tensor]:
        saved = self.get_incremental_state(incremental_state, "document") if incremental_state is not None else None
        if saved is not None:
            return saved
        coefficients = encoder_out["memory_coefficients"][0]
        lead = encoder_out["encoder_out"][0].float()  # (W, bsz, m)
        memory = self.prepare(coefficients)
        prepared = {"scores": memory.scores, "values": memory.values,
                    "keys": self.mixed(_heads(F.linear(coefficients.float(), self.k_proj.weight.float())
                                              .transpose(0, 1), self.num_heads)),  # (bsz, H, N, d)
                    "lead_keys": _heads(F.linear(lead, self.k_proj.weight.float()), self.num_heads),
                    "lead_values": _heads(F.linear(lead, self.v_proj.weight.float()), self.num_heads),
                    "lead_padding": encoder_out["encoder_padding_mask"][0]}
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "document", prepared)
        return prepared

    def forward(self, x: Tensor, *, encoder_out: Dict, incremental_state=None, **unused) -> AttentionOutput:
        """``x`` ``(T, bsz, e)`` → :class:`AttentionOutput` (``out`` in ``x``'s dtype, the read's
        ``stats``). Needs ``encoder_out`` with ``memory_coefficients`` and the lead window.

        Raises:
            ConfigError: an encoder output without them.
        """
        if not encoder_out.get("memory_coefficients") or not encoder_out.get("encoder_out"):
            raise ConfigError("--lead-join softmax needs the document memory and the lead window in the encoder "
                              "output (--lead-window > 0)")
        tgt_len, bsz, _ = x.shape
        scale = 1.0 / math.sqrt(self.head_dim)
        with torch.autocast(device_type=x.device.type, enabled=False):
            p = self._prepared(encoder_out, incremental_state)
            q = F.linear(x.float(), self.q_proj.weight.float(), self.q_proj.bias.float())
            density, mu, sigma2 = self.read_weights(q, ReadMemory(p["scores"], p["values"]))  # (bsz, H, T, N)
            q = _heads(q, self.num_heads) * scale  # (bsz, H, T, d)
            lead_logits = torch.matmul(q, p["lead_keys"].transpose(-1, -2))  # (bsz, H, T, W)
            lead_logits = lead_logits.masked_fill(p["lead_padding"][:, None, None, :], float("-inf"))
            read_key = torch.matmul(density, p["keys"])  # (bsz, H, T, d)
            read_logit = (q * read_key).sum(-1, keepdim=True)  # (bsz, H, T, 1)
            if self.wiped:
                read_logit = torch.full_like(read_logit, float("-inf"))
            weights = torch.softmax(torch.cat([lead_logits, read_logit], dim=-1), dim=-1)
            weights = torch.nan_to_num(weights, nan=0.0)  # a query with nothing to read (empty lead, wiped)
            out = torch.matmul(weights[..., :-1], p["lead_values"])
            out = out + weights[..., -1:] * torch.matmul(density, p["values"])
            out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            out = F.linear(out, self.out_proj.weight.float())
        valid = torch.full((bsz,), not self.wiped, dtype=torch.bool, device=x.device)
        return AttentionOutput(out.to(x.dtype), stats=ReadStats(mu, sigma2, valid))

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Select the cached keys and values of batch entries ``new_order`` (beam search)."""
        return reorder_saved(self, incremental_state, "document", new_order)

    def extra_repr(self) -> str:
        return f"N={self.num_basis}, heads={self.num_heads}, read={self.read_kind}" + (", wiped" if self.wiped else "")


@with_incremental_state
class TopKAttention(Wipeable):
    """Each head of each query attends to its ``k`` best-matching encoder states of the whole
    document (softmax over those k logits only; Unlimiformer, §2), reading
    ``encoder_out["document_states"]`` ``[(L, bsz, m)]`` with ``document_padding_mask``
    ``[(bsz, L)]``. Cost O(L·e) per query: it is exact retrieval, not a fixed-size read.

    Args:
        embed_dim, num_heads: the query side; encoder_dim: m; k: states kept per head and query.
        wiped: the memory-wiped control: nothing is retrieved, the read adds exactly zero.

    Raises:
        ConfigError: invalid sizes or k < 1.
    """

    def __init__(self, embed_dim: int, num_heads: int, encoder_dim: int, k: int, wiped: bool = False):
        super().__init__()
        self.wiped = wiped
        check_heads(embed_dim, num_heads)
        if k < 1:
            raise ConfigError(f"--retrieval-topk must be positive (0 disables it), got {k}")
        self.embed_dim, self.num_heads, self.head_dim, self.k = embed_dim, num_heads, embed_dim // num_heads, k
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(encoder_dim, embed_dim)
        self.v_proj = nn.Linear(encoder_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor, *, encoder_out: Dict, incremental_state=None, **unused) -> AttentionOutput:
        """``x`` ``(T, bsz, e)`` → :class:`AttentionOutput` ``(T, bsz, e)``.

        Raises:
            ConfigError: an encoder output without ``document_states``.
        """
        if not encoder_out.get("document_states"):
            raise ConfigError("--retrieval-topk needs the encoder output's document_states")
        if self.wiped:
            return AttentionOutput(x.new_zeros(x.shape))
        saved = self.get_incremental_state(incremental_state, "kv") if incremental_state is not None else None
        if saved is None:
            states = encoder_out["document_states"][0]
            saved = {"keys": _heads(self.k_proj(states), self.num_heads),
                     "values": _heads(self.v_proj(states), self.num_heads),
                     "padding": encoder_out["document_padding_mask"][0]}
            if incremental_state is not None:
                self.set_incremental_state(incremental_state, "kv", saved)
        tgt_len, bsz, _ = x.shape
        q = _heads(self.q_proj(x), self.num_heads) / math.sqrt(self.head_dim)
        logits = torch.matmul(q, saved["keys"].transpose(-1, -2))  # (bsz, H, T, L)
        logits = logits.masked_fill(saved["padding"][:, None, None, :], float("-inf"))
        k = min(self.k, logits.size(-1))
        top, index = logits.topk(k, dim=-1)  # (bsz, H, T, k)
        weights = torch.nan_to_num(torch.softmax(top, dim=-1), nan=0.0)
        values = saved["values"]  # (bsz, H, L, d)
        picked = values.gather(2, index.reshape(bsz, self.num_heads, tgt_len * k, 1).expand(-1, -1, -1, self.head_dim))
        out = (weights[..., None] * picked.view(bsz, self.num_heads, tgt_len, k, self.head_dim)).sum(3)
        return AttentionOutput(self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)))

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Select the cached keys and values of batch entries ``new_order`` (beam search)."""
        return reorder_saved(self, incremental_state, "kv", new_order)

    def extra_repr(self) -> str:
        return f"k={self.k}, heads={self.num_heads}" + (", wiped" if self.wiped else "")
