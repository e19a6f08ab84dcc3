"""The Compressive Transformer's memory (Rae et al., ICLR 2020, §3; modules/memory/compressive.py)
behind the memory seam: against a naive loop over segments written here (its own FIFO,
compression by hand, attention over [compressed memory; memory; segment] with rotary positions
by hand) — memories, logits, gradients and the attention-reconstruction loss; mean pooling
exact and the convolution as torch's conv1d; incremental decoding and beam search against the
full forward; a state of constant size; what it holds; bad input in one line."""

import math
import types

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary

from fairseq_plugins.criterions.infinite_former_kl import InfiniteFormerKLCriterion
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)
from fairseq_plugins.modules.attention.additive import AdditiveAttention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.memory.compressive import CompressiveMemory
from fairseq_plugins.modules.memory.contract import set_holdings_report

from beam_rescoring import beam_search_against_rescoring, cached_numbers, full_log_probs, incremental_log_probs
from helpers import resume_through_flat_state

WIDTH, HEADS, SEG, SLOTS = 16, 2, 8, 3


def _decoder(mem=SEG, rate=4, compression="conv", slots=SLOTS, seed=0, ltm_input="evicted", memory_type="compressive",
             **options):
    torch.manual_seed(seed)
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=WIDTH, decoder_ffn_embed_dim=32, decoder_layers=2,
                                 decoder_attention_heads=HEADS, segment_length=SEG, mem_len=mem, dropout=0.0,
                                 memory_type=memory_type, compressed_memory_slots=slots, compression_rate=rate,
                                 compression=compression, ltm_input=ltm_input, **options)
    return InfiniteFormerDecoder(cfg, d, torch.nn.Embedding(len(d), WIDTH, d.pad())).eval()


# ---- the naive reference ------------------------------------------------------------------

def _rope(x, positions):
    """Rotary positions by their formula: ``x`` ``(..., n, d)``, channel pairs (i, i + d/2) rotated
    by positions · 10000^(−2i/d)."""
    half = x.size(-1) // 2
    angle = positions[:, None].double() * 10000.0 ** (-torch.arange(half).double() * 2 / x.size(-1))
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _compress_by_hand(memory, old):
    """f_c of ``old`` ``(bsz, n, C)``, one slot at a time: the mean of each group of c, or the
    convolution's bias + Σ_k W[:, :, k] x_k over the group (missing states count as zero)."""
    slots = []
    for start in range(0, old.size(1), memory.rate):
        group = old[:, start:start + memory.rate]
        if memory.conv is None:
            slots.append(group.mean(dim=1))
        else:
            slots.append(memory.conv.bias + sum(group[:, k] @ memory.conv.weight[:, :, k].t()
                                                 for k in range(group.size(1))))
    return torch.stack(slots, dim=1)


def _content_attention(attention, q, states):
    """softmax(q kᵀ/√d) v per head with fixed W_K, W_V: ``q`` ``(bsz, T, C)``, ``states`` ``(bsz, n, C)``."""
    bsz, heads, d = q.size(0), HEADS, WIDTH // HEADS
    k = states @ attention.k_proj.weight.detach().t() + attention.k_proj.bias.detach()
    v = states @ attention.v_proj.weight.detach().t() + attention.v_proj.bias.detach()
    split = lambda t: t.view(bsz, -1, heads, d).transpose(1, 2)  # noqa: E731
    weights = torch.softmax(split(q) @ split(k).transpose(-1, -2) / math.sqrt(d), dim=-1)
    return (weights @ split(v)).transpose(1, 2).reshape(bsz, -1, WIDTH)


def _naive(dec, tokens):
    """The compressive decoder written as a loop over segments: ``(logits, per-layer compressed
    memories (bsz, P, C), reconstruction losses in order)``."""
    layers, mem = dec.layers, dec.cfg.mem_len
    d = WIDTH // HEADS
    x = dec.embed_scale * dec.embed_tokens(tokens)  # (bsz, T, C)
    bsz = x.size(0)
    stm = [x.new_zeros(bsz, 0, WIDTH) for _ in layers]
    cm = [x.new_zeros(bsz, 0, WIDTH) for _ in layers]
    outputs, losses = [], []
    for start in range(0, x.size(1), SEG):
        h = x[:, start:start + SEG]
        length = h.size(1)
        for i, layer in enumerate(layers):
            a, memory = layer.self_attn, layer.long_term_memory
            normed = layer.self_attn_layer_norm(h)
            keys_in = torch.cat([cm[i], stm[i], normed], dim=1)
            before = keys_in.size(1) - length  # P + S'
            split = lambda t: t.view(bsz, -1, HEADS, d).transpose(1, 2)  # noqa: E731
            q = _rope(split(a.q_proj(normed)), torch.arange(before, before + length))
            k = _rope(split(a.k_proj(keys_in)), torch.arange(keys_in.size(1)))
            scores = q @ k.transpose(-1, -2) / math.sqrt(d)
            causal = torch.arange(keys_in.size(1))[None, :] <= before + torch.arange(length)[:, None]
            weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
            read = (weights @ split(a.v_proj(keys_in))).transpose(1, 2).reshape(bsz, length, WIDTH)
            h = h + a.out_proj(read)
            h = h + layer.ffn(layer.final_layer_norm(h))
            window = torch.cat([stm[i], normed.detach()], dim=1)
            leaving = max(window.size(1) - mem, 0)
            old, stm[i] = window[:, :leaving], window[:, leaving:]
            if leaving:
                new = _compress_by_hand(memory, old)
                if memory.conv is not None:
                    query = a.q_proj(normed).detach()
                    losses.append((_content_attention(a, query, old) - _content_attention(a, query, new)).pow(2).mean())
                cm[i] = torch.cat([cm[i], new.detach()], dim=1)[:, -memory.slots:]
        outputs.append(h)
    return dec.output_layer(dec.layer_norm(torch.cat(outputs, dim=1))), cm, losses


# ---- values against the naive loop ----------------------------------------------------------

CASES = [(SEG, 4, "conv"), (SEG, 2, "mean"), (12, 4, "conv"), (0, 4, "conv"), (12, 8, "mean")]


@pytest.mark.parametrize("mem,rate,compression", CASES)
def test_a_naive_loop_gives_the_same_memories_logits_losses_and_gradients(mem, rate, compression):
    dec = _decoder(mem, rate, compression)
    tokens = torch.randint(4, 44, (2, 6 * SEG + 3))  # six segments and a partial one
    got, extra = dec(tokens, memory_key="k")
    want, memories, losses = _naive(dec, tokens)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for layer, state, expected in zip(dec.layers, dec.memory_bank.peek("k"), memories):
        assert state.memory.slots.size(0) == expected.size(1) == SLOTS
        torch.testing.assert_close(state.memory.slots.transpose(0, 1), expected, rtol=0, atol=1e-5)
        assert bool(state.memory.valid.all())
    assert len(extra["memory_losses"]) == len(losses) and (compression == "mean") == (not losses)
    for a, b in zip(extra["memory_losses"], losses):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    params = [p for name, p in dec.named_parameters() if ".conv." not in name]
    mine = torch.autograd.grad((got * torch.linspace(-1, 1, got.size(-1))).sum(), params, allow_unused=True)
    theirs = torch.autograd.grad((want * torch.linspace(-1, 1, want.size(-1))).sum(), params, allow_unused=True)
    for name, a, b in zip([n for n, _ in dec.named_parameters() if ".conv." not in n], mine, theirs):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    if losses:  # the reconstruction loss trains the compression only, as the naive formula's
        conv = [p for name, p in dec.named_parameters() if ".conv." in name]
        mine = torch.autograd.grad(sum(extra["memory_losses"]), conv)
        theirs = torch.autograd.grad(sum(losses), conv)
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        _, extra = dec(tokens)
        others = [p for name, p in dec.named_parameters() if ".conv." not in name]
        assert all(g is None for g in torch.autograd.grad(sum(extra["memory_losses"]), others, allow_unused=True))


def test_the_main_loss_does_not_train_the_compression():
    dec = _decoder()
    logits, _ = dec(torch.randint(4, 44, (2, 5 * SEG)))
    conv = [p for name, p in dec.named_parameters() if ".conv." in name]
    assert all(g is None for g in torch.autograd.grad(logits.sum(), conv, allow_unused=True))


def test_the_criterion_adds_the_reconstruction_loss_per_token():
    model = InfiniteFormerLanguageModel(_decoder())
    task = types.SimpleNamespace(target_dictionary=model.decoder.dictionary)
    tokens = torch.randint(4, 44, (2, 5 * SEG + 1))
    sample = {"net_input": {"src_tokens": tokens[:, :-1]}, "target": tokens[:, 1:].contiguous(),
              "ntokens": 5 * SEG * 2}
    without, size, log = InfiniteFormerKLCriterion(task, False, memory_loss_weight=0.0)(model, sample)
    assert without.item() == pytest.approx(log["nll_loss"].item(), rel=1e-6) and size == 5 * SEG * 2
    loss, _, log = InfiniteFormerKLCriterion(task, False, memory_loss_weight=2.0)(model, sample)
    _, extra = model(tokens[:, :-1])
    reconstruction = sum(extra["memory_losses"]).item()
    assert len(extra["memory_losses"]) == 2 * 4 and reconstruction > 0  # segments 2-5 evict, in both layers
    assert log["memory_loss"].item() == pytest.approx(size * reconstruction, rel=1e-5)
    assert (loss - without).item() == pytest.approx(2.0 * size * reconstruction, rel=1e-4)
    with pytest.raises(ConfigError, match="--memory-loss-weight must be >= 0"):
        InfiniteFormerKLCriterion(task, False, memory_loss_weight=-1.0)


def test_mean_pooling_is_exact_and_the_convolution_is_conv1d():
    torch.manual_seed(0)
    chunk = torch.randint(-8, 8, (10, 3, WIDTH)).float()  # 10 = 2 groups of 4 and a group of 2
    pooled = CompressiveMemory(WIDTH, SLOTS, 4, "mean").compress(chunk)
    expected = torch.stack([chunk[0:4].mean(0), chunk[4:8].mean(0), chunk[8:10].mean(0)])
    assert torch.equal(pooled, expected)
    memory = CompressiveMemory(WIDTH, SLOTS, 4, "conv")
    x = torch.randn(8, 3, WIDTH)
    torch.testing.assert_close(memory.compress(x), F.conv1d(x.permute(1, 2, 0), memory.conv.weight,
                                                            memory.conv.bias, stride=4).permute(2, 0, 1))


# ---- incremental decoding, beam search, state size ------------------------------------------

@pytest.mark.parametrize("mem,rate,compression", CASES)
def test_incremental_equals_the_full_forward_across_segments_and_compressions(mem, rate, compression):
    dec = _decoder(mem, rate, compression)
    tokens = torch.randint(4, 44, (3, 7 * SEG + 5))  # the compressed memory fills, then slides
    full = full_log_probs(dec, tokens)
    for chunks in (None, [tokens.size(1)], [3, 11, 1, 8, 20, 18]):
        got, _ = incremental_log_probs(dec, tokens, chunks)
        torch.testing.assert_close(got, full, rtol=0, atol=1e-5)


def test_the_compressed_memory_changes_what_the_model_predicts():
    tokens = torch.randint(4, 44, (2, 6 * SEG))
    dec, twin = _decoder(), _decoder(no_long_term_memory=True, memory_type="continuous")
    assert twin.load_state_dict(dec.state_dict(), strict=False).unexpected_keys  # the compressions' weights
    on, off = full_log_probs(dec, tokens), full_log_probs(twin, tokens)
    torch.testing.assert_close(on[:, :2 * SEG], off[:, :2 * SEG], rtol=0, atol=1e-5)  # nothing compressed yet
    assert not torch.allclose(on[:, 2 * SEG:], off[:, 2 * SEG:], atol=1e-3)


def test_beam_search_scores_equal_a_full_forward_rescoring():
    model = InfiniteFormerLanguageModel(_decoder(mem=12)).eval()
    hypos, _ = beam_search_against_rescoring(model, torch.randint(4, 44, (2, 3 * SEG + 3)), 2 * SEG)
    assert sum(len(sentence) for sentence in hypos) == 6


def test_state_size_is_constant_in_the_stream_length():
    dec = _decoder(mem=12)
    sizes = []
    with torch.no_grad():
        for i in range(12):
            dec(torch.randint(4, 44, (2, SEG)), memory_key="k", reset_memory=torch.full((2,), i == 0))
            sizes.append(sum(t.numel() for s in dec.memory_bank.peek("k") for t in s.to_dict().values()))
        cached = {}
        for segments in (6, 15):
            tokens = torch.randint(4, 44, (2, segments * SEG + 3))
            _, state = incremental_log_probs(dec, tokens, [tokens.size(1)])
            cached[segments] = cached_numbers(state)
    assert len(set(sizes[4:])) == 1 and cached[6] == cached[15]


def test_the_state_crosses_calls_through_the_flat_form():
    dec, fresh = _decoder(mem=12), _decoder(mem=12)
    tokens = torch.randint(4, 44, (2, 7 * SEG))
    flat, resumed, whole = resume_through_flat_state(dec, fresh, tokens, 4 * SEG)
    assert "0.memory.slots" in flat and "0.memory.valid" in flat
    torch.testing.assert_close(resumed, whole, rtol=0, atol=1e-5)


def test_a_reset_stream_reads_as_a_fresh_one():
    dec = _decoder()
    first, second = torch.randint(4, 44, (2, 4 * SEG)), torch.randint(4, 44, (2, 3 * SEG))
    with torch.no_grad():
        dec(first, memory_key="k")
        got, _ = dec(second, memory_key="k", reset_memory=torch.tensor([True, False]))
        fresh, _ = dec(second[:1])
    torch.testing.assert_close(got[:1], fresh, rtol=0, atol=1e-5)


# ---- what it holds -----------------------------------------------------------------------------

def test_each_slot_reports_the_stream_positions_it_pools():
    dec = _decoder(mem=SEG, rate=4)
    set_holdings_report(dec)
    with torch.no_grad():
        _, extra = dec(torch.randint(4, 44, (2, 6 * SEG)))
    for s in range(6):
        entered = SEG * max(s - 1, 0)  # segment k ≥ 1 pushes segment k − 1 out of the short-term memory
        first = max(entered - SLOTS * 4, 0)
        tokens, places = extra["memory_holdings"][s * 2].slot(1)
        assert tokens.tolist() == list(range(first, entered))
        assert places.tolist() == [float((t - first) // 4) for t in range(first, entered)]


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("options,needle", [
    (dict(rate=3), "--compression-rate 3 does not divide the segment length 8 .the model's segment.; choose a rate "
                   "that divides it: 2, 4, 8"),
    (dict(slots=0), "--compressed-memory-slots .n_cm. must be positive, got 0"),
    (dict(ltm_input="segment"), "--ltm-input segment needs a memory that takes it .CompressiveMemory takes "
                                "evicted.; use --ltm-input evicted"),
])
def test_bad_options_are_one_line(options, needle):
    with pytest.raises(ConfigError, match=needle) as error:
        _decoder(**options)
    assert "\n" not in str(error.value)


def test_a_compressive_memory_that_no_long_term_memory_removes_is_refused():
    """--memory-type compressive with --no-long-term-memory used to build no memory without a word."""
    with pytest.raises(ConfigError) as error:
        _decoder(no_long_term_memory=True)
    assert str(error.value) == ("--memory-type compressive builds a long-term memory, which --no-long-term-memory "
                                "removes; drop one of the two (the memory-off twin is --no-long-term-memory alone)")


def test_options_of_another_memory_are_one_warning_line(caplog):
    """--tau, --no-sticky-memories (the continuous memory's) set for the compressive memory used to be
    ignored without a word: one warning line naming them; the compressive memory's own options, and
    the continuous memory's at their defaults, give none."""
    import logging

    with caplog.at_level(logging.WARNING, logger="fairseq_plugins"):
        _decoder(tau=0.3, no_sticky_memories=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["--tau 0.3, --no-sticky-memories are options of --memory-type continuous, not of "
                        "--memory-type compressive, the memory built: they have no effect; drop them"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairseq_plugins"):
        _decoder(rate=2, compression="mean")
        _decoder(no_long_term_memory=True, memory_type="continuous", tau=0.3)  # the twin keeps the arm's options
    assert [r for r in caplog.records if r.levelno == logging.WARNING] == []


def test_an_attention_that_cannot_host_keys_and_values_is_refused():
    with pytest.raises(ConfigError, match="which AdditiveAttention cannot host; pair it with") as error:
        PreNormBlock(WIDTH, AdditiveAttention(WIDTH, HEADS, causal=True), FeedForward(WIDTH, 32),
                     memory=CompressiveMemory(WIDTH, SLOTS, 4), memory_input="evicted")
    assert "\n" not in str(error.value)


def test_the_wiped_control_reads_no_compressed_memory():
    """--memory-wiped (and set_memory_wiped on a built model): the attention reads [short-term
    memory; segment] only, as the same weights without a compressed memory (--no-long-term-memory)
    do, in the full forward and in incremental decoding; unwiped, the compressed memory matters."""
    from fairseq_plugins.modules.memory.contract import set_memory_wiped

    tokens = torch.randint(4, 40, (2, 6 * SEG), generator=torch.Generator().manual_seed(3))
    model = _decoder()
    twin = _decoder(no_long_term_memory=True, memory_type="continuous")
    twin.load_state_dict({k: v for k, v in model.state_dict().items() if ".long_term_memory." not in k})
    built_wiped = _decoder(memory_wiped=True)
    want = full_log_probs(twin, tokens)
    assert (full_log_probs(model, tokens)[:, 3 * SEG:] - want[:, 3 * SEG:]).abs().max() > 1e-3
    assert set_memory_wiped(model) == 2
    for wiped in (model, built_wiped):
        torch.testing.assert_close(full_log_probs(wiped, tokens), want, rtol=0, atol=1e-5)
    torch.testing.assert_close(incremental_log_probs(model, tokens)[0], want, rtol=0, atol=1e-5)
