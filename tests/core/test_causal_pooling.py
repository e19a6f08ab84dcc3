"""Chunk-parallel causal pooling (fairseq_plugins.modules.ops.prefix_pool.
prefix_softmax_pool) against the naive float64 reference beside it (naive_prefix_pool): an explicit
masked softmax over every prefix (incoming carry included), O(T²); and its memory
scaling: forward + backward allocate O(T) bytes, not O(T²/chunk)."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from fairseq_plugins.modules.ops.prefix_pool import empty_carry, naive_prefix_pool, prefix_softmax_pool

NEG_INF = float("-inf")


def _inputs(bsz, heads, length, dim, scale, seed, pad_prefix=3):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(bsz, heads, length, generator=gen, dtype=torch.float64) * scale
    values = torch.randn(bsz, heads, length, dim, generator=gen, dtype=torch.float64)
    if length > 1:
        scores[0, :, :pad_prefix] = NEG_INF  # left padding: prefixes that have seen only padding
        scores[-1, :, length - 2:] = NEG_INF  # right padding
        scores[-1, -1, length // 2] = NEG_INF  # a hole
    return scores, values


def _carry(bsz, heads, dim, kind, seed):
    if kind == "empty":
        return tuple(t.double() for t in empty_carry(bsz, heads, dim, "cpu"))
    gen = torch.Generator().manual_seed(seed + 100)
    run_max = torch.randn(bsz, heads, generator=gen, dtype=torch.float64) * 3
    run_sum = torch.rand(bsz, heads, generator=gen, dtype=torch.float64) * 4 + 1  # ≥ 1: the max is in it
    run_acc = torch.randn(bsz, heads, dim, generator=gen, dtype=torch.float64) * run_sum.unsqueeze(-1)
    if bsz > 1:  # a carry that has seen only padding, next to real ones
        run_max[0, 0], run_sum[0, 0], run_acc[0, 0] = NEG_INF, 0.0, 0.0
    return run_max, run_sum, run_acc


def _check_against_reference(length, chunk, carry_kind, scale=2.0, seed=0, bsz=2, heads=3, dim=5):
    scores, values = _inputs(bsz, heads, length, dim, scale, seed)
    carry = _carry(bsz, heads, dim, carry_kind, seed)
    cotangent = torch.randn(bsz, heads, length, dim, generator=torch.Generator().manual_seed(seed + 1),
                            dtype=torch.float64)

    # reference, float64
    s64, v64 = scores.clone().requires_grad_(), values.clone().requires_grad_()
    m64, sum64, acc64 = carry[0], carry[1].clone().requires_grad_(), carry[2].clone().requires_grad_()
    ref, ref_lse, ref_last = naive_prefix_pool(s64, v64, (m64, sum64, acc64))
    ((ref * cotangent).sum() + ref_last.sum()).backward()

    # the function, fp32 as in the model
    s32, v32 = scores.float().requires_grad_(), values.float().requires_grad_()
    m32, sum32, acc32 = carry[0].float(), carry[1].float().requires_grad_(), carry[2].float().requires_grad_()
    got, (out_max, out_sum, out_acc) = prefix_softmax_pool(s32, v32, (m32, sum32, acc32), chunk)
    assert got.shape == values.shape and got.dtype == torch.float32
    assert torch.isfinite(got).all()
    last = out_acc / torch.where(out_sum > 0, out_sum, torch.ones_like(out_sum)).unsqueeze(-1)
    ((got * cotangent.float()).sum() + last.sum()).backward()

    tol = dict(atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got.double(), ref, **tol)
    # the carry out: the running max, Σe^{a−max} relative to it, and the pooled total
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(out_max), seen)  # −inf stays −inf for padding-only prefixes
    assert (out_sum[~seen] == 0).all() and (out_acc[~seen] == 0).all()
    want_max = torch.maximum(carry[0].float(), scores.float().max(-1).values)
    torch.testing.assert_close(out_max[seen], want_max[seen], atol=0, rtol=0)
    torch.testing.assert_close((out_max + torch.log(out_sum))[seen].double(), ref_lse[seen], **tol)
    torch.testing.assert_close(last.double(), ref_last, **tol)
    # gradients, finite everywhere (padding included) and equal to the reference's
    for mine, theirs in [(s32, s64), (v32, v64), (sum32, sum64), (acc32, acc64)]:
        assert torch.isfinite(mine.grad).all()
        torch.testing.assert_close(mine.grad.double(), torch.nan_to_num(theirs.grad, nan=0.0), atol=1e-4, rtol=1e-4)
    assert (s32.grad[torch.isinf(scores)] == 0).all()  # padding has zero weight, so zero gradient


@pytest.mark.parametrize("length,chunk", [(1, 64), (7, 64), (64, 64), (65, 64), (50, 7), (37, 4), (96, 16),
                                          (100, 1), (130, 3)])
@pytest.mark.parametrize("carry_kind", ["empty", "given"])
def test_matches_naive_masked_softmax_and_its_gradients(length, chunk, carry_kind):
    _check_against_reference(length, chunk, carry_kind, seed=length * 31 + chunk)


@pytest.mark.parametrize("chunk", [3, 16])
def test_huge_logits_across_chunks(chunk):
    """Logits of ±1e4 (e^{a} far outside fp32): every exponent is relative to a running max."""
    _check_against_reference(70, chunk, "given", scale=1e4, seed=5)
    _check_against_reference(70, chunk, "empty", scale=1e4, seed=6)


def test_increasing_logits_rescale_every_chunk():
    """A new maximum in every chunk (each carry is rescaled), and a decreasing run after it."""
    length, chunk = 200, 8
    scores = torch.cat([torch.arange(100.0) * 5, 500 - torch.arange(100.0) * 7]).view(1, 1, length).double()
    values = torch.randn(1, 1, length, 3, dtype=torch.float64)
    ref, _, _ = naive_prefix_pool(scores, values, tuple(t.double() for t in empty_carry(1, 1, 3, "cpu")))
    got, _ = prefix_softmax_pool(scores.float(), values.float(), empty_carry(1, 1, 3, "cpu"), chunk)
    torch.testing.assert_close(got.double(), ref, atol=2e-5, rtol=2e-5)


def test_all_padding_gives_zeros_finite_gradients_and_minus_inf_carry():
    scores = torch.full((2, 2, 10), NEG_INF, requires_grad=True)
    values = torch.randn(2, 2, 10, 4, requires_grad=True)
    got, (run_max, run_sum, run_acc) = prefix_softmax_pool(scores, values, empty_carry(2, 2, 4, "cpu"), 4)
    assert (got == 0).all() and torch.isneginf(run_max).all() and (run_sum == 0).all() and (run_acc == 0).all()
    got.sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.isfinite(values.grad).all()


@pytest.mark.parametrize("chunk", [4, 64])
def test_split_calls_with_carry_equal_one_call(chunk):
    """Pooling in pieces (T = 1 steps as in incremental decoding, and uneven pieces), passing the
    carry on, equals pooling the whole input at once."""
    scores, values = _inputs(2, 3, 23, 4, 3.0, seed=9)
    scores, values = scores.float(), values.float()
    whole, whole_carry = prefix_softmax_pool(scores, values, empty_carry(2, 3, 4, "cpu"), chunk)
    for bounds in [list(range(24)), [0, 5, 6, 17, 23]]:
        carry, pieces = empty_carry(2, 3, 4, "cpu"), []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            piece, carry = prefix_softmax_pool(scores[..., lo:hi], values[..., lo:hi, :], carry, chunk)
            pieces.append(piece)
        torch.testing.assert_close(torch.cat(pieces, dim=2), whole, atol=1e-6, rtol=1e-5)
        for mine, theirs in zip(carry, whole_carry):
            torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)


def test_empty_input_returns_the_carry():
    carry = _carry(1, 2, 3, "given", 0)
    carry = tuple(t.float() for t in carry)
    got, out = prefix_softmax_pool(torch.zeros(1, 2, 0), torch.zeros(1, 2, 0, 3), carry, 8)
    assert got.shape == (1, 2, 0, 3) and all(a is b for a, b in zip(out, carry))


# ---- memory scaling ---------------------------------------------------------------


def _allocations(length, chunk=16, bsz=1, heads=2, dim=8):
    """Bytes allocated in total, and the peak of live bytes, by forward + backward of the
    pooling (inputs and cotangent allocated before), from the profiler's memory events."""
    torch.manual_seed(0)
    scores = torch.randn(bsz, heads, length, requires_grad=True)
    values = torch.randn(bsz, heads, length, dim, requires_grad=True)
    cotangent = torch.randn(bsz, heads, length, dim)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        pooled, _ = prefix_softmax_pool(scores, values, empty_carry(bsz, heads, dim, "cpu"), chunk)
        pooled.backward(cotangent)
        del pooled
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    total = sum(n for _, n in events if n > 0)
    live = peak = 0
    for _, n in events:
        live += n
        peak = max(peak, live)
    return total, peak


def test_forward_backward_memory_is_linear_in_length():
    """4× the length: at most ~4.5× the bytes allocated and the peak (the old loop over chunks
    sliced the full-length inputs per chunk, so its backward wrote a full-length zero gradient
    per chunk: O(T²/c) bytes, ~16× here)."""
    short, long_ = 512, 2048  # 32 and 128 chunks of 16
    total_short, peak_short = _allocations(short)
    total_long, peak_long = _allocations(long_)
    assert total_long <= 4.5 * total_short, (total_short, total_long, total_long / total_short)
    assert peak_long <= 4.5 * peak_short, (peak_short, peak_long, peak_long / peak_short)
