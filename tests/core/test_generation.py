"""Incremental decoding of infinite_former_lm (docs/generation.md): values
against the segmented full forward, beam search against a full-forward rescoring,
beam reordering against decoding reordered inputs, a state whose size does not grow
with the prompt, and what enters the long-term memory (--ltm-input)."""

import os

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)

from beam_rescoring import (assert_bad_incremental_input_is_refused, beam_search_against_rescoring, cached_numbers,
                            full_log_probs, incremental_log_probs)
from helpers import ROOT
from memory_probe import record_entered_chunks

SEG = 8


def _dictionary():
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    return d


def _decoder(ltm=True, mem=SEG, sticky=True, ltm_input="segment", seed=0, width=32, heads=4):
    torch.manual_seed(seed)
    d = _dictionary()
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=width, decoder_ffn_embed_dim=64, decoder_layers=2,
                                 decoder_attention_heads=heads, segment_length=SEG, mem_len=mem,
                                 num_basis_functions=16, basis_widths="0.05,0.1", num_samples=16,
                                 no_long_term_memory=not ltm, no_sticky_memories=not sticky, ltm_input=ltm_input,
                                 dropout=0.0)
    return InfiniteFormerDecoder(cfg, d, torch.nn.Embedding(len(d), width, d.pad())).eval()


CASES = [  # (long-term memory, short-term memory length, sticky, ltm input)
    (True, SEG, True, "segment"), (True, SEG, False, "segment"), (True, 0, True, "segment"),
    (True, 12, True, "segment"), (True, 4, False, "evicted"), (True, SEG, True, "evicted"),
    (True, 12, True, "evicted"), (False, SEG, True, "segment"), (False, 0, True, "segment"),
]


@pytest.mark.parametrize("ltm,mem,sticky,ltm_input", CASES)
def test_incremental_equals_the_segmented_full_forward(ltm, mem, sticky, ltm_input):
    dec = _decoder(ltm, mem, sticky, ltm_input)
    tokens = torch.randint(4, 44, (3, 6 * SEG + 5))  # 6 full segments and a partial one
    full = full_log_probs(dec, tokens)
    one_by_one, _ = incremental_log_probs(dec, tokens)
    torch.testing.assert_close(one_by_one, full, rtol=0, atol=1e-5)
    # chunked prefill: whole prompt at once, then chunks that straddle segment boundaries
    prefill, _ = incremental_log_probs(dec, tokens, [tokens.size(1)])
    torch.testing.assert_close(prefill, full, rtol=0, atol=1e-5)
    ragged, _ = incremental_log_probs(dec, tokens, [3, 11, 1, 8, 20, 10])
    torch.testing.assert_close(ragged, full, rtol=0, atol=1e-5)


def test_the_long_term_memory_is_used_and_read_whole_segment_at_a_time():
    # an incremental decoder that re-read the memory updated mid-segment would differ;
    # check the reference itself depends on the memory: with it off the log-probs differ
    tokens = torch.randint(4, 44, (2, 4 * SEG))
    on, off = full_log_probs(_decoder(True), tokens), full_log_probs(_decoder(True, sticky=False), tokens)
    assert not torch.allclose(on[:, 2 * SEG:], off[:, 2 * SEG:], atol=1e-4)  # sticky statistics matter


def test_state_size_does_not_grow_with_the_prompt():
    """After a chunked prefill of 11 and of 23 segments (+3 tokens), the cached numbers
    are the same, and stay the same at every step of one more segment."""
    dec = _decoder(True, 12)
    sizes = {}
    for segments in (11, 23):
        tokens = torch.randint(4, 44, (2, segments * SEG + 3 + SEG))
        prompt = segments * SEG + 3
        with torch.no_grad():
            state = {}
            dec(tokens[:, :prompt], incremental_state=state)  # chunked prefill
            sizes[segments] = [cached_numbers(state)]
            for end in range(prompt + 1, tokens.size(1) + 1):  # then token by token
                dec(tokens[:, :end], incremental_state=state)
                sizes[segments].append(cached_numbers(state))
    assert sizes[11] == sizes[23]
    assert max(sizes[11]) < 2 * min(sizes[11])  # bounded: the segment cache is refilled


def test_beam_reorder_is_followed_by_every_cached_tensor():
    dec = _decoder(True, 12)
    tokens = torch.randint(4, 44, (3, 3 * SEG + 2))
    with torch.no_grad():
        for order in (torch.tensor([2, 0, 1]), torch.tensor([2, 2, 0, 1, 1]), torch.tensor([1])):
            state = {}
            dec(tokens, incremental_state=state)
            dec.reorder_incremental_state(state, order)
            nxt = torch.randint(4, 44, (order.numel(), 1))
            got = dec(torch.cat([tokens[order], nxt], 1), incremental_state=state)[0]
            fresh = {}
            dec(tokens[order], incremental_state=fresh)
            want = dec(torch.cat([tokens[order], nxt], 1), incremental_state=fresh)[0]
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
            (a,), (b,) = state.values(), fresh.values()
            assert a.keys() == b.keys() and len(a) > 10
            for name in a:
                torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-5, msg=name)


def _model(**options):
    dec = _decoder(**options)
    return InfiniteFormerLanguageModel(dec).eval()


@pytest.mark.parametrize("sticky", [True, False])
def test_beam_search_scores_equal_a_full_forward_rescoring(sticky):
    hypos, reorders = beam_search_against_rescoring(_model(sticky=sticky, mem=12),
                                                    torch.randint(4, 44, (2, 2 * SEG + 3)), 2 * SEG)
    assert sum(len(sentence) for sentence in hypos) == 6
    assert any(o.numel() < 6 for o in reorders)  # a finished sentence left the batch


def test_bad_incremental_input_is_one_line():
    assert_bad_incremental_input_is_refused(_decoder(), torch.randint(4, 44, (2, 5)))


# ---- what enters the long-term memory (--ltm-input) ---------------------------


@pytest.mark.parametrize("mem,ltm_input,lengths", [
    (SEG, "segment", [8, 8, 8, 8]), (12, "segment", [8, 8, 8, 8]), (0, "segment", [8, 8, 8, 8]),
    (SEG, "evicted", [8, 8, 8]), (12, "evicted", [4, 8, 8]), (4, "evicted", [4, 8, 8, 8]),
    (0, "evicted", [8, 8, 8, 8]), (20, "evicted", [4, 8]),
])
def test_what_enters_the_long_term_memory(monkeypatch, mem, ltm_input, lengths):
    """Layer 0's attention inputs are LN(embedding): after 5 segments, the chunks entered
    into its memory are, in order, the stream's first positions — all of segments 0..3
    ('segment'), or everything that left the short-term memory of S positions by
    segment 3, i.e. the first 4·L − S positions ('evicted')."""
    dec = _decoder(True, mem, ltm_input=ltm_input)
    layer0 = dec.layers[0].long_term_memory
    entered = record_entered_chunks(monkeypatch, layer0)
    tokens = torch.randint(4, 44, (2, 5 * SEG))
    with torch.no_grad():
        dec(tokens)
        inputs = dec.layers[0].self_attn_layer_norm(dec.embed(tokens)[0])  # (T, bsz, C)
    assert [c.size(0) for c in entered] == lengths
    torch.testing.assert_close(torch.cat(entered), inputs[:sum(lengths)], rtol=0, atol=1e-6)


def test_ltm_input_option_parses_through_fairseq_train_and_rejects_bad_values(tmp_path):
    from fairseq import options
    d = _dictionary()
    d.save(str(tmp_path / "dict.txt"))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(tmp_path), "--user-dir", os.path.join(ROOT, "fairseq_plugins"), "--task", "streaming_lm",
        "--arch", "infinite_former_lm", "--ltm-input", "evicted", "--tokens-per-sample", "8"])
    assert args.ltm_input == "evicted"
    with pytest.raises(ConfigError, match="--ltm-input"):
        _decoder(ltm_input="leaving")


class _LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("ltm,mem,sticky,ltm_input", [CASES[0], CASES[4]])
def test_prefill_equals_extract_incremental_with_one_segment_of_activations(ltm, mem, sticky, ltm_input):
    """decoder.prefill (continue.sh's and the benchmark's read of a long prompt) leaves the
    state extract_incremental leaves and the last position's features, and no operation in it
    returns a tensor that grows with the prompt (extract_incremental's embedding and output of
    every prompt position do: T × bsz × C)."""
    dec = _decoder(ltm, mem, sticky, ltm_input)
    largest = {}
    for segments in (5, 20):
        tokens = torch.randint(4, 44, (2, segments * SEG + 3))
        with torch.no_grad():
            whole, by_prefill = {}, {}
            features, _ = dec.extract_features(tokens, incremental_state=whole)
            with _LargestTensor() as mode:
                last = dec.prefill(tokens, by_prefill)
            largest[segments] = mode.largest
        torch.testing.assert_close(last, features[:, -1:], rtol=0, atol=1e-6)
        a, b = (dec.decoding_state(s) for s in (whole, by_prefill))
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
        nxt = torch.randint(4, 44, (2, 1))  # and decoding goes on from it alike
        steps = [dec(torch.cat([tokens, nxt], 1), incremental_state=s)[0] for s in (whole, by_prefill)]
        torch.testing.assert_close(steps[0], steps[1], rtol=0, atol=1e-6)
    assert largest[20] == largest[5], largest
    assert largest[20] < 20 * SEG * 2 * 32  # (the prompt's T × bsz × C)
