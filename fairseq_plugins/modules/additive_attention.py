"""Fastformer additive attention (Wu, Wu, Qi, Huang & Xie, "Fastformer: Additive
Attention Can Be All You Need", arXiv 2108.09084, 2021), bidirectional and causal.

Shapes are time-first like fairseq: ``x`` is ``(T, B, C)`` = (positions, batch,
width); ``H`` heads of width ``d = C / H``; ``padding_mask`` is ``(B, T)``,
True at padding. Per head, with projections q_i, k_i, v_i of x_i (§3.2):

* Eq. (1)-(2), global query: α_i = softmax_i(w_qᵀ q_i / √d), q = Σ_i α_i q_i;
* Eq. (3), p_i = q ⊙ k_i;
* Eq. (4)-(5), global key: β_i = softmax_i(w_kᵀ p_i / √d), k = Σ_i β_i p_i;
* Eq. (6), u_i = k ⊙ v_i, then r_i = W_r u_i and output_i = r_i + q_i (query
  residual); heads concatenated, then the output projection W_o.

Each head's score uses its own slice (``w_q``, ``w_k`` are ``(H, d)``). W_r
acts on the concatenated heads (the authors' code; a per-head W_r is its
block-diagonal special case). Options: ``query_value_sharing`` (no value
projection: u_i = k ⊙ q_i, §3.3), ``scale_scores`` (the 1/√d; off: raw dot
products). Layer-wise sharing (§3.3) is done by the host model, which calls
one module from several layers with a different ``slot`` each.

Causal form (``causal=True``): position t pools only positions i ≤ t, i.e. the
softmaxes run over the prefix: q_t = Σ_{i≤t} e^{a_i} q_i / Σ_{i≤t} e^{a_i},
p_i = q_i ⊙ k_i with the prefix's own global query, and the same for the
global key. Computed in O(T·d) (for a fixed chunk size) by
:func:`prefix_softmax_pool`: chunks of ``chunk_size`` positions are pooled
exactly with a masked c×c weight matrix whose exponents are taken relative to
the running (prefix) maximum, so every exponent is ≤ 0 and the largest term is
exactly 1 (no overflow, no 0/0, any logit size); a carry of (running max,
Σe^{a−max}, Σe^{a−max}·value) links the chunks. Scores, exponentials and
sums are fp32 even for fp16 inputs or under autocast.

Incremental decoding (causal only): the same carry is the whole state, per
layer slot and per sequence ``4·H + 2·C`` numbers (running max and
denominator per head for the query and the key pools, and the two
width-C weighted sums), independent of the number of steps.

Padding: padded positions get zero weight (score −inf). A sequence whose
positions are all padding, or an empty sequence, raises :class:`ConfigError`
(one line). In the causal form, a non-padded position always has itself in
its prefix; a padded position preceded only by padding gets a zero global
vector.
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from fairseq_plugins.config import check_heads
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention import AttentionOutput

Carry = Tuple[Tensor, Tensor, Tensor]  # running max (B,H), Σe^(a-max) (B,H), Σe^(a-max)·value (B,H,d)

_STATE_KEY = "additive_attention_state"
_STATE_NAMES = ("q_max", "q_sum", "q_acc", "k_max", "k_sum", "k_acc")


def empty_carry(bsz: int, num_heads: int, head_dim: int, device) -> Carry:
    """The carry of an empty prefix: max −inf, zero sums (fp32)."""
    return (torch.full((bsz, num_heads), float("-inf"), device=device),
            torch.zeros(bsz, num_heads, device=device),
            torch.zeros(bsz, num_heads, head_dim, device=device))


def softmax_pool(scores: Tensor, values: Tensor) -> Tensor:
    """Bidirectional pooling Σ_i softmax_i(scores) values_i (Eq. 2 and 5).

    Args:
        scores: ``(B, H, T)`` fp32, −inf at padding (no row all −inf).
        values: ``(B, H, T, d)`` fp32.
    Returns:
        ``(B, H, 1, d)`` fp32.
    """
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bht,bhtd->bhd", weights, values).unsqueeze(2)


_pad = torch.nn.functional.pad


class _Normalise(torch.autograd.Function):
    """``both (…, d+1)`` → ``both[..., :d] / both[..., d]`` (0 where the sum is 0), with a
    one-pass backward (autograd's slice, select and div backward would each write a
    zero-filled copy of ``both``)."""

    @staticmethod
    def forward(ctx, both: Tensor) -> Tensor:
        sums = both[..., -1:]
        inv = torch.where(sums > 0, sums, torch.ones_like(sums)).reciprocal()
        pooled = both[..., :-1] * inv
        ctx.save_for_backward(pooled, inv)
        return pooled

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        pooled, inv = ctx.saved_tensors
        # d pooled / d acc = inv; d pooled / d sum = −pooled·inv (0 where the sum is 0: pooled = 0)
        return torch.cat([grad * inv, (grad * pooled).sum(-1, keepdim=True).neg_().mul_(inv)], dim=-1)


def _in_chunks(scores: Tensor, values: Tensor, chunk: int) -> Tuple[Tensor, Tensor]:
    """``(B,H,T)``, ``(B,H,T,d)`` → scores ``(B,H,n,c)`` and values with a column of ones
    ``(B,H,n,c,d+1)`` (so that one matmul gives the weighted sums and the sums of weights),
    n = ⌈T/c⌉, the tail padded with score −inf (weight 0). One pad each for the whole
    input: the backward is one narrow of the gradient, not a full-length zero tensor per chunk."""
    length = scores.size(-1)
    n_chunks = -(-length // chunk)
    extra = n_chunks * chunk - length
    if extra:
        scores = _pad(scores, (0, extra), value=float("-inf"))
    values = _pad(values, (0, 1, 0, extra), value=1.0)
    return (scores.reshape(*scores.shape[:-1], n_chunks, chunk),
            values.reshape(*values.shape[:-2], n_chunks, chunk, values.size(-1)))


def _scan_carries(totals: Tensor, maxima: Tensor) -> Tensor:
    """Inclusive scan of max-relative partial sums: ``out_j = Σ_{k≤j} e^{M_k − M_j} totals_k``.

    Args:
        totals: ``(B,H,N,w)`` fp32, entry k relative to ``maxima[..., k]`` (zero where
            that maximum is −inf).
        maxima: ``(B,H,N)`` non-decreasing along N (may start with −inf); constants.
    Returns:
        ``(B,H,N,w)``, entry j relative to ``maxima[..., j]``.

    Hillis–Steele doubling: ⌈log₂ N⌉ steps, each adding the partial sum ``s``
    places back rescaled by e^{M_{j−s} − M_j} ≤ 1, taken directly from the maxima
    (never a product of many factors, no e^{+M}), so nothing overflows and a term
    underflows only when it is below 2⁻¹²⁶ of the largest one, which is ≥ 1.
    Tensors are O(N·w) per step, N = number of chunks.
    """
    count = totals.size(-2)
    shift = 1
    while shift < count:
        with torch.no_grad():
            earlier, later = maxima[..., :-shift], maxima[..., shift:]
            factor = torch.where(torch.isfinite(earlier), torch.exp(earlier - later), torch.zeros_like(earlier))
            factor = _pad(factor, (shift, 0)).unsqueeze(-1)  # (B,H,N,1), 0 for the first `shift`
        totals = torch.addcmul(totals, factor, _pad(totals[..., :-shift, :], (0, 0, shift, 0)))
        shift *= 2
    return totals


def prefix_softmax_pool(scores: Tensor, values: Tensor, carry: Carry, chunk_size: int = 64) -> Tuple[Tensor, Carry]:
    """Causal pooling: out_t = Σ_{i≤t} e^{a_i} v_i / Σ_{i≤t} e^{a_i}, over the
    positions of this call preceded by the prefix summarised in ``carry``.

    Stable for any logit size: inside a chunk the weight of position i for
    output t is exp(a_i − m_t) with m_t the running maximum up to t (carry
    included), so exponents are ≤ 0 and the denominator is ≥ 1; the carry is
    rescaled to each new maximum. The maxima are constants for autograd (the
    result does not depend on them), so gradients are exact.

    All chunks at once (no loop over chunks): the input is viewed as
    ``(B,H,n,c)``; each chunk is pooled with its masked c×c weight matrix; the
    chunk totals (relative to the running maximum at the chunk's end) and the
    incoming carry are combined across chunks by :func:`_scan_carries`, which
    gives every chunk its incoming carry; each position then adds its chunk's
    carry rescaled to its own running maximum.

    Args:
        scores: ``(B, H, T)`` fp32, −inf at padding.
        values: ``(B, H, T, d)`` fp32.
        carry: ``(max (B,H), sum (B,H), acc (B,H,d))`` of the earlier prefix
            (:func:`empty_carry` for none); sums relative to ``max``.
        chunk_size: positions pooled at once (memory ``B·H·T·c``, time
            ``O(T·c·d)``).
    Returns:
        ``(pooled (B, H, T, d) fp32, carry after the last position)``.
        A position with no unpadded position in its prefix gets zeros.
    """
    run_max, run_sum, run_acc = carry
    length, dim = scores.size(-1), values.size(-1)
    if length == 0:
        return values.new_zeros(values.shape), (run_max, run_sum, run_acc)
    chunk = min(chunk_size, length)
    a, v = _in_chunks(scores, values, chunk)  # (B,H,n,c), (B,H,n,c,d+1)
    with torch.no_grad():
        local_max = torch.cummax(a, dim=-1).values  # (B,H,n,c) running max inside each chunk
        # maxima[..., j] = max(carry, chunks < j): M_0 = carry max, ..., M_n = max of everything
        ends = torch.maximum(torch.cummax(local_max[..., -1], dim=-1).values, run_max.unsqueeze(-1))
        maxima = torch.cat([run_max.unsqueeze(-1), ends], dim=-1)  # (B,H,n+1)
        ref = torch.maximum(local_max, maxima[..., :-1].unsqueeze(-1))  # (B,H,n,c) prefix max at each t
        ref = torch.where(torch.isfinite(ref), ref, torch.zeros_like(ref))  # all padding so far: any value
        # the incoming carry of chunk j, relative to M_j, rescaled to each position's ref: ≤ 1, 0 if M_j = −inf
        carry_scale = torch.exp(maxima[..., :-1].unsqueeze(-1) - ref).unsqueeze(-1)  # (B,H,n,c,1)
    # exponent of position i (column) for output t (row), −inf above the diagonal: exp → 0 (and grad 0);
    # in place (sub saves nothing, exp saves its result): two c×c passes forward
    expo = a.unsqueeze(-2) - ref.unsqueeze(-1)  # (B,H,n,c,c)
    if chunk > 1:  # (one position per chunk, e.g. incremental decoding: nothing above the diagonal)
        with torch.no_grad():
            future = torch.ones(chunk, chunk, dtype=torch.bool, device=a.device).triu(1)
            future = torch.zeros(chunk, chunk, device=a.device).masked_fill_(future, float("-inf"))
        expo = expo.add_(future)
    weights = expo.exp_()  # entries in [0, 1]
    local = torch.matmul(weights, v)  # (B,H,n,c,d+1): weighted sums, and Σ weights in the last column
    # incoming carry of chunk j (relative to M_j): the carry (entry 0), then chunk j−1's total = its
    # last row, relative to ref at its end = M_j; the scan adds up the earlier ones
    carries = torch.cat([run_acc, run_sum.unsqueeze(-1)], dim=-1).unsqueeze(-2)  # (B,H,1,d+1)
    if a.size(-2) > 1:
        carries = _scan_carries(torch.cat([carries, local[..., :-1, -1, :]], dim=-2), maxima[..., :-1])
    both = torch.addcmul(local, carry_scale, carries.unsqueeze(-2))  # (B,H,n,c,d+1), rel. ref
    # sums ≥ 1 once an unpadded position is in the prefix; 0 before (then accs = 0: output 0, finite grads)
    pooled = _Normalise.apply(both).reshape(*values.shape[:-2], -1, dim)
    if pooled.size(-2) != length:
        pooled = pooled[..., :length, :]
    # the carry out is the last position's (padded tail positions add nothing), relative to ref there = M_n
    last = both[..., -1, -1, :]
    out_sum, out_acc = last[..., dim], last[..., :dim]
    # keep −inf for a carry that has seen only padding (sums 0) so later maxima stay exact
    out_max = torch.where(out_sum > 0, maxima[..., -1], torch.full_like(out_sum, float("-inf")))
    return pooled, (out_max, out_sum, out_acc)


@with_incremental_state
class AdditiveAttention(nn.Module):
    """Multi-head Fastformer additive attention (see the module docstring).

    Args:
        embed_dim: width C.
        num_heads: heads H; must divide C (else :class:`ConfigError`).
        causal: prefix (decoder) form instead of the paper's bidirectional one.
        query_value_sharing: no value projection, u_i = k ⊙ q_i.
        scale_scores: divide the scores by √d (the paper); False: no scaling.
        bias: biases of the projections.
        chunk_size: positions per chunk of the causal computation.

    Parameters: ``5·C² + 7·C`` (``4·C² + 6·C`` with query–value sharing):
    W_q, W_k, (W_v), W_r, W_o with biases, and the score vectors w_q, w_k
    (``(H, d)`` each, no bias: it would cancel in the softmax).
    """

    def __init__(self, embed_dim: int, num_heads: int, causal: bool = False, query_value_sharing: bool = False,
                 scale_scores: bool = True, bias: bool = True, chunk_size: int = 64):
        super().__init__()
        check_heads(embed_dim, num_heads)
        if chunk_size <= 0:
            raise ConfigError(f"chunk_size must be positive, got {chunk_size}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.causal = causal
        self.query_value_sharing = query_value_sharing
        self.scaling = self.head_dim ** -0.5 if scale_scores else 1.0
        self.chunk_size = chunk_size
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = None if query_value_sharing else nn.Linear(embed_dim, embed_dim, bias=bias)
        self.w_q = nn.Parameter(torch.empty(num_heads, self.head_dim))
        self.w_k = nn.Parameter(torch.empty(num_heads, self.head_dim))
        self.r_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.r_proj, self.out_proj):
            if proj is not None:
                nn.init.xavier_uniform_(proj.weight)
                if proj.bias is not None:
                    nn.init.zeros_(proj.bias)
        nn.init.normal_(self.w_q, std=self.head_dim ** -0.5)
        nn.init.normal_(self.w_k, std=self.head_dim ** -0.5)

    # ---- helpers ------------------------------------------------------------

    def _heads(self, x: Tensor) -> Tensor:
        """``(T, B, C)`` → ``(B, H, T, d)`` fp32."""
        length, bsz, _ = x.shape
        return x.float().view(length, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _scores(self, x: Tensor, w: Tensor, pad: Optional[Tensor]) -> Tensor:
        """``(B, H, T, d)`` → per-head scores ``(B, H, T)``, −inf at padding."""
        scores = torch.einsum("bhtd,hd->bht", x, w.float()) * self.scaling
        if pad is not None:
            scores = scores.masked_fill(pad.unsqueeze(1), float("-inf"))
        return scores

    def _get_state(self, incremental_state, slot: str) -> Optional[Dict[str, Optional[Tensor]]]:
        saved = self.get_incremental_state(incremental_state, _STATE_KEY)
        if saved is None or slot + _STATE_NAMES[0] not in saved:
            return None
        return saved

    # ---- forward --------------------------------------------------------------

    def empty_state(self, bsz: int, device) -> None:
        """Additive attention carries nothing from one segment to the next (``None``)."""
        return None

    def forward(self, x: Tensor, *, padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                slot: str = "", **unused) -> AttentionOutput:
        """The attention contract of :mod:`fairseq_plugins.modules.attention`.

        Args:
            x: ``(T, B, C)``; with ``incremental_state``, only the new positions
                (usually T = 1).
            padding_mask: ``(B, T)`` bool, True at padding (optional).
            incremental_state: fairseq's generation state (causal form only);
                the carry of the earlier positions is read from and written to it.
            slot: name prefix of this call's carry in the state, so that
                one module shared by several layers keeps one carry per layer.
        Returns:
            :class:`AttentionOutput`: ``out`` ``(T, B, C)`` in ``x``'s dtype and
            ``query`` (the projections q_i, which a long-term memory can read with).
        Raises:
            ConfigError: empty sequence, all positions of a sequence padded
                (causal form: of every sequence of the batch), width not C, or
                incremental state with the bidirectional form.
        """
        length, bsz, width = x.shape
        if width != self.embed_dim:
            raise ConfigError(f"additive attention expects width {self.embed_dim}, got {width}")
        if length == 0:
            raise ConfigError("additive attention got an empty sequence (0 positions); give at least one token")
        if incremental_state is not None and not self.causal:
            raise ConfigError("incremental decoding needs the causal form of additive attention (causal=True)")
        pad = None
        state_slot = slot
        if padding_mask is not None:
            pad = padding_mask.to(device=x.device, dtype=torch.bool)
            if pad.shape != (bsz, length):
                raise ConfigError(f"padding_mask must be (batch, time) = {(bsz, length)}, got {tuple(pad.shape)}")
            if not pad.any():
                pad = None
            elif incremental_state is None:
                empty = pad.all(dim=1)
                # causal: a fully padded row is harmless (its outputs are zeros) — the streaming
                # task's last batch can hold one; bidirectional: it has no softmax to take
                if bool(empty.all()) or (not self.causal and bool(empty.any())):
                    raise ConfigError("additive attention: all positions padded in a sequence; "
                                      "remove empty sequences from the batch")

        q = self.q_proj(x)
        k = self.k_proj(x)
        v = q if self.v_proj is None else self.v_proj(x)
        with torch.autocast(device_type=x.device.type, enabled=False):
            qh, kh, vh = self._heads(q), self._heads(k), self._heads(v)  # (B,H,T,d) fp32
            a = self._scores(qh, self.w_q, pad)  # Eq. (1) logits
            if self.causal:
                hd = (bsz, self.num_heads, self.head_dim)
                saved = self._get_state(incremental_state, state_slot) if incremental_state is not None else None
                if saved is None:
                    carry_q = empty_carry(*hd, device=x.device)
                    carry_k = empty_carry(*hd, device=x.device)
                else:
                    carry_q = tuple(saved[state_slot + n] for n in _STATE_NAMES[:3])
                    carry_k = tuple(saved[state_slot + n] for n in _STATE_NAMES[3:])
                global_q, carry_q = prefix_softmax_pool(a, qh, carry_q, self.chunk_size)  # (B,H,T,d)
                p = global_q * kh  # Eq. (3), each prefix with its own global query
                global_k, carry_k = prefix_softmax_pool(self._scores(p, self.w_k, pad), p, carry_k, self.chunk_size)
                if incremental_state is not None:
                    saved = self.get_incremental_state(incremental_state, _STATE_KEY) or {}
                    for name, value in zip(_STATE_NAMES, carry_q + carry_k):
                        saved[state_slot + name] = value
                    self.set_incremental_state(incremental_state, _STATE_KEY, saved)
            else:
                global_q = softmax_pool(a, qh)  # Eq. (2), (B,H,1,d)
                p = global_q * kh  # Eq. (3)
                global_k = softmax_pool(self._scores(p, self.w_k, pad), p)  # Eq. (4)-(5)
            u = global_k * vh  # Eq. (6), (B,H,T,d)
            u = u.permute(2, 0, 1, 3).reshape(length, bsz, width).to(x.dtype)
        out = self.r_proj(u) + q  # r_i = W_r u_i, plus the query residual
        return AttentionOutput(self.out_proj(out), query=q)

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor):
        """Select the carries of the surviving beams (every layer slot of this module)."""
        saved = self.get_incremental_state(incremental_state, _STATE_KEY)
        if saved is not None:
            for name, value in saved.items():
                if value is not None:
                    saved[name] = value.index_select(0, new_order.to(value.device))
            incremental_state = self.set_incremental_state(incremental_state, _STATE_KEY, saved)
        return incremental_state

