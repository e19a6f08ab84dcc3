"""The summarizer's reads of the document beside the paper's: the content read against a naive
float64 loop (values, gradients, gradcheck), the gate at 0 against the model without the read,
the joint softmax and the top-k read against naive attention, the lead-only encoder against
the whole one, and incremental decoding and beam search against the full forward with each
read (docs/summarization.md, "How the decoder reads the document")."""

import math
from types import SimpleNamespace

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

import fairseq_plugins  # noqa: F401  (registers everything)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_summarizer import (InfiniteFormerSummarizerConfig,
                                                               InfiniteFormerSummarizerModel)
from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention
from fairseq_plugins.modules.attention.document import JointDocumentAttention, TopKAttention
from fairseq_plugins.modules.continuous.basis import ContinuousBasis, rbf_basis
from fairseq_plugins.modules.continuous.read import content_placement
from fairseq_plugins.modules.ops.gaussian import expected_basis
from helpers import dictionary, record_reorders


READS = {"location": {"memory_read": "location"}, "content": {"memory_read": "content"}, "mixture": {},
         "gate": {"read_gate": True}, "joint mixture": {"lead_join": "softmax", "memory_read": "mixture"},
         "joint": {"lead_join": "softmax"}, "joint content": {"lead_join": "softmax", "memory_read": "content"},
         "top-k": {"retrieval_topk": 3}, "lead only": {"no_document_memory": True},
         "absolute positions": {"encoder_positions": "absolute", "memory_read": "mixture"},
         "top-k only": {"no_document_memory": True, "retrieval_topk": 4, "lead_window": 0}}


def _model(src, tgt, seed=0, **overrides):
    torch.manual_seed(seed)
    options = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=48, encoder_layers=2, encoder_attention_heads=4,
                   decoder_embed_dim=24, decoder_ffn_embed_dim=40, decoder_layers=2, decoder_attention_heads=2,
                   encoder_chunk_length=8, lead_window=6, num_basis_functions=16, basis_widths="0.05,0.1",
                   dropout=0.0, max_source_positions=100_000, max_target_positions=256)
    options.update(overrides)
    cfg = InfiniteFormerSummarizerConfig(**options)
    return InfiniteFormerSummarizerModel.build_model(cfg, SimpleNamespace(source_dictionary=src,
                                                                          target_dictionary=tgt)).eval()


def _left_pad(rows, pad=1):
    width = max(len(r) for r in rows)
    return torch.stack([torch.cat([r.new_full((width - len(r),), pad), r]) for r in rows])


def _documents(d, lengths, seed=0):
    """Left-padded documents of the given lengths (the translation task's source side)."""
    g = torch.Generator().manual_seed(seed)
    return _left_pad([torch.randint(d.nspecial, len(d), (n,), generator=g) for n in lengths], d.pad())


def _log_probs(model, src, prev):
    return model.get_normalized_probs(model(src, src.ne(1).sum(1), prev), log_probs=True)


def _randomise(model, seed=7):
    """Move every parameter off its initial value (a gate at 0 would hide its read)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model


# ---- the content read --------------------------------------------------------------


def test_content_placement_gradcheck_float64():
    centers, _ = rbf_basis(12, (0.05, 0.1))
    scores = torch.randn(2, 3, 12, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: content_placement(s, centers, 1e-4), (scores,))


def test_content_read_equals_a_naive_loop_in_float64_values_and_gradients():
    """ContinuousCrossAttention(read="content") against a loop over batch, heads and queries:
    s_j = (B W_K)_{h,j} · q_h / √d, p = softmax(s), μ = Σ p_j c_j, σ² = Σ p_j (c_j − μ)²,
    z_h = Σ_j N(μ; c_j, σ² + w_j²) (B W_V)_{h,j}, out = W_O z (float64 autograd for the gradients)."""
    e, m, heads, n, widths, bsz, tgt_len = 8, 6, 2, 16, (0.05, 0.1), 2, 5
    d = e // heads
    basis = ContinuousBasis(n, widths, 0.5)
    torch.manual_seed(3)
    attn = ContinuousCrossAttention(e, heads, m, basis, read="content")
    assert not hasattr(attn, "mu_proj")  # the content read has no w_μ, w_σ
    coefficients = (torch.randn(bsz, n, m) * 2).requires_grad_()
    x = torch.randn(tgt_len, bsz, e, requires_grad=True)
    cot = [torch.randn(tgt_len, bsz, e), torch.randn(bsz, heads, tgt_len), torch.randn(bsz, heads, tgt_len)]
    got = attn(x, encoder_out={"memory_coefficients": [coefficients]})
    got = (got.out, got.stats.mu, got.stats.sigma2)
    params = [attn.q_proj.weight, attn.q_proj.bias, attn.k_proj.weight, attn.v_proj.weight, attn.out_proj.weight]
    got_grads = torch.autograd.grad(sum((g * c).sum() for g, c in zip(got, cot)), [x, coefficients] + params)

    centers, w = rbf_basis(n, widths)
    x64, b64 = x.detach().double().requires_grad_(), coefficients.detach().double().requires_grad_()
    wq, bq, wk, wv, wo = (p.detach().double().requires_grad_() for p in params)
    outs, mu_rows, s2_rows = [], [], []
    for b in range(bsz):
        keys, values = b64[b] @ wk.t(), b64[b] @ wv.t()  # (N, e)
        for t in range(tgt_len):
            q = x64[t, b] @ wq.t() + bq
            z = []
            for h in range(heads):
                sl = slice(h * d, (h + 1) * d)
                s = keys[:, sl] @ q[sl] / math.sqrt(d)
                p = torch.softmax(s, 0)
                mu = (p * centers).sum()
                s2 = ((p * (centers - mu) ** 2).sum()).clamp_min(1e-4)
                z.append(expected_basis(mu, s2, centers, w) @ values[:, sl])
                mu_rows.append((b, h, t, mu))
                s2_rows.append((b, h, t, s2))
            outs.append((t, b, torch.cat(z) @ wo.t()))
    out = torch.stack([o for _, _, o in sorted(outs, key=lambda r: (r[0], r[1]))]).view(tgt_len, bsz, e)
    mus = torch.stack([v for *_, v in sorted(mu_rows, key=lambda r: r[:3])]).view(bsz, heads, tgt_len)
    s2s = torch.stack([v for *_, v in sorted(s2_rows, key=lambda r: r[:3])]).view(bsz, heads, tgt_len)
    ref = (out, mus, s2s)
    ref_grads = torch.autograd.grad(sum((r * c.double()).sum() for r, c in zip(ref, cot)), [x64, b64, wq, bq, wk, wv, wo])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-5)
    for g, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(g.double(), r, rtol=1e-3, atol=1e-5)
    assert float(mus.detach().std()) > 1e-3  # the queries really do read different places


def test_mixture_read_equals_a_naive_loop_in_float64_values_and_gradients():
    """ContinuousCrossAttention(read="mixture") against a loop: p = softmax((B W_K)_h q_h / √d),
    E[ψ_i] = Σ_j p_j ∫ N(t; c_j, w_j²) ψ_i(t) dt = Σ_j p_j N(c_j; c_i, w_j² + w_i²),
    z_h = Σ_i E[ψ_i] (B W_V)_{h,i}, out = W_O z; μ, σ² the mixture's mean and variance."""
    e, m, heads, n, widths, bsz, tgt_len = 8, 6, 2, 16, (0.05, 0.1), 2, 4
    d = e // heads
    basis = ContinuousBasis(n, widths, 0.5)
    torch.manual_seed(6)
    attn = ContinuousCrossAttention(e, heads, m, basis, read="mixture")
    coefficients = (torch.randn(bsz, n, m) * 2).requires_grad_()
    x = torch.randn(tgt_len, bsz, e, requires_grad=True)
    cot = torch.randn(tgt_len, bsz, e)
    got = attn(x, encoder_out={"memory_coefficients": [coefficients]})
    params = [attn.q_proj.weight, attn.q_proj.bias, attn.k_proj.weight, attn.v_proj.weight, attn.out_proj.weight]
    got_grads = torch.autograd.grad((got.out * cot).sum(), [x, coefficients] + params)

    centers, w = rbf_basis(n, widths)
    x64, b64 = x.detach().double().requires_grad_(), coefficients.detach().double().requires_grad_()
    wq, bq, wk, wv, wo = (p.detach().double().requires_grad_() for p in params)
    rows, moments = {}, {}
    for b in range(bsz):
        keys, values = b64[b] @ wk.t(), b64[b] @ wv.t()
        for t in range(tgt_len):
            q = x64[t, b] @ wq.t() + bq
            z = []
            for h in range(heads):
                sl = slice(h * d, (h + 1) * d)
                p = torch.softmax(keys[:, sl] @ q[sl] / math.sqrt(d), 0)
                expected = sum(p[j] * expected_basis(centers[j], w[j] ** 2, centers, w) for j in range(n))
                z.append(expected @ values[:, sl])
                mu = (p * centers).sum()
                moments[b, h, t] = (mu, (p * (centers ** 2 + w ** 2)).sum() - mu ** 2)
            rows[t, b] = torch.cat(z) @ wo.t()
    out = torch.stack([rows[t, b] for t in range(tgt_len) for b in range(bsz)]).view(tgt_len, bsz, e)
    ref_grads = torch.autograd.grad((out * cot.double()).sum(), [x64, b64, wq, bq, wk, wv, wo])
    torch.testing.assert_close(got.out.double(), out, rtol=1e-4, atol=1e-5)
    for (b, h, t), (mu, s2) in moments.items():
        assert abs(float(got.stats.mu[b, h, t]) - float(mu)) < 1e-5
        assert abs(float(got.stats.sigma2[b, h, t]) - float(s2)) < 1e-5
    for g, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(g.double(), r, rtol=1e-3, atol=1e-5)


# ---- the gate, the joint softmax, top-k -------------------------------------------------


def test_gate_at_zero_is_exactly_the_model_without_the_read():
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    gated = _model(src_d, tgt_d, read_gate=True)
    without = _model(src_d, tgt_d, no_document_memory=True)
    loaded = without.load_state_dict(gated.state_dict(), strict=False)
    assert all("memory_attn" in k or "memory_gate" in k or "read_gate" in k for k in loaded.unexpected_keys)
    assert not loaded.missing_keys
    src, prev = _documents(src_d, (37, 13)), _documents(tgt_d, (9, 9), seed=1)
    with torch.no_grad():
        assert torch.equal(_log_probs(gated, src, prev), _log_probs(without, src, prev))
        for layer in gated.decoder.layers:
            layer.encoder_attn.read_gate.fill_(0.5)
        assert (_log_probs(gated, src, prev) - _log_probs(without, src, prev)).abs().max() > 1e-4


def _naive_attention(q, keys, values, mask):
    """softmax(q kᵀ) v of one head: q (T, d) already scaled, keys/values (S, d), mask (S,) True = drop."""
    logits = (q @ keys.t()).masked_fill(mask[None], float("-inf"))
    return torch.softmax(logits, -1) @ values


def test_joint_softmax_equals_attention_over_lead_states_plus_one_read_slot():
    """Per head and query: softmax over [q·W_K h_i (lead states), q·k̄] with k̄ = E[ψ]ᵀ B W_K, v̄ =
    E[ψ]ᵀ B W_V; wiped, the slot leaves the softmax (attention over the lead window alone)."""
    e, m, heads, n, bsz, tgt_len, window = 8, 6, 2, 12, 2, 4, 5
    d = e // heads
    basis = ContinuousBasis(n, (0.05, 0.1), 0.5)
    torch.manual_seed(4)
    attn = JointDocumentAttention(e, heads, m, basis)
    b, lead, x = torch.randn(bsz, n, m), torch.randn(window, bsz, m), torch.randn(tgt_len, bsz, e)
    mask = torch.tensor([[False] * window, [False, False, False, True, True]])
    enc = {"memory_coefficients": [b], "encoder_out": [lead], "encoder_padding_mask": [mask]}
    with torch.no_grad():
        got = attn(x, encoder_out=enc)
        attn.wiped = True
        wiped = attn(x, encoder_out=enc).out
        attn.wiped = False
        centers, widths = basis.centers64.float(), basis.widths64.float()
        q = (x @ attn.q_proj.weight.t() + attn.q_proj.bias) / math.sqrt(d)
        for i in range(bsz):
            mem_k, mem_v = b[i] @ attn.k_proj.weight.t(), b[i] @ attn.v_proj.weight.t()
            lk, lv = lead[:, i] @ attn.k_proj.weight.t(), lead[:, i] @ attn.v_proj.weight.t()
            rows, lead_rows = [], []
            for h in range(heads):
                sl = slice(h * d, (h + 1) * d)
                density = expected_basis(got.stats.mu[i, h], got.stats.sigma2[i, h], centers, widths)  # (T, N)
                k_bar, v_bar = density @ mem_k[:, sl], density @ mem_v[:, sl]
                heads_out = []
                for t in range(tgt_len):
                    keys = torch.cat([lk[:, sl], k_bar[t:t + 1]])
                    values = torch.cat([lv[:, sl], v_bar[t:t + 1]])
                    heads_out.append(_naive_attention(q[t:t + 1, i, sl], keys, values,
                                                      torch.cat([mask[i], mask.new_zeros(1)]))[0])
                rows.append(torch.stack(heads_out))
                lead_rows.append(_naive_attention(q[:, i, sl], lk[:, sl], lv[:, sl], mask[i]))
            torch.testing.assert_close(got.out[:, i], torch.cat(rows, -1) @ attn.out_proj.weight.t(),
                                       rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(wiped[:, i], torch.cat(lead_rows, -1) @ attn.out_proj.weight.t(),
                                       rtol=1e-5, atol=1e-6)


def test_top_k_read_equals_naive_attention_over_the_k_best_states():
    e, m, heads, bsz, tgt_len, length = 8, 6, 2, 2, 3, 9
    d = e // heads
    torch.manual_seed(5)
    states, x = torch.randn(length, bsz, m), torch.randn(tgt_len, bsz, e)
    mask = torch.zeros(bsz, length, dtype=torch.bool)
    mask[1, 6:] = True
    enc = {"document_states": [states], "document_padding_mask": [mask]}
    for k in (1, 3, 50):
        attn = TopKAttention(e, heads, m, k)
        with torch.no_grad():
            got = attn(x, encoder_out=enc).out
            q = attn.q_proj(x) / math.sqrt(d)
            keys, values = attn.k_proj(states), attn.v_proj(states)
            for i in range(bsz):
                rows = []
                for h in range(heads):
                    sl = slice(h * d, (h + 1) * d)
                    out = []
                    for t in range(tgt_len):
                        logits = (keys[:, i, sl] @ q[t, i, sl]).masked_fill(mask[i], float("-inf"))
                        keep = logits.argsort(descending=True)[:min(k, int((~mask[i]).sum()))]
                        drop = torch.ones(length, dtype=torch.bool)
                        drop[keep] = False
                        out.append(_naive_attention(q[t:t + 1, i, sl], keys[:, i, sl], values[:, i, sl], drop)[0])
                    rows.append(torch.stack(out))
                torch.testing.assert_close(got[:, i], attn.out_proj(torch.cat(rows, -1)), rtol=1e-5, atol=1e-6)


def test_wiped_top_k_read_is_exactly_the_model_without_it():
    """With --memory-wiped the top-k read retrieves nothing: a lead window + top-k summarizer gives
    the lead-only summarizer's outputs with the same weights."""
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    wiped = _randomise(_model(src_d, tgt_d, no_document_memory=True, retrieval_topk=3, memory_wiped=True))
    lead = _model(src_d, tgt_d, no_document_memory=True)
    loaded = lead.load_state_dict(wiped.state_dict(), strict=False)
    assert loaded.unexpected_keys and all("retrieval" in k for k in loaded.unexpected_keys)
    src, prev = _documents(src_d, (37, 13)), _documents(tgt_d, (9, 9), seed=1)
    with torch.no_grad():
        torch.testing.assert_close(_log_probs(wiped, src, prev), _log_probs(lead, src, prev), rtol=0, atol=1e-6)
        for m in wiped.modules():
            if isinstance(m, TopKAttention):
                m.wiped = False
        assert (_log_probs(wiped, src, prev) - _log_probs(lead, src, prev)).abs().max() > 1e-3


def test_lead_only_encoder_reads_only_the_chunks_it_needs_with_the_same_outputs():
    """Without the document memory the encoder stops after the chunks that hold the lead window
    (a state depends on its own chunk and earlier ones only): the lead states equal those of the
    whole document's encoding, so the logits do too, and a longer tail changes nothing."""
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _model(src_d, tgt_d, no_document_memory=True, lead_window=10)
    assert model.encoder.read_limit == 16  # two chunks of 8
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(src_d.nspecial, len(src_d), (n,), generator=g) for n in (37, 16)]
    tails = [torch.randint(src_d.nspecial, len(src_d), (n,), generator=g) for n in (20, 30)]
    src = _left_pad(rows)
    longer = _left_pad([torch.cat([r, t]) for r, t in zip(rows, tails)])  # the same first two chunks
    prev = _documents(tgt_d, (7, 7), seed=1)
    with torch.no_grad():
        truncated = _log_probs(model, src, prev)
        model.encoder.read_limit = None
        whole = _log_probs(model, src, prev)
        assert torch.equal(truncated, whole)
        model.encoder.read_limit = 16
        torch.testing.assert_close(_log_probs(model, longer, prev), truncated, rtol=0, atol=1e-6)


def test_absolute_positions_are_fairseqs_sinusoids_at_each_tokens_place_in_its_document():
    """--encoder-positions absolute adds fairseq's sinusoidal table at every token's position in
    its document (chunk j, offset i: j·C + i), padding removed first, so left and right padding
    and a lead-only encoder that stops early give the same states."""
    from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding

    from fairseq_plugins.models.document_encoder import sinusoid

    torch.testing.assert_close(sinusoid(torch.arange(300), 24), SinusoidalPositionalEmbedding.get_embedding(300, 24),
                               rtol=0, atol=1e-5)
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _model(src_d, tgt_d, encoder_positions="absolute", lead_window=40)
    rows = [_documents(src_d, (n,), seed=n)[0] for n in (37, 13)]
    prev = _documents(tgt_d, (7, 7), seed=1)
    with torch.no_grad():
        enc = model.encoder(_left_pad(rows))
        right = torch.stack([torch.cat([r, r.new_full((37 - len(r),), 1)]) for r in rows])
        torch.testing.assert_close(model.encoder(right)["encoder_out"][0], enc["encoder_out"][0], rtol=0, atol=1e-6)
        # the same weights without the positions: the states differ (the positions reach the lead window)
        relative = _model(src_d, tgt_d, lead_window=40)
        relative.load_state_dict(model.state_dict())
        plain = relative.encoder(rows[0][None])["encoder_out"][0]
        assert (plain[:, 0] - enc["encoder_out"][0][:, 0]).abs().max() > 1e-2


# ---- decoding with each read -----------------------------------------------------------


@pytest.mark.parametrize("read", list(READS))
def test_incremental_decoding_equals_full_forward_with_each_read(read):
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _randomise(_model(src_d, tgt_d, seed=2, **READS[read]))
    src, prev = _documents(src_d, (37, 13)), _documents(tgt_d, (12, 12), seed=3)
    with torch.no_grad():
        full = _log_probs(model, src, prev)
        enc, state = model.encoder(src), {}
        blank = {k: [torch.zeros_like(v) for v in vs] for k, vs in enc.items()}
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, :t + 1], encoder_out=enc if t == 0 else blank, incremental_state=state)
            step = model.get_normalized_probs((step, None), log_probs=True)
            torch.testing.assert_close(step[:, -1], full[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("read", ["content", "joint", "top-k"])
def test_beam_search_with_each_read_equals_full_forward_rescoring(monkeypatch, read):
    src_d, tgt_d = dictionary(15, "s"), dictionary(4, "t")
    model = _randomise(_model(src_d, tgt_d, seed=0, **READS[read]), seed=3)
    kind = {"content": ContinuousCrossAttention, "joint": JointDocumentAttention, "top-k": TopKAttention}[read]
    orders = record_reorders(monkeypatch, kind)
    docs = [_documents(src_d, (n,), seed=10 + n)[0] for n in (21, 9, 14)]
    src = torch.stack([torch.cat([r.new_full((21 - len(r),), 1), r]) for r in docs])
    generator = SequenceGenerator([model], tgt_d, beam_size=3, max_len_b=20, min_len=2)
    with torch.no_grad():
        hypos = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1)}})
        for i, beams in enumerate(hypos):
            for hyp in beams:
                tokens = hyp["tokens"]
                prev = torch.cat([tokens.new_tensor([tgt_d.eos()]), tokens[:-1]]).unsqueeze(0)
                expected = _log_probs(model, docs[i][None], prev)[0].gather(1, tokens[:, None]).squeeze(1)
                torch.testing.assert_close(hyp["positional_scores"], expected, atol=1e-4, rtol=1e-4)
    assert any(not torch.equal(o, torch.arange(len(o))) for o in orders)


# ---- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("overrides,needle", [
    ({"no_document_memory": True, "lead_window": 0}, "reads nothing"),
    ({"no_document_memory": True, "read_gate": True}, "--read-gate applies to the document memory"),
    ({"no_document_memory": True, "memory_read": "content"}, "--memory-read content applies"),
    ({"no_document_memory": True, "memory_read": "location"}, "--memory-read location applies"),
    ({"no_document_memory": True, "memory_wiped": True}, "--memory-wiped applies"),
    ({"retrieval_topk": 0, "no_document_memory": True, "memory_wiped": True, "lead_window": 4}, "--memory-wiped"),
    ({"lead_join": "softmax", "lead_window": 0}, "--lead-join softmax joins"),
    ({"lead_join": "softmax", "read_gate": True}, "drop --read-gate"),
    ({"retrieval_topk": -2}, "--retrieval-topk must be >= 0"),
    ({"memory_read": "nearest"}, "--memory-read must be one of location, content"),
])
def test_bad_read_options_are_one_line_errors(overrides, needle):
    with pytest.raises(ConfigError) as e:
        _model(dictionary(15, "s"), dictionary(18, "t"), **overrides)
    assert needle in str(e.value) and "\n" not in str(e.value)
