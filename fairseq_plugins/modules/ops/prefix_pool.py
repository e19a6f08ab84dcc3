"""Causal (prefix) softmax pooling, the Fastformer's global query and key in linear time
(Wu et al., 2021, eq. 1-5, computed causally; the algorithm: the module docstring of
:mod:`fairseq_plugins.modules.attention.additive`), and its naive O(T²) reference.

* :func:`prefix_softmax_pool`: chunk-parallel, a carry links the chunks and calls, a
  custom autograd normalisation (``_Normalise``) keeps the backward finite;
* :func:`naive_prefix_pool`: the same output as an explicit masked softmax over every
  prefix in float64 (tests/core/test_causal_pooling.py compares them);
* :func:`softmax_pool`: the bidirectional pooling; :func:`empty_carry`.
"""

from typing import Tuple

import torch
from torch import Tensor


Carry = Tuple[Tensor, Tensor, Tensor]  # running max (B,H), Σe^(a-max) (B,H), Σe^(a-max)·value (B,H,d)

_STATE_KEY = "additive_attention_state"


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


def naive_prefix_pool(scores: Tensor, values: Tensor, carry: Carry):
    """The reference of :func:`prefix_softmax_pool` for the tests: out_t = (e^m·acc + Σ_{i≤t} e^{a_i} v_i) / (e^m·s + Σ_{i≤t} e^{a_i}), float64, as an
    explicit (T, T+1) masked softmax whose column 0 is the carry (logit m + log s, value
    acc / s). A row with nothing unpadded in it (and an empty carry) gives 0.
    Returns (pooled (B,H,T,d), log of the total weight (B,H), pooled over everything (B,H,d))."""
    run_max, run_sum, run_acc = carry
    bsz, heads, length = scores.shape
    has_carry = run_sum > 0
    carry_logit = torch.where(has_carry, run_max + torch.log(torch.where(has_carry, run_sum, 1.0)), float("-inf"))
    carry_value = run_acc / torch.where(has_carry, run_sum, 1.0).unsqueeze(-1)
    logits = torch.cat([carry_logit.unsqueeze(-1), scores], dim=-1)  # (B,H,T+1)
    vectors = torch.cat([carry_value.unsqueeze(-2), values], dim=-2)  # (B,H,T+1,d)
    visible = torch.ones(length, length + 1, dtype=torch.bool).tril(1)  # row t sees the carry and i ≤ t
    matrix = logits.unsqueeze(-2).expand(bsz, heads, length, length + 1).masked_fill(~visible, float("-inf"))
    empty = torch.isinf(matrix).all(-1, keepdim=True)  # nothing in the prefix: output 0
    weights = torch.softmax(torch.where(empty, 0.0, matrix), dim=-1) * ~empty
    pooled = torch.einsum("bhti,bhid->bhtd", weights, vectors)
    return pooled, torch.logsumexp(logits, dim=-1), pooled[..., -1, :]
