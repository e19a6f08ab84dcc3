"""Attention is a seam: a Fastformer-attention language model with the ∞-former's
long-term memory, assembled from the existing parts (AdditiveAttention,
FeedForward, LongTermMemory, PreNormBlock, InfiniteFormerDecoder) without a new
layer class, computes what a hand-written loop over the same modules computes."""


import pytest
import torch
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import build_embedding
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerDecoder, InfiniteFormerLMConfig
from fairseq_plugins.modules.attention.additive import AdditiveAttention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.memory.continuous import LongTermMemory

WIDTH, HEADS, SEGMENT, N = 16, 2, 8, 16


def _decoder(seed=0):
    torch.manual_seed(seed)
    dictionary = Dictionary()
    for i in range(40):
        dictionary.add_symbol(f"w{i}")
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=WIDTH, decoder_attention_heads=HEADS, decoder_layers=2,
                                 decoder_ffn_embed_dim=32, segment_length=SEGMENT, mem_len=0, dropout=0.0,
                                 num_basis_functions=N, basis_widths="0.05,0.1", num_samples=N)
    basis = ContinuousBasis(N, (0.05, 0.1), 0.5)
    layers = nn.ModuleList(
        PreNormBlock(WIDTH, AdditiveAttention(WIDTH, HEADS, causal=True), FeedForward(WIDTH, 32),
                     memory=LongTermMemory(WIDTH, HEADS, num_samples=N, basis=basis), dropout=0.0)
        for _ in range(2))
    return InfiniteFormerDecoder(cfg, dictionary, build_embedding(dictionary, WIDTH), layers=layers).eval()


def _by_hand(dec, tokens, with_memory=True):
    """The same computation written out: per segment and layer, additive attention,
    plus the memory read (after entering the previous segment) with the attention's query."""
    x = (dec.embed_scale * dec.embed_tokens(tokens)).transpose(0, 1)
    bsz = tokens.size(0)
    states = [layer.long_term_memory.empty_state(bsz, "cpu") for layer in dec.layers]
    previous = [None] * len(dec.layers)
    outputs = []
    for start in range(0, x.size(0), SEGMENT):
        h = x[start:start + SEGMENT]
        for i, layer in enumerate(dec.layers):
            normed = layer.self_attn_layer_norm(h)
            attn = layer.self_attn(normed)
            y = attn.out
            if with_memory:
                ltm = layer.long_term_memory
                if previous[i] is not None:
                    states[i] = ltm.update(states[i], previous[i], torch.ones(bsz, dtype=torch.bool))
                read, mu, sigma2 = ltm(attn.query, states[i])
                y = y + read
                states[i].mu, states[i].sigma = mu.detach(), sigma2.sqrt().detach()
                previous[i] = normed.detach()
            h = h + y
            h = h + layer.ffn(layer.final_layer_norm(h))
        outputs.append(h)
    return dec.output_layer(dec.layer_norm(torch.cat(outputs)).transpose(0, 1))


def test_fastformer_attention_with_long_term_memory_equals_the_hand_written_loop():
    dec = _decoder()
    tokens = torch.randint(4, 44, (3, 5 * SEGMENT - 3))  # 5 segments, the last one partial
    with torch.no_grad():
        got, extra = dec(tokens)
        expected = _by_hand(dec, tokens)
        without = _by_hand(dec, tokens, with_memory=False)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert len(extra["ltm_stats"]) == 2 * 5  # one read per layer and segment, for the KL
    # the first segment reads an empty memory; later ones really use it
    torch.testing.assert_close(got[:, :SEGMENT], without[:, :SEGMENT], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got[:, SEGMENT:], without[:, SEGMENT:], atol=1e-3)


def test_memory_carried_across_calls_equals_one_long_call():
    dec = _decoder(seed=1)
    tokens = torch.randint(4, 44, (2, 4 * SEGMENT))
    with torch.no_grad():
        whole, _ = dec(tokens)
        parts = [dec(tokens[:, i:i + SEGMENT], memory_key="k", reset_memory=torch.full((2,), i == 0))[0]
                 for i in range(0, 4 * SEGMENT, SEGMENT)]
    torch.testing.assert_close(torch.cat(parts, 1), whole, atol=1e-5, rtol=1e-5)
    state = dec.memory_bank.peek("k")
    assert all(s.attention is None and s.memory is not None for s in state)  # additive attention: stateless


def test_additive_attention_accepts_the_common_keywords():
    """One call contract: additive attention ignores the keywords it has no use for."""
    att = AdditiveAttention(WIDTH, HEADS, causal=True).eval()
    x = torch.randn(5, 2, WIDTH)
    with torch.no_grad():
        plain = att(x)
        same = att(x, state=None, encoder_out=None, attn_mask=None, slot="layer0.")
    torch.testing.assert_close(plain.out, same.out, atol=0, rtol=0)
    assert plain.query.shape == x.shape and plain.state is None


def test_the_block_takes_only_the_memory_inputs_an_attention_declares():
    """The block asks the attention what it offers: additive attention has no short-term
    memory to evict from, so ``--ltm-input evicted`` is one line naming it, while the
    residual stream (GPT-2's setting) is offered by every attention."""
    memory = LongTermMemory(WIDTH, HEADS, num_samples=N, basis=ContinuousBasis(N, (0.05, 0.1), 0.5))
    with pytest.raises(ConfigError, match="AdditiveAttention offers segment, residual") as e:
        PreNormBlock(WIDTH, AdditiveAttention(WIDTH, HEADS, causal=True), FeedForward(WIDTH, 32), memory=memory,
                     memory_input="evicted")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="--ltm-input must be one of segment, evicted, residual"):
        PreNormBlock(WIDTH, AdditiveAttention(WIDTH, HEADS, causal=True), FeedForward(WIDTH, 32), memory=memory,
                     memory_input="everything")
    block = PreNormBlock(WIDTH, AdditiveAttention(WIDTH, HEADS, causal=True), FeedForward(WIDTH, 32),
                         memory=memory, memory_input="residual", dropout=0.0).eval()
    # with "residual" the memory holds the block's input x itself (not LN(x)): after one
    # segment, its pending chunk is x
    x = torch.randn(SEGMENT, 2, WIDTH)
    with torch.no_grad():
        out = block(x, block.empty_state(2, "cpu"))
    torch.testing.assert_close(out.state.memory.pending, x, atol=0, rtol=0)


def test_a_decoder_without_an_attention_cache_refuses_incremental_decoding():
    """Additive attention declares no segment cache: incremental decoding of this LM is one
    line saying so, not an error from inside the block."""
    dec = _decoder()
    with pytest.raises(ConfigError, match="AdditiveAttention has none") as e:
        dec(torch.randint(4, 44, (1, 3)), incremental_state={})
    assert "\n" not in str(e.value)
