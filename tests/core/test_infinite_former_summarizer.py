"""infinite_former_summarizer: the per-document ridge fit against lstsq, the
chunked encoder against a dense O(n²) reference, incremental decoding and beam
search against the full forward pass, decoder cost/state independent of the
source length (FLOP counts), linear encoder cost, padding invariance, one-line
errors, and fairseq-preprocess → fairseq-train → fairseq-generate."""

import math
import re
from types import SimpleNamespace

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

import fairseq_plugins  # noqa: F401  (registers everything)
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_summarizer import (InfiniteFormerSummarizerConfig,
                                                               InfiniteFormerSummarizerModel)
from fairseq_plugins.modules.attention.continuous_cross import ContinuousCrossAttention
from fairseq_plugins.modules.continuous.basis import rbf_basis
from fairseq_plugins.modules.continuous.fit import fit_sequences
from helpers import USER_DIR, dictionary, fairseq, record_reorders, run


def _model(src, tgt, seed=0, **overrides):
    torch.manual_seed(seed)
    options = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=48, encoder_layers=2, encoder_attention_heads=4,
                   decoder_embed_dim=24, decoder_ffn_embed_dim=40, decoder_layers=2, decoder_attention_heads=2,
                   encoder_chunk_length=8, lead_window=6, num_basis_functions=16, basis_widths="0.05,0.1",
                   dropout=0.0, max_source_positions=100_000, max_target_positions=256)
    options.update(overrides)
    cfg = InfiniteFormerSummarizerConfig(**options)
    task = SimpleNamespace(source_dictionary=src, target_dictionary=tgt)
    return InfiniteFormerSummarizerModel.build_model(cfg, task).eval()


def _tokens(d, bsz, length, seed=0, bos=True):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(d.nspecial, len(d), (bsz, length), generator=g)
    if bos:
        tokens[:, 0] = d.eos()
    return tokens


def _left_pad(rows, pad):
    """Left-padded batch (the translation task's default for the source)."""
    width = max(len(r) for r in rows)
    return torch.stack([torch.cat([r.new_full((width - len(r),), pad), r]) for r in rows])


def _log_probs(model, src, prev):
    return model.get_normalized_probs(model(src, src.ne(model.encoder.padding_idx).sum(1), prev), log_probs=True)


# ---- the memory fit ------------------------------------------------------------


def _lstsq_fit(x, centers, widths, lam, boundary_padding):
    """B by least squares on the augmented system [F; √λ I] B = [X; 0] (float64),
    with ⌊L/2⌋ zero targets at spacing 1/L beyond both ends of (i + ½)/L."""
    length = x.size(0)
    t = (torch.arange(length, dtype=torch.float64) + 0.5) / length
    targets = x.double()
    if boundary_padding and length >= 2:
        k = torch.arange(1, length // 2 + 1, dtype=torch.float64) / length
        t = torch.cat([t, t[0] - k, t[-1] + k])
        targets = torch.cat([targets, targets.new_zeros(2 * (length // 2), x.size(1))])
    c, w = centers.double(), widths.double()
    design = torch.exp(-0.5 * ((t[:, None] - c) / w) ** 2) / (w * math.sqrt(2 * math.pi))  # (n, N)
    a = torch.cat([design, math.sqrt(lam) * torch.eye(c.numel(), dtype=torch.float64)])
    b = torch.cat([targets, targets.new_zeros(c.numel(), x.size(1))])
    return torch.linalg.lstsq(a, b).solution


@pytest.mark.parametrize("boundary_padding", [True, False])
def test_fit_sequences_equals_lstsq_per_example(boundary_padding):
    centers, widths = rbf_basis(24, (0.03, 0.08))
    lengths = torch.tensor([7, 40, 1, 23])
    x = torch.randn(4, 40, 5, generator=torch.Generator().manual_seed(0))
    x = x.cumsum(1) / 4  # smooth-ish signals, as hidden states along a document
    garbage = x.clone()
    for b, n in enumerate(lengths.tolist()):
        garbage[b, n:] = 1e3  # whatever sits beyond a length must not matter
    fit = fit_sequences(garbage, lengths, centers, widths, 0.5, boundary_padding)
    assert fit.shape == (4, 24, 5) and fit.dtype == torch.float32
    for b, n in enumerate(lengths.tolist()):
        expected = _lstsq_fit(x[b, :n], centers, widths, 0.5, boundary_padding)
        torch.testing.assert_close(fit[b].double(), expected, atol=1e-5, rtol=1e-4)
        alone = fit_sequences(x[b:b + 1, :n], lengths[b:b + 1], centers, widths, 0.5, boundary_padding)
        torch.testing.assert_close(alone[0], fit[b], atol=1e-6, rtol=1e-6)


def test_fit_sequences_gradient_and_bad_lengths():
    centers, widths = rbf_basis(8, (0.1,))
    x = torch.randn(2, 6, 3, requires_grad=True)
    fit = fit_sequences(x, torch.tensor([6, 4]), centers, widths, 1.0)
    fit.sum().backward()
    assert x.grad[1, 4:].abs().sum() == 0 and x.grad[1, :4].abs().sum() > 0  # padding gets no gradient
    for bad in ([7, 4], [0, 4]):
        with pytest.raises(ConfigError, match=r"lengths must lie in \[1, 6\]"):
            fit_sequences(x, torch.tensor(bad), centers, widths, 1.0)


# ---- encoder vs a dense reference -------------------------------------------------


def _dense_encoder_states(encoder, tokens, chunk, previous_chunk=True):
    """Top encoder states of one unpadded document by dense O(L²) attention:
    query i sees key j iff j is in i's chunk (or, with ``previous_chunk``, the
    one before), with rotary angles of the global positions (relative i − j)."""
    length = tokens.size(0)
    x = encoder.embed_scale * encoder.embed_tokens(tokens)  # (L, e)
    block = torch.arange(length) // chunk
    allowed = (block[None, :] == block[:, None])
    if previous_chunk:
        allowed |= block[None, :] == block[:, None] - 1
    for layer in encoder.layers:
        att, ffn = layer.self_attn, layer.ffn
        h, d = att.num_heads, att.head_dim
        hidden = layer.self_attn_layer_norm(x)
        q, k, v = (proj(hidden).view(length, h, d).transpose(0, 1) for proj in (att.q_proj, att.k_proj,
                                                                                  att.v_proj))
        inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
        angle = torch.arange(length).float()[:, None] * inv_freq  # (L, d/2)
        cos, sin = torch.cat([angle, angle], -1).cos(), torch.cat([angle, angle], -1).sin()

        def rotate(y):
            return y * cos + torch.cat([-y[..., d // 2:], y[..., :d // 2]], -1) * sin

        scores = rotate(q) @ rotate(k).transpose(-1, -2) / math.sqrt(d)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        attn = (weights @ v).transpose(0, 1).reshape(length, -1)
        x = x + att.out_proj(attn)
        x = x + ffn.fc2(ffn.activation_fn(ffn.fc1(layer.final_layer_norm(x))))
    return encoder.layer_norm(x)


@pytest.mark.parametrize("previous_chunk", [True, False])
def test_chunked_encoder_equals_dense_banded_attention(previous_chunk):
    src_d = dictionary(15, "s")
    model = _model(src_d, dictionary(12, "t"), seed=1, lead_window=40, no_previous_chunk=not previous_chunk)
    docs = [_tokens(src_d, 1, n, seed=n, bos=False)[0] for n in (29, 11)]
    src = _left_pad(docs, src_d.pad())
    with torch.no_grad():
        out = model.encoder(src)
        for b, doc in enumerate(docs):
            dense = _dense_encoder_states(model.encoder, doc, chunk=8, previous_chunk=previous_chunk)
            lead = out["encoder_out"][0][:, b]  # (W, e): the first W states, zeros beyond the document
            torch.testing.assert_close(lead[:len(doc)], dense, atol=1e-5, rtol=1e-5)
            assert lead[len(doc):].abs().sum() == 0
            assert out["encoder_padding_mask"][0][b].tolist() == [i >= len(doc) for i in range(40)]
            # the memory is the ridge fit of the gated dense states
            expected = fit_sequences(model.encoder.smooth(dense[None]), torch.tensor([len(doc)]),
                                     model.encoder.signal.centers64, model.encoder.signal.widths64, 0.5)
            torch.testing.assert_close(out["memory_coefficients"][0][b], expected[0], atol=1e-5, rtol=1e-4)


def test_encoder_in_groups_of_chunks_equals_dense_reference_and_one_batch():
    """A long document's chunks run through each layer in groups (GROUP_TOKENS = 16: two
    chunks of 8, and the chunk before as context); values equal the dense reference and
    gradients equal those of one batch of all chunks."""
    src_d = dictionary(15, "s")
    docs = [_tokens(src_d, 1, n, seed=n, bos=False)[0] for n in (29, 11)]  # 4 + 2 chunks: 3 groups
    src = _left_pad(docs, src_d.pad())
    grads = {}
    for group_tokens in (16, 10**9):
        model = _model(src_d, dictionary(12, "t"), seed=1, lead_window=40)
        model.encoder.GROUP_TOKENS = group_tokens
        out = model.encoder(src)
        (out["memory_coefficients"][0].square().sum() + out["encoder_out"][0].sum()).backward()
        grads[group_tokens] = {n: p.grad.clone() for n, p in model.encoder.named_parameters() if p.grad is not None}
        if group_tokens == 16:
            with torch.no_grad():
                for b, doc in enumerate(docs):
                    dense = _dense_encoder_states(model.encoder, doc, chunk=8, previous_chunk=True)
                    torch.testing.assert_close(out["encoder_out"][0][:len(doc), b], dense, atol=1e-5, rtol=1e-5)
    assert grads[16].keys() == grads[10**9].keys() and len(grads[16]) > 0
    for name, grad in grads[16].items():
        torch.testing.assert_close(grad, grads[10**9][name], atol=1e-5, rtol=1e-4, msg=name)


# ---- incremental decoding and beam search --------------------------------------------


@pytest.mark.parametrize("lead_window", [6, 0])
def test_incremental_decoding_equals_full_forward(lead_window):
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _model(src_d, tgt_d, seed=2, lead_window=lead_window)
    src = _left_pad([_tokens(src_d, 1, n, seed=n, bos=False)[0] for n in (37, 13)], src_d.pad())
    prev = _tokens(tgt_d, 2, 12, seed=3)
    with torch.no_grad():
        full = _log_probs(model, src, prev)
        enc = model.encoder(src)
        # after the first step the decoder state holds all it needs from the encoder (cached K/V)
        blank = {k: [torch.zeros_like(v) for v in vs] for k, vs in enc.items()}
        state = {}
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, :t + 1], encoder_out=enc if t == 0 else blank, incremental_state=state)
            step = model.get_normalized_probs((step, None), log_probs=True)
            torch.testing.assert_close(step[:, -1], full[:, t], atol=1e-5, rtol=1e-5)


def test_memory_wiped_reads_exactly_zero_and_keeps_the_lead_window():
    """--memory-wiped: the decoder's continuous reads add exactly nothing (the logits of the same
    model whose memory reads' W_O is zero), the lead window still counts, the reads' statistics
    are marked invalid (no KL), set_memory_wiped on a built model is the same, and incremental
    decoding of the wiped model equals its full forward."""
    from fairseq_plugins.modules.continuous.read import total_kl
    from fairseq_plugins.modules.memory.contract import set_memory_wiped

    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    src = _left_pad([_tokens(src_d, 1, n, seed=n, bos=False)[0] for n in (37, 13)], src_d.pad())
    prev = _tokens(tgt_d, 2, 9, seed=3)
    with torch.no_grad():
        built = _model(src_d, tgt_d, seed=2, memory_wiped=True)
        wiped = _log_probs(built, src, prev)
        switched = _model(src_d, tgt_d, seed=2)
        full = _log_probs(switched, src, prev)
        assert set_memory_wiped(switched) == 2 and torch.equal(_log_probs(switched, src, prev), wiped)
        zeroed = _model(src_d, tgt_d, seed=2)
        for m in zeroed.modules():
            if isinstance(m, ContinuousCrossAttention):
                m.out_proj.weight.zero_()
        torch.testing.assert_close(_log_probs(zeroed, src, prev), wiped, atol=1e-6, rtol=0)
        assert (full - wiped).abs().max() > 1e-3  # the memory is read unwiped
        # the lead window is kept: wiping the memory of a model without one leaves the decoder blind
        # to the source, so two different sources give the same summary probabilities
        blind = _model(src_d, tgt_d, seed=2, memory_wiped=True, lead_window=0)
        other = _left_pad([_tokens(src_d, 1, n, seed=n + 50, bos=False)[0] for n in (37, 13)], src_d.pad())
        assert torch.equal(_log_probs(blind, src, prev), _log_probs(blind, other, prev))
        assert (_log_probs(built, src, prev) - _log_probs(built, other, prev)).abs().max() > 1e-3
        _, extra = built(src, src.ne(src_d.pad()).sum(1), prev)
        assert extra["ltm_stats"] and not any(bool(s.valid.any()) for s in extra["ltm_stats"])
        assert float(total_kl(extra["ltm_stats"], 0.5)) == 0.0
        enc, state = built.encoder(src), {}
        for t in range(prev.size(1)):
            step, _ = built.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state)
            step = built.get_normalized_probs((step, None), log_probs=True)
            torch.testing.assert_close(step[:, -1], wiped[:, t], atol=1e-5, rtol=1e-5)


def test_beam_search_scores_equal_full_forward_rescoring(monkeypatch):
    """fairseq's beam search (beam 3) on 3 left-padded documents: every returned
    hypothesis's positional scores equal the teacher-forced log-probs of a full
    forward pass on its document alone. The tiny target vocabulary makes the
    documents finish at different steps, so the batch shrinks (9 → 6 → 3 rows)
    and the memory's cached K/V must follow ``new_order`` (besides the beams'
    reordering)."""
    src_d, tgt_d = dictionary(15, "s"), dictionary(4, "t")
    model = _model(src_d, tgt_d, seed=0)
    orders = record_reorders(monkeypatch, ContinuousCrossAttention)
    docs = [_tokens(src_d, 1, n, seed=10 + n, bos=False)[0] for n in (21, 9, 14)]
    src = _left_pad(docs, src_d.pad())
    lengths = src.ne(src_d.pad()).sum(1)
    generator = SequenceGenerator([model], tgt_d, beam_size=3, max_len_b=20, min_len=2)
    with torch.no_grad():
        hypos = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})
        count = 0
        for i, beams in enumerate(hypos):
            assert len(beams) == 3
            for hyp in beams:
                tokens = hyp["tokens"]
                prev = torch.cat([tokens.new_tensor([tgt_d.eos()]), tokens[:-1]]).unsqueeze(0)
                lprobs = _log_probs(model, docs[i][None], prev)[0]  # teacher-forced, document alone
                expected = lprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
                torch.testing.assert_close(hyp["positional_scores"], expected, atol=1e-4, rtol=1e-4)
                assert hyp["score"].item() == pytest.approx(expected.sum().item() / len(tokens), abs=1e-4)
                count += 1
    assert count == 9
    assert any(not torch.equal(o, torch.arange(len(o))) for o in orders)  # beams really were reordered
    assert {len(o) for o in orders} >= {9, 6, 3}  # and finished documents left the batch


def test_reorder_encoder_out_equals_encoding_reordered_input():
    src_d = dictionary(15, "s")
    model = _model(src_d, dictionary(12, "t"), seed=5)
    src = _left_pad([_tokens(src_d, 1, n, seed=n, bos=False)[0] for n in (5, 17, 12)], src_d.pad())
    new_order = torch.tensor([2, 2, 0, 1])
    with torch.no_grad():
        moved = model.encoder.reorder_encoder_out(model.encoder(src), new_order)
        direct = model.encoder(src[new_order])
    for key in ("memory_coefficients", "encoder_out", "encoder_padding_mask", "src_lengths"):
        torch.testing.assert_close(moved[key][0], direct[key][0], atol=1e-6, rtol=1e-6)


# ---- padding ---------------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_does_not_change_any_example(side):
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _model(src_d, tgt_d, seed=6)
    docs = [_tokens(src_d, 1, n, seed=20 + n, bos=False)[0] for n in (5, 33, 19)]
    src = _left_pad(docs, src_d.pad())
    if side == "right":
        src = torch.stack([torch.cat([d, d.new_full((33 - len(d),), src_d.pad())]) for d in docs])
    prev = _tokens(tgt_d, 3, 7, seed=7)
    with torch.no_grad():
        batch = _log_probs(model, src, prev)
        enc = model.encoder(src)
        for b, doc in enumerate(docs):
            torch.testing.assert_close(_log_probs(model, doc[None], prev[b:b + 1])[0], batch[b],
                                       atol=1e-5, rtol=1e-5)
            alone = model.encoder(doc[None])
            torch.testing.assert_close(enc["memory_coefficients"][0][b], alone["memory_coefficients"][0][0],
                                       atol=1e-5, rtol=1e-5)


# ---- cost independent of the source length -------------------------------------------


def _sdpa_cpu_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _flops(fn):
    # FlopCounterMode has no formula for the CPU kernel of scaled_dot_product_attention: add torch's own
    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flops}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        fn()
    return counter.get_total_flops()


def _tensor_shapes(value):
    if isinstance(value, torch.Tensor):
        return [tuple(value.shape)]
    if isinstance(value, dict):
        return [s for k in sorted(value) for s in _tensor_shapes(value[k])]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _tensor_shapes(v)]
    return []


def test_decoder_cost_and_state_do_not_depend_on_source_length():
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    model = _model(src_d, tgt_d, seed=8, encoder_embed_dim=16, encoder_ffn_embed_dim=16, encoder_layers=1,
                   encoder_attention_heads=2, encoder_chunk_length=64, lead_window=32, num_basis_functions=16)
    prev = _tokens(tgt_d, 1, 6, seed=9)
    enc_flops, dec_flops, step_flops, encoder_shapes, state_shapes = {}, {}, {}, {}, {}
    with torch.no_grad():
        for n in (1024, 16384):
            src = _tokens(src_d, 1, n, seed=n, bos=False)
            holder = {}
            enc_flops[n] = _flops(lambda: holder.update(enc=model.encoder(src)))
            enc = holder["enc"]
            encoder_shapes[n] = [(k, _tensor_shapes(v)) for k, v in sorted(enc.items())]
            dec_flops[n] = _flops(lambda: model.decoder(prev, encoder_out=enc))
            state, steps = {}, []
            for t in range(prev.size(1)):
                steps.append(_flops(lambda: model.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state)))
            step_flops[n] = steps
            state_shapes[n] = _tensor_shapes(list(state.values()))
    assert dec_flops[1024] == dec_flops[16384] > 0
    assert step_flops[1024] == step_flops[16384] and min(step_flops[1024]) > 0
    assert encoder_shapes[1024] == encoder_shapes[16384]
    assert state_shapes[1024] == state_shapes[16384] and len(state_shapes[1024]) > 0
    assert 15.2 < enc_flops[16384] / enc_flops[1024] < 16.8  # linear in the source length
    # and the encoder really counted attention: a 16k-token full attention would cost far more
    assert enc_flops[16384] < 16384 ** 2 * 16


# ---- options and errors ------------------------------------------------------------


def _summarizer_params(v_src, v_tgt, e, c, f_enc, f_dec, enc_layers, dec_layers, n, lead=True, gate=True,
                       location=False):
    """Parameter count implied by the design (embeddings untied); w_mu, w_sigma only for the
    location read (the default read is the mixture read, which has none)."""
    enc_layer = 4 * (e * e + e) + 2 * 2 * e + (e * f_enc + f_enc) + (f_enc * e + e)
    encoder = v_src * e + enc_layers * enc_layer + 2 * e + (3 * e * e + e if gate else 0)
    memory_attn = (c * c + c) + 2 * e * c + c * c + (2 * n if location else 0)  # W_q (bias), W_K, W_V, W_O, w_mu, w_sigma
    lead_attn = (c * c + c) + 2 * (e * c + c) + (c * c + c) if lead else 0
    dec_layer = 4 * (c * c + c) + memory_attn + lead_attn + 3 * 2 * c + (c * f_dec + f_dec) + (f_dec * c + c)
    decoder = 2 * v_tgt * c + dec_layers * dec_layer + 2 * c
    return encoder + decoder


@pytest.mark.parametrize("arch,sizes", [
    ("infinite_former_summarizer", (128, 128, 512, 512, 2, 2, 256)),
    ("infinite_former_summarizer_base", (512, 512, 2048, 2048, 6, 6, 512)),
])
def test_named_architectures_through_fairseq_parsing(tmp_path, arch, sizes):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    for lang, n in (("source", 40), ("target", 30)):
        dictionary(n, lang[0]).save(str(tmp_path / f"dict.{lang}.txt"))
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(tmp_path), "--user-dir", USER_DIR, "--task", "translation",
        "--source-lang", "source", "--target-lang", "target", "--arch", arch, "--criterion", "infinite_former_kl",
        "--max-source-positions", "50000"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    assert isinstance(model, InfiniteFormerSummarizerModel)
    m = cfg.model
    assert (m.encoder_embed_dim, m.decoder_embed_dim, m.encoder_ffn_embed_dim, m.decoder_ffn_embed_dim,
            m.encoder_layers, m.decoder_layers, m.num_basis_functions) == sizes
    assert (m.encoder_chunk_length, m.lead_window) == (256, 256)
    assert model.max_positions() == (50000, 1024)  # the task's limits: nothing is truncated by the model
    e, c, f_enc, f_dec, enc_layers, dec_layers, n = sizes
    v_src, v_tgt = len(task.source_dictionary), len(task.target_dictionary)
    expected = _summarizer_params(v_src, v_tgt, e, c, f_enc, f_dec, enc_layers, dec_layers, n)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_architectures_and_one_line_errors():
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    from fairseq.models import ARCH_MODEL_REGISTRY
    assert ARCH_MODEL_REGISTRY["infinite_former_summarizer"] is InfiniteFormerSummarizerModel
    assert ARCH_MODEL_REGISTRY["infinite_former_summarizer_base"] is InfiniteFormerSummarizerModel
    cases = [({"encoder_chunk_length": 0}, "--encoder-chunk-length"), ({"lead_window": -1}, "--lead-window"),
             ({"decoder_attention_heads": 5}, "--decoder-attention-heads"),
             ({"num_basis_functions": 15}, "--num-basis-functions"), ({"ridge_penalty": 0.0}, "--ridge-penalty"),
             ({"share_all_embeddings": True, "decoder_embed_dim": 32}, "joined dictionary")]
    for overrides, needle in cases:
        with pytest.raises(ConfigError) as e:
            _model(src_d, tgt_d, **overrides)
        assert needle in str(e.value) and "\n" not in str(e.value)
    model = _model(src_d, tgt_d)
    with pytest.raises(ConfigError, match="all positions padded"):
        model.encoder(torch.full((1, 4), src_d.pad()))
    with pytest.raises(ConfigError, match="empty sequence"):
        model.encoder(torch.zeros(1, 0, dtype=torch.long))


@pytest.mark.parametrize("overrides, line", [
    ({"lead_window": 256, "max_source_positions": 64},
     "--lead-window 256 exceeds --max-source-positions 64, the longest source: its last slots would only ever be "
     "padding; pass --lead-window 64 or less, or raise --max-source-positions"),
    ({"encoder_chunk_length": 128, "lead_window": 6, "max_source_positions": 64},
     "--encoder-chunk-length 128 exceeds --max-source-positions 64, the longest source: no document would ever fill "
     "one chunk; pass --encoder-chunk-length 64 or less, or raise --max-source-positions"),
])
def test_a_lead_window_or_chunk_beyond_the_longest_source_is_refused(overrides, line):
    """They used to be accepted: a lead window whose slots beyond the longest source are always padding,
    chunks no document fills. At the limit itself both are accepted."""
    src_d, tgt_d = dictionary(15, "s"), dictionary(18, "t")
    with pytest.raises(ConfigError) as e:
        _model(src_d, tgt_d, **overrides)
    assert str(e.value) == line
    _model(src_d, tgt_d, lead_window=64, encoder_chunk_length=64, max_source_positions=64)


# ---- command-line tools ---------------------------------------------------------


def _documents(n, seed):
    """Toy summarisation: a document of 20–60 words, its 'summary' = its first 4 words."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for _ in range(n):
        length = int(torch.randint(20, 61, (1,), generator=g))
        docs.append([f"w{int(i)}" for i in torch.randint(0, 16, (length,), generator=g)])
    return [" ".join(d) for d in docs], [" ".join(d[:4]) for d in docs]


@pytest.mark.full
def test_cli_train_with_kl_and_generate_with_beam(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 160), ("valid", 10)):
        source, target = _documents(n, seed=len(split))
        (raw / f"{split}.source").write_text("\n".join(source) + "\n")
        (raw / f"{split}.target").write_text("\n".join(target) + "\n")
    data = tmp_path / "bin"
    run(["fairseq-preprocess", "--source-lang", "source", "--target-lang", "target", "--trainpref",
         str(raw / "train"), "--validpref", str(raw / "valid"), "--destdir", str(data), "--joined-dictionary",
         "--workers", "1"])
    save = tmp_path / "ckpt"
    log = fairseq("fairseq-train", data, "--task", "translation", "--source-lang", "source",
                  "--target-lang", "target", "--arch", "infinite_former_summarizer", "--encoder-embed-dim", "32",
                  "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
                  "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--encoder-chunk-length", "16",
                  "--lead-window", "8", "--num-basis-functions", "32", "--share-all-embeddings",
                  "--max-source-positions", "100000", "--criterion", "infinite_former_kl", "--kl-weight", "1e-4",
                  "--optimizer", "adam", "--lr", "0.005", "--max-update", "30", "--batch-size", "16",
                  "--required-batch-size-multiple", "1", "--dropout", "0.0", "--save-dir", save,
                  "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "1", "--seed", "1")
    text = log.stdout + log.stderr
    losses = [float(m) for m in re.findall(r"train_inner .* loss=([0-9.]+), nll_loss=[0-9.]+, kl=[0-9.]+", text)]
    assert len(losses) == 30, text[-3000:]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, losses  # training loss (with the KL term) goes down
    valid = [float(m) for m in re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", text)]
    assert len(valid) == 3 and valid[-1] < valid[0], valid
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"]["_name"] == "infinite_former_summarizer"
    proc = fairseq("fairseq-generate", data, "--path", save / "checkpoint_last.pt", "--task", "translation",
                   "--source-lang", "source", "--target-lang", "target", "--gen-subset", "valid", "--beam", "2",
                   "--batch-size", "4", "--max-len-b", "8", "--max-source-positions", "100000",
                   "--required-batch-size-multiple", "1")
    scores = [float(m) for m in re.findall(r"^H-\d+\t(\S+)\t", proc.stdout, flags=re.M)]
    assert len(scores) == 10 and all(math.isfinite(s) for s in scores), proc.stdout[-2000:]


def test_encoder_with_dropout_draws_as_one_batch():
    """Training with dropout: the encoder does not split the chunks into groups, so a seed
    draws the same dropout masks as one batch of all chunks."""
    src_d = dictionary(15, "s")
    src = _tokens(src_d, 1, 40, seed=3, bos=False)
    outs = []
    for group_tokens in (16, 10**9):
        model = _model(src_d, dictionary(12, "t"), seed=1, dropout=0.1, attention_dropout=0.1).train()
        model.encoder.GROUP_TOKENS = group_tokens
        torch.manual_seed(5)
        outs.append(model.encoder(src)["memory_coefficients"][0])
    assert torch.equal(outs[0], outs[1])
