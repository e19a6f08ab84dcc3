"""Fastformer additive attention (fairseq_plugins.modules.attention.additive)
against independent references written here: a loop over positions and heads
of the paper's equations (float64), a prefix-by-prefix loop for the causal
form, and a vectorised O(n²) masked-softmax version for long inputs."""

import copy
import math

import pytest
import torch

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.modules.attention.additive import AdditiveAttention


def _module(width=12, heads=3, seed=0, **kwargs):
    torch.manual_seed(seed)
    return AdditiveAttention(width, heads, **kwargs).eval()


def _softmax(logits):
    m = max(logits)
    e = [math.exp(a - m) for a in logits]
    return [w / sum(e) for w in e]


def _pool(logits, vectors):
    weights = _softmax(logits)
    return sum(w * v for w, v in zip(weights, vectors))


def reference_bidirectional(att, x, pad=None):
    """Paper Eq. (1)-(6), one sequence and one head at a time, float64 loops.

    x: (T, B, C); pad: (B, T) bool or None. Returns (T, B, C) float64."""
    att = copy.deepcopy(att).double()
    x = x.double()
    length, bsz, width = x.shape
    h_count, d = att.num_heads, att.head_dim
    scale = 1 / math.sqrt(d) if att.scaling != 1.0 else 1.0
    out = torch.zeros(length, bsz, width, dtype=torch.float64)
    with torch.no_grad():
        for b in range(bsz):
            keep = [t for t in range(length) if pad is None or not bool(pad[b, t])]
            q = [att.q_proj(x[t, b]) for t in range(length)]
            k = [att.k_proj(x[t, b]) for t in range(length)]
            v = q if att.query_value_sharing else [att.v_proj(x[t, b]) for t in range(length)]
            u = [torch.zeros(width, dtype=torch.float64) for _ in range(length)]
            for h in range(h_count):
                s = slice(h * d, (h + 1) * d)
                global_q = _pool([float(att.w_q[h] @ q[i][s]) * scale for i in keep], [q[i][s] for i in keep])
                p = {i: global_q * k[i][s] for i in range(length)}
                global_k = _pool([float(att.w_k[h] @ p[i]) * scale for i in keep], [p[i] for i in keep])
                for i in range(length):
                    u[i][s] = global_k * v[i][s]
            for i in range(length):
                out[i, b] = att.out_proj(att.r_proj(u[i]) + q[i])
    return out


def reference_causal(att, x):
    """Causal form by recomputation on every prefix x[:t+1] (O(n²), loops):
    the global query of prefix t is the paper's Eq. (2) on that prefix; the
    global key of prefix t pools p_i = q_i ⊙ k_i over i ≤ t, q_i being the
    global query of prefix i; output_t = W_o(W_r(k_t ⊙ v_t) + q_t)."""
    att = copy.deepcopy(att).double()
    x = x.double()
    length, bsz, width = x.shape
    h_count, d = att.num_heads, att.head_dim
    scale = 1 / math.sqrt(d) if att.scaling != 1.0 else 1.0
    out = torch.zeros(length, bsz, width, dtype=torch.float64)
    with torch.no_grad():
        for b in range(bsz):
            q = [att.q_proj(x[t, b]) for t in range(length)]
            k = [att.k_proj(x[t, b]) for t in range(length)]
            v = q if att.query_value_sharing else [att.v_proj(x[t, b]) for t in range(length)]
            for t in range(length):
                u = torch.zeros(width, dtype=torch.float64)
                for h in range(h_count):
                    s = slice(h * d, (h + 1) * d)

                    def global_query(j):  # Eq. (2) on the prefix x[:j+1]
                        return _pool([float(att.w_q[h] @ q[i][s]) * scale for i in range(j + 1)],
                                     [q[i][s] for i in range(j + 1)])

                    p = [global_query(i) * k[i][s] for i in range(t + 1)]
                    global_k = _pool([float(att.w_k[h] @ pi) * scale for pi in p], p)
                    u[s] = global_k * v[t][s]
                out[t, b] = att.out_proj(att.r_proj(u) + q[t])
    return out


def reference_causal_matrix(att, x):
    """Vectorised O(n²) causal reference: explicit lower-triangular softmax
    matrices (float64), for long inputs."""
    att = copy.deepcopy(att).double()
    x = x.double()
    length, bsz, width = x.shape
    h_count, d = att.num_heads, att.head_dim
    scale = 1 / math.sqrt(d) if att.scaling != 1.0 else 1.0
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    with torch.no_grad():
        q = att.q_proj(x)
        k = att.k_proj(x)
        v = q if att.query_value_sharing else att.v_proj(x)
        split = lambda t: t.view(length, bsz, h_count, d)  # noqa: E731
        q4, k4, v4 = split(q), split(k), split(v)

        def prefix_pool(vectors, w):  # vectors (T,B,H,d)
            logits = (vectors * w).sum(-1) * scale  # (T,B,H)
            matrix = logits.permute(1, 2, 0).unsqueeze(-2).expand(bsz, h_count, length, length)  # [.., t, i]
            weights = torch.softmax(matrix.masked_fill(future, float("-inf")), dim=-1)
            return torch.einsum("bhti,ibhd->tbhd", weights, vectors)

        p = prefix_pool(q4, att.w_q) * k4
        u = prefix_pool(p, att.w_k) * v4
        return att.out_proj(att.r_proj(u.reshape(length, bsz, width)) + q)


# ---- bidirectional ------------------------------------------------------------


@pytest.mark.parametrize("qv_sharing,scale", [(False, True), (True, True), (False, False)])
def test_bidirectional_matches_loop_reference(qv_sharing, scale):
    att = _module(query_value_sharing=qv_sharing, scale_scores=scale)
    x = torch.randn(7, 2, 12)
    got = att(x).out
    assert got.shape == (7, 2, 12) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), reference_bidirectional(att, x), atol=1e-5, rtol=1e-5)


def test_padding_changes_nothing_in_unpadded_outputs():
    att = _module()
    x = torch.randn(9, 3, 12)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[0, 6:] = True  # right padding
    pad[1, :4] = True  # left padding
    got = att(x, padding_mask=pad).out
    torch.testing.assert_close(got.double(), reference_bidirectional(att, x, pad), atol=1e-5, rtol=1e-5)
    # each sequence alone, without its padding, gives the same unpadded outputs
    torch.testing.assert_close(got[:6, 0], att(x[:6, 0:1]).out[:, 0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got[4:, 1], att(x[4:, 1:2]).out[:, 0], atol=1e-6, rtol=1e-6)
    # whatever sits in the padded positions changes nothing elsewhere
    x2 = x.clone()
    x2[6:, 0] = 1e3 * torch.randn(3, 12)
    x2[:4, 1] = -1e3
    got2 = att(x2, padding_mask=pad).out
    keep = ~pad.t()
    torch.testing.assert_close(got2[keep], got[keep], atol=0, rtol=0)


# ---- causal -------------------------------------------------------------------


@pytest.mark.parametrize("chunk,qv_sharing", [(3, False), (64, False), (4, True)])
def test_causal_matches_prefix_reference(chunk, qv_sharing):
    att = _module(causal=True, chunk_size=chunk, query_value_sharing=qv_sharing, seed=1)
    x = torch.randn(10, 2, 12)
    torch.testing.assert_close(att(x).out.double(), reference_causal(att, x), atol=1e-5, rtol=1e-5)


def test_vectorised_reference_agrees_with_loop_reference():
    att = _module(causal=True, seed=2)
    x = torch.randn(8, 2, 12)
    torch.testing.assert_close(reference_causal_matrix(att, x), reference_causal(att, x), atol=1e-10, rtol=1e-10)


def test_causal_long_sequence_matches_quadratic_reference():
    att = _module(width=16, heads=2, causal=True, seed=3)  # default chunk 64: many chunks
    x = torch.randn(1000, 1, 16)
    torch.testing.assert_close(att(x).out.double(), reference_causal_matrix(att, x), atol=2e-5, rtol=1e-5)


def test_no_output_depends_on_a_future_token():
    att = _module(causal=True, chunk_size=4, seed=4)
    x = torch.randn(12, 2, 12)
    base = att(x).out
    for t in (0, 3, 4, 7, 10):
        x2 = x.clone()
        x2[t + 1:] = 100 * torch.randn_like(x2[t + 1:])
        torch.testing.assert_close(att(x2).out[:t + 1], base[:t + 1], atol=0, rtol=0)
    # and the gradient of output t w.r.t. later inputs is exactly zero
    x = x.requires_grad_(True)
    att(x).out[5].sum().backward()
    assert x.grad[6:].abs().max() == 0 and x.grad[:6].abs().max() > 0


def _huge_scores(att, target=1e4, x=None):
    """Scale w_q and w_k so that the score logits reach about ±target."""
    with torch.no_grad():
        heads = att._heads(att.q_proj(x))
        logits = torch.einsum("bhtd,hd->bht", heads, att.w_q.float()) * att.scaling
        att.w_q.mul_(target / logits.abs().max())
        k_heads = att._heads(att.k_proj(x))
        att.w_k.mul_(target / (torch.einsum("bhtd,hd->bht", k_heads, att.w_k.float()) * att.scaling).abs().max())


@pytest.mark.parametrize("causal", [False, True])
def test_stable_with_logits_of_1e4(causal):
    att = _module(causal=causal, chunk_size=3, seed=5)
    x = torch.randn(11, 2, 12)
    _huge_scores(att, 1e4, x)
    got = att(x).out
    assert torch.isfinite(got).all()
    ref = reference_causal(att, x) if causal else reference_bidirectional(att, x)
    torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)
    if causal:  # long input with the default chunk size: across chunk boundaries too
        att.chunk_size = 64
        x = torch.randn(300, 1, 12)
        _huge_scores(att, 1e4, x)
        got = att(x).out
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), reference_causal_matrix(att, x), atol=1e-4, rtol=1e-4)


def test_gradients_finite_with_padding_and_huge_logits():
    att = _module(causal=True, chunk_size=4, seed=6).train()
    x = torch.randn(10, 2, 12)
    _huge_scores(att, 1e4, x)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[0, :3] = True  # left padding: positions whose prefix is all padding
    pad[1, 8:] = True
    x.requires_grad_(True)
    out = att(x, padding_mask=pad).out
    assert torch.isfinite(out).all()
    out.pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in att.parameters())
    # the unpadded positions of sequence 0 equal the sequence without its padding
    torch.testing.assert_close(out[3:, 0], att(x[3:, 0:1]).out[:, 0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_fp16_module_matches_fp32_within_fp16_tolerance(causal):
    att = _module(width=16, heads=4, causal=causal, chunk_size=8, seed=7)
    x = torch.randn(40, 2, 16)
    half = copy.deepcopy(att).half()
    ref = copy.deepcopy(half).float()(x.half().float()).out  # same rounded weights and inputs, fp32 compute
    got = half(x.half()).out
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), ref, atol=3e-2, rtol=3e-2)
    # large logits in fp16: scores and sums are fp32 internally, so no overflow
    _huge_scores(half, 1e4, x.half())
    got = half(x.half()).out
    assert torch.isfinite(got).all()
    ref = copy.deepcopy(half).float()(x.half().float()).out
    torch.testing.assert_close(got.float(), ref, atol=5e-2, rtol=5e-2)


def test_autocast_keeps_internal_sums_in_fp32():
    att = _module(width=16, heads=2, causal=True, seed=8)
    x = torch.randn(30, 2, 16)
    _huge_scores(att, 1e4, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = att(x).out
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), att(x).out, atol=0.1, rtol=0.05)


# ---- incremental decoding -----------------------------------------------------


def test_incremental_equals_full_and_state_is_constant():
    att = _module(causal=True, chunk_size=4, seed=9)
    x = torch.randn(50, 3, 12)
    full = att(x).out
    state = {}
    sizes = {}
    steps = []
    for t in range(50):
        steps.append(att(x[t:t + 1], incremental_state=state).out)
        if t + 1 in (5, 50):
            sizes[t + 1] = sum(v.numel() for s in state.values() for v in s.values())
    torch.testing.assert_close(torch.cat(steps), full, atol=1e-5, rtol=1e-5)
    assert sizes[5] == sizes[50] == 3 * (4 * 3 + 2 * 12)  # per sequence 4·H + 2·C
    # several positions at once continue the same carry
    state = {}
    first = att(x[:7], incremental_state=state).out
    rest = att(x[7:], incremental_state=state).out
    torch.testing.assert_close(torch.cat([first, rest]), full, atol=1e-5, rtol=1e-5)


def test_reorder_incremental_state_follows_the_beams():
    att = _module(causal=True, seed=10)
    x = torch.randn(6, 3, 12)
    state = {}
    for t in range(4):
        att(x[t:t + 1], incremental_state=state).out
    new_order = torch.tensor([2, 0, 0])
    att.reorder_incremental_state(state, new_order)
    tail = torch.randn(2, 3, 12)
    got = torch.cat([att(tail[t:t + 1], incremental_state=state).out for t in range(2)])
    expected = att(torch.cat([x[:4, new_order], tail])).out[4:]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_shared_module_keeps_one_carry_per_slot():
    att = _module(causal=True, seed=11)
    x, y = torch.randn(5, 2, 12), torch.randn(5, 2, 12)
    state = {}
    for t in range(5):
        a = att(x[t:t + 1], incremental_state=state, slot="layer0.").out
        b = att(y[t:t + 1], incremental_state=state, slot="layer1.").out
    torch.testing.assert_close(a, att(x).out[-1:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b, att(y).out[-1:], atol=1e-5, rtol=1e-5)


# ---- one-line errors ----------------------------------------------------------


def _one_line(excinfo, *needles):
    message = str(excinfo.value)
    assert "\n" not in message and message
    for needle in needles:
        assert needle in message


def test_heads_must_divide_width():
    with pytest.raises(ConfigError) as e:
        AdditiveAttention(10, 3)
    _one_line(e, "heads", "divide")


@pytest.mark.parametrize("causal", [False, True])
def test_empty_sequence_and_all_padded(causal):
    att = _module(causal=causal)
    with pytest.raises(ConfigError) as e:
        att(torch.randn(0, 2, 12)).out
    _one_line(e, "empty sequence")
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1] = True
    x = torch.randn(4, 2, 12)
    if causal:
        # one fully padded row beside a real one (the streaming task's last batch):
        # finite, and the real row is unchanged; a batch of nothing but padding is refused
        out = att(x, padding_mask=pad).out
        assert torch.isfinite(out).all()
        assert torch.allclose(out[:, 0], att(x[:, :1]).out[:, 0], atol=1e-6)
        pad[0] = True
    with pytest.raises(ConfigError) as e:
        att(x, padding_mask=pad).out
    _one_line(e, "all positions padded")


def test_incremental_state_needs_causal_form():
    with pytest.raises(ConfigError) as e:
        _module()(torch.randn(1, 1, 12), incremental_state={})
    _one_line(e, "causal")
