"""Test helper: incremental decoding against the full forward (log-probs fed as a growing
prefix, the cached numbers), fairseq's beam search over a model with incremental decoding
against a full-forward rescoring of every hypothesis, and the incremental input a decoder
refuses (tests/core/test_generation.py, tests/lab/gpt2/test_gpt2_generation.py,
tests/core/test_compressive_memory.py)."""

import pytest
import torch
import torch.nn.functional as F
from fairseq.sequence_generator import SequenceGenerator

from fairseq_plugins.errors import ConfigError


def full_log_probs(dec, tokens):
    """The decoder's log-probs of ``tokens`` ``(bsz, T)`` in one full forward."""
    with torch.no_grad():
        return F.log_softmax(dec(tokens)[0].float(), dim=-1)


def incremental_log_probs(dec, tokens, chunks=None):
    """Feed ``tokens`` as a growing prefix: one token per call, or ``chunks`` tokens per call.
    Returns ``(log-probs (bsz, T, V), the incremental state)``."""
    state, outs, seen = {}, [], 0
    steps = chunks or [1] * tokens.size(1)
    with torch.no_grad():
        for n in steps:
            seen += n
            outs.append(F.log_softmax(dec(tokens[:, :seen], incremental_state=state)[0].float(), dim=-1))
    assert seen == tokens.size(1)
    return torch.cat(outs, dim=1), state


def cached_numbers(state):
    """How many numbers an incremental state holds."""
    return sum(t.numel() for part in state.values() for t in part.values() if t is not None)


def beam_search_against_rescoring(model, prompt, extra_tokens, log_probs=F.log_softmax):
    """Beam search (beam 3) after ``prompt`` ``(bsz, P)`` for up to ``extra_tokens`` more tokens,
    with eos made likely so that hypotheses finish at different steps; every hypothesis's
    positional scores must equal the full forward's log-probs of its tokens (1e-4) and start
    with its prompt. Returns ``(hypotheses, reorders)``: the generator's output and the
    ``new_order`` of every ``reorder_incremental_state`` call."""
    d = model.decoder.dictionary
    with torch.no_grad():
        model.decoder.output_projection.weight[d.eos()] *= 4
    generator = SequenceGenerator([model], d, beam_size=3, max_len_b=prompt.size(1) + extra_tokens, min_len=1)
    reorders = []
    original = model.decoder.reorder_incremental_state

    def record(state, order):
        reorders.append(order.clone())
        return original(state, order)

    model.decoder.reorder_incremental_state = record
    sample = {"net_input": {"src_tokens": prompt, "src_lengths": torch.full((prompt.size(0),), prompt.size(1))}}
    with torch.no_grad():
        hypos = generator.generate([model], sample, prefix_tokens=prompt)
    assert any(not torch.equal(o, torch.arange(o.numel())) for o in reorders)  # hypotheses were permuted
    for i, sentence in enumerate(hypos):
        for hypo in sentence:
            out = hypo["tokens"]
            prev = torch.cat([torch.tensor([d.eos()]), out[:-1]])[None]
            with torch.no_grad():
                lp = log_probs(model.decoder(prev)[0].float(), dim=-1)[0]
            torch.testing.assert_close(hypo["positional_scores"], lp.gather(1, out[:, None])[:, 0], rtol=0, atol=1e-4)
            assert torch.equal(out[:prompt.size(1)], prompt[i])
    return hypos, reorders


def assert_bad_incremental_input_is_refused(dec, tokens):
    """``dec`` (a decoder with incremental decoding) raises one ``ConfigError`` each for an
    ``incremental_state`` that already holds ``tokens`` ``(B, T)`` fed again as a first step,
    and for a first step whose rows have different lengths (two pads at the end of row 0)."""
    state = {}
    with torch.no_grad():
        dec(tokens, incremental_state=state)
        with pytest.raises(ConfigError, match="fresh incremental_state"):
            dec(tokens, incremental_state=state)
        padded = tokens.clone()
        padded[0, -2:] = dec.padding_idx
        with pytest.raises(ConfigError, match="different lengths"):
            dec(padded, incremental_state={})
