"""The fast paths of infinite_former_gpt2's training step against independent references
(docs/benchmark.md, "GPT-2 against transformers"):

* causal self-attention with dropout on a CPU, by chunks of queries
  (``GPT2Attention.attend_causal_dropout``), against ``scaled_dot_product_attention`` with the
  same random state and against a naive masked softmax with the same drawn dropout mask,
  forward and gradients;
* the fused tanh-GELU that runs for ``gelu_accurate`` against fairseq's ``gelu_accurate``;
* the output projection whose bias is −∞ for the non-GPT-2 symbols against ``masked_fill``.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from fairseq.modules.gelu import gelu_accurate

from fairseq_plugins.models.backbone import build_embedding
from fairseq_plugins.models.infinite_former_gpt2 import GPT2Decoder, InfiniteFormerGPT2Config
from fairseq_plugins.modules.attention.gpt2 import GPT2Attention
from fairseq_plugins.modules.block import FeedForward


def _attention(chunk, p=0.3, width=16, heads=4):
    torch.manual_seed(0)
    attention = GPT2Attention(width, heads, attention_dropout=p).train()
    attention.query_chunk = chunk
    return attention


def _naive(attention, x, keep):
    """Causal softmax attention written out: scores, −∞ above the diagonal, softmax, × the
    dropout mask ``keep`` ``(B, H, T, T)`` (already scaled by 1/(1 − p)), × values."""
    T, B, C = x.shape
    split = lambda t: t.view(T, B, attention.num_heads, attention.head_dim).permute(1, 2, 0, 3)  # noqa: E731
    q, k, v = split(attention.q_proj(x)), split(attention.k_proj(x)), split(attention.v_proj(x))
    scores = q @ k.transpose(-1, -2) / math.sqrt(attention.head_dim)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) * keep) @ v  # (B, H, T, d)
    return attention.out_proj(out.permute(2, 0, 1, 3).reshape(T, B, C))


def _assert_same(got, want, params):
    """Equal outputs, and equal gradients of a random weighting of them w.r.t. ``params``."""
    assert torch.allclose(got, want, atol=1e-6), (got - want).abs().max()
    weights = torch.randn_like(got)
    grads = zip(torch.autograd.grad((got * weights).sum(), params), torch.autograd.grad((want * weights).sum(), params))
    for g, w in grads:
        assert torch.allclose(g, w, atol=1e-5), (g - w).abs().max()


@pytest.mark.parametrize("chunk,length", [(4, 10), (128, 37), (3, 3)])
def test_chunked_attention_with_dropout_equals_sdpa_with_the_same_random_state(chunk, length):
    attention = _attention(chunk)
    x = torch.randn(length, 2, 16, requires_grad=True)
    torch.manual_seed(7)
    chunked = attention(x).out
    torch.manual_seed(7)
    reference = attention.attend(*(attention.heads(proj(x)) for proj in
                                   (attention.q_proj, attention.k_proj, attention.v_proj)), is_causal=True)
    _assert_same(chunked, reference, [x] + list(attention.parameters()))


def test_chunked_attention_equals_a_naive_masked_softmax_with_the_drawn_mask():
    attention, p, length, bsz = _attention(4), 0.3, 11, 2
    x = torch.randn(length, bsz, 16, requires_grad=True)
    torch.manual_seed(11)
    chunked = attention(x).out
    torch.manual_seed(11)  # the mask the chunked path draws: one bernoulli_ over (B, H, T, T)
    keep = torch.empty(bsz, attention.num_heads, length, length).bernoulli_(1 - p) / (1 - p)
    assert 0 < (keep == 0).float().mean() < 1  # some weights dropped, not all
    reference = _naive(attention, x, keep)
    _assert_same(chunked, reference, [x] + list(attention.parameters()))


def test_attention_without_dropout_or_in_eval_is_the_plain_causal_path(monkeypatch):
    attention = _attention(4)
    monkeypatch.setattr(GPT2Attention, "attend_causal_dropout", lambda *a: pytest.fail("chunked path taken"))
    x = torch.randn(6, 1, 16)
    attention.eval()(x)
    attention.train().attention_dropout = 0.0
    attention(x)


def test_fused_gelu_equals_fairseqs_gelu_accurate():
    x = torch.linspace(-12, 12, 20001, dtype=torch.float64)
    x32 = x.float().requires_grad_(True)
    ffn = FeedForward(4, 8, activation_fn="gelu_accurate")
    fused = ffn.activation_fn(x32)
    reference = gelu_accurate(x)  # fairseq's formula, in float64
    assert (fused.double() - reference).abs().max() < 2e-6
    (grad,) = torch.autograd.grad(fused.sum(), x32)
    x64 = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(gelu_accurate(x64).sum(), x64)
    assert (grad.double() - want).abs().max() < 2e-6
    # the whole feed-forward as fairseq would compute it
    h = torch.randn(5, 3, 4)
    assert torch.allclose(ffn(h), ffn.fc2(gelu_accurate(ffn.fc1(h))), atol=1e-6)


def test_output_bias_projection_equals_masked_fill_of_the_non_gpt2_symbols():
    d = Dictionary()  # <s>, <pad>, </s>, <unk>: </s> is <|endoftext|>, the others are no GPT-2 token
    for i in range(21):
        d.add_symbol(str(i))
    d.pad_to_multiple_(8)  # 25 symbols → 32: seven madeupword symbols
    cfg = InfiniteFormerGPT2Config(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=1,
                                   decoder_attention_heads=2, max_positions=8, segment_length=8,
                                   no_long_term_memory=True)
    torch.manual_seed(0)
    dec = GPT2Decoder(cfg, d, build_embedding(d, 16))
    assert dec.non_gpt2.sum() == 3 + 7 and not dec.non_gpt2[d.eos()]
    features = torch.randn(2, 5, 16, requires_grad=True)
    got = dec.output_layer(features)
    want = dec.output_projection(features).masked_fill(dec.non_gpt2, float("-inf"))
    assert torch.equal(torch.isinf(got), torch.isinf(want)) and torch.isinf(want).any()
    assert torch.allclose(got[..., ~dec.non_gpt2], want[..., ~dec.non_gpt2], atol=1e-6)
    targets = torch.randint(0, 21, (2 * 5,)) + d.nspecial
    params = [features, dec.output_projection.weight]
    loss = lambda logits: F.cross_entropy(logits.reshape(-1, len(d)), targets)  # noqa: E731
    for g, w in zip(torch.autograd.grad(loss(got), params), torch.autograd.grad(loss(want), params)):
        assert torch.allclose(g, w, atol=1e-6), (g - w).abs().max()
