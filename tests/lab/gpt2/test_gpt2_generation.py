"""Incremental decoding of infinite_former_gpt2 (docs/generation.md, "GPT-2"):
values against the block-by-block full forward of the same decoder, beam reordering
against decoding reordered inputs, beam search against a full-forward rescoring, and a
state whose size does not grow with the prompt.

The decoders are small random GPT-2s built directly (no ``transformers``); their
W_O^LTM is drawn at random instead of zero, so that the long-term memory changes the
output and a wrong memory state shows (checked: the reference itself depends on the
memory and on the sticky statistics). The end-to-end check on a converted Hugging Face
GPT-2 (fairseq-interactive against a full-forward greedy loop) is in tests/lab/gpt2/test_gpt2.py.
"""

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary

from beam_rescoring import assert_bad_incremental_input_is_refused, beam_search_against_rescoring
from memory_probe import record_entered_chunks
from fairseq_plugins.models.backbone import build_embedding
from fairseq_plugins.models.infinite_former_gpt2 import GPT2Decoder, InfiniteFormerGPT2Config, InfiniteFormerGPT2Model

BLOCK = 8
VOCAB = 40  # GPT-2 ids 0..39; fairseq indices 4..43 (</s> is id 39's <|endoftext|> role: see _dictionary)


def _dictionary():
    d = Dictionary()
    for i in range(VOCAB):
        d.add_symbol(str(i))
    return d


def _decoder(ltm=True, sticky=True, seed=0, width=32, heads=4):
    torch.manual_seed(seed)
    d = _dictionary()
    cfg = InfiniteFormerGPT2Config(decoder_embed_dim=width, decoder_ffn_embed_dim=64, decoder_layers=2,
                                   decoder_attention_heads=heads, max_positions=2 * BLOCK, segment_length=BLOCK,
                                   num_basis_functions=16, basis_widths="0.05,0.1", num_samples=16,
                                   no_long_term_memory=not ltm, no_sticky_memories=not sticky, dropout=0.0,
                                   attention_dropout=0.0)
    dec = GPT2Decoder(cfg, d, build_embedding(d, width)).eval()
    if ltm:  # a memory that matters (the converted model's W_O^LTM is zero)
        with torch.no_grad():
            for layer in dec.layers:
                torch.nn.init.normal_(layer.long_term_memory.out_proj.weight, std=0.3)
    return dec


def _tokens(bsz, length, seed=0):
    return torch.randint(4, 4 + VOCAB, (bsz, length), generator=torch.Generator().manual_seed(seed))


def _log_probs(dec, logits):
    """Log-probabilities over the GPT-2 tokens (the other symbols' are −∞ on both sides)."""
    return F.log_softmax(logits.float(), dim=-1)[..., ~dec.non_gpt2]


def _full_log_probs(dec, tokens):
    with torch.no_grad():
        return _log_probs(dec, dec(tokens)[0])


def _incremental_log_probs(dec, tokens, chunks=None):
    """Feed ``tokens`` as a growing prefix: one token per call, or ``chunks`` tokens per call."""
    state, outs, seen = {}, [], 0
    with torch.no_grad():
        for n in chunks or [1] * tokens.size(1):
            seen += n
            outs.append(_log_probs(dec, dec(tokens[:, :seen], incremental_state=state)[0]))
    assert seen == tokens.size(1)
    return torch.cat(outs, dim=1), state


@pytest.mark.parametrize("ltm,sticky", [(True, True), (True, False), (False, True)])
def test_incremental_equals_the_block_by_block_full_forward(ltm, sticky):
    dec = _decoder(ltm, sticky)
    tokens = _tokens(3, 5 * BLOCK + 3)  # 5 full blocks and a partial one
    full = _full_log_probs(dec, tokens)
    one_by_one, state = _incremental_log_probs(dec, tokens)
    torch.testing.assert_close(one_by_one, full, rtol=0, atol=1e-5)
    flat = dec.decoding_state(state)
    assert int(flat["seen"][0]) == tokens.size(1)
    assert int(flat["filled"][0]) == 3  # the partial block's positions, not pushed
    assert flat["0.attention.keys"].shape == (3, 4, BLOCK, 8)  # (bsz, H, L, d) buffers
    assert ("0.memory.memory.coefficients" in flat) == ltm and ("0.memory_inputs" in flat) == ltm
    # chunked prefill: the whole prompt at once, then chunks that straddle block boundaries
    prefill, _ = _incremental_log_probs(dec, tokens, [tokens.size(1)])
    torch.testing.assert_close(prefill, full, rtol=0, atol=1e-5)
    ragged, _ = _incremental_log_probs(dec, tokens, [3, 11, 1, 8, 10, 10])
    torch.testing.assert_close(ragged, full, rtol=0, atol=1e-5)


def test_the_reference_depends_on_the_memory_and_its_sticky_statistics():
    """What makes the test above able to fail on a wrong memory: the full forward's
    log-probs from block 2 on change when the memory is off, or sampled uniformly."""
    tokens = _tokens(2, 4 * BLOCK, seed=1)
    on = _full_log_probs(_decoder(True), tokens)
    off = _decoder(True)
    with torch.no_grad():
        for layer in off.layers:
            layer.long_term_memory.out_proj.weight.zero_()  # the same weights, the memory read silenced
    off = _full_log_probs(off, tokens)
    uniform = _full_log_probs(_decoder(True, sticky=False), tokens)
    torch.testing.assert_close(on[:, :BLOCK], off[:, :BLOCK], rtol=0, atol=1e-6)  # block 1: the memory is empty
    assert (on[:, BLOCK:] - off[:, BLOCK:]).abs().max() > 0.1
    assert (on[:, 2 * BLOCK:] - uniform[:, 2 * BLOCK:]).abs().max() > 1e-3


def test_the_memory_receives_the_residual_input_of_each_full_block(monkeypatch):
    """Layer 1's residual input, block by block (layer 0 run with its state carried, as in
    the full forward): the chunks entering layer 1's memory during incremental decoding
    are those of the full blocks, each entered when the block is full; the partial block
    enters nothing."""
    dec = _decoder(True)
    layer1 = dec.layers[1].long_term_memory
    entered = record_entered_chunks(monkeypatch, layer1)
    tokens = _tokens(2, 4 * BLOCK + 5, seed=2)
    with torch.no_grad():
        _incremental_log_probs(dec, tokens)
        x, state, residual = dec.embed(tokens)[0], dec.layers[0].empty_state(2, tokens.device), []
        for start in range(0, 4 * BLOCK, BLOCK):
            out = dec.layers[0](x[start:start + BLOCK], state)  # layer 0's output = layer 1's residual input
            residual.append(out.x)
            state = out.state
    assert [c.size(0) for c in entered] == [BLOCK] * 4  # blocks 1-4; the partial block 5 is not entered
    torch.testing.assert_close(torch.cat(entered), torch.cat(residual), rtol=0, atol=1e-5)


def _numel(state):
    return sum(t.numel() for part in state.values() for t in part.values() if t is not None)


def test_state_size_does_not_grow_with_the_prompt():
    dec = _decoder(True)
    sizes = {}
    for blocks in (6, 13):
        tokens = _tokens(2, blocks * BLOCK + 3 + BLOCK, seed=blocks)
        prompt = blocks * BLOCK + 3
        with torch.no_grad():
            state = {}
            dec(tokens[:, :prompt], incremental_state=state)
            sizes[blocks] = [_numel(state)]
            for end in range(prompt + 1, tokens.size(1) + 1):
                dec(tokens[:, :end], incremental_state=state)
                sizes[blocks].append(_numel(state))
    assert sizes[6] == sizes[13]
    assert max(sizes[6]) < 2 * min(sizes[6])


class _NewElements(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the elements of the tensors operations allocate (outputs that share no
    storage with an input: views and in-place writes are not counted)."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.total += t.numel()
        return out


@pytest.mark.parametrize("ltm", [True, False])
def test_a_decoding_step_copies_no_cached_position(ltm):
    """One greedy step late in a block allocates about what one early in it does: the keys,
    values and memory inputs of the block's positions so far are written into buffers, not
    copied at every step. What a step may add per cached position is its attention weights
    (a few scalars per layer and head); copying the cached keys and values would add
    2 × d per layer and head, plus the memory's C-wide inputs."""
    block, layers, bsz, heads, head_dim = 64, 2, 2, 4, 16
    torch.manual_seed(0)
    d = _dictionary()
    cfg = InfiniteFormerGPT2Config(decoder_embed_dim=heads * head_dim, decoder_ffn_embed_dim=64, decoder_layers=layers,
                                   decoder_attention_heads=heads, max_positions=block, segment_length=block,
                                   num_basis_functions=16, num_samples=16, no_long_term_memory=not ltm)
    dec = GPT2Decoder(cfg, d, build_embedding(d, heads * head_dim)).eval()
    allocated = {}
    for filled in (2, block - 2):
        tokens = _tokens(bsz, block + filled + 1, seed=filled)  # one full block into the memory, then `filled`
        with torch.no_grad():
            state = {}
            dec.prefill(tokens[:, :-1], state)
            with _NewElements() as mode:
                dec(tokens, incremental_state=state)
        allocated[filled] = mode.total
    growth = allocated[block - 2] - allocated[2]
    assert growth <= 4 * layers * bsz * heads * (block - 4), allocated


def test_beam_reorder_is_followed_by_every_cached_tensor():
    dec = _decoder(True)
    tokens = _tokens(3, 3 * BLOCK + 2, seed=3)
    with torch.no_grad():
        for order in (torch.tensor([2, 0, 1]), torch.tensor([2, 2, 0, 1, 1]), torch.tensor([1])):
            state = {}
            dec(tokens, incremental_state=state)
            dec.reorder_incremental_state(state, order)
            nxt = _tokens(order.numel(), 1, seed=4)
            got = dec(torch.cat([tokens[order], nxt], 1), incremental_state=state)[0]
            fresh = {}
            dec(tokens[order], incremental_state=fresh)
            want = dec(torch.cat([tokens[order], nxt], 1), incremental_state=fresh)[0]
            torch.testing.assert_close(_log_probs(dec, got), _log_probs(dec, want), rtol=0, atol=1e-5)
            (a,), (b,) = state.values(), fresh.values()
            assert a.keys() == b.keys() and len(a) > 10  # keys, values, residual, B, scores, V, μ, σ² per layer
            for name in a:
                torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize("sticky", [True, False])
def test_beam_search_scores_equal_a_full_forward_rescoring(sticky):
    model = InfiniteFormerGPT2Model(_decoder(True, sticky)).eval()
    hypos, _ = beam_search_against_rescoring(model, _tokens(2, 2 * BLOCK + 3, seed=5), 2 * BLOCK)
    assert sum(len(sentence) for sentence in hypos) == 6
    assert all(h["tokens"].numel() > 2 * BLOCK for sentence in hypos for h in sentence)  # the memory was read


def test_bad_incremental_input_is_one_line():
    assert_bad_incremental_input_is_refused(_decoder(), _tokens(2, 5))
