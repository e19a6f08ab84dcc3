"""The memory is a seam (docs/design/architecture.md, "Memory"): a memory written in one place
against the contract of ``modules/memory/contract.py`` (here a running mean of what entered)
runs in the ∞-former's decoder without a change to the block or the decoder, computes what a
hand-written loop computes, and its state, of the type it declares, crosses calls through the
memory bank's flat form; the block refuses what it cannot host in one line."""

from dataclasses import dataclass, field
from typing import Optional

import pytest
import torch
from fairseq.data import Dictionary
from torch import Tensor, nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.backbone import build_embedding
from fairseq_plugins.models.infinite_former_lm import InfiniteFormerDecoder, InfiniteFormerLMConfig
from fairseq_plugins.modules.attention.additive import AdditiveAttention
from fairseq_plugins.modules.attention.rotary import ShortTermMemoryAttention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.memory.contract import Memory, MemoryStep
from fairseq_plugins.modules.state import TensorState, batch_dim
from helpers import resume_through_flat_state

WIDTH, HEADS, SEGMENT = 16, 2, 8


@dataclass
class MeanState(TensorState):
    """The sum and count of the vectors that entered, and the chunk left pending."""

    total: Tensor = field(metadata=batch_dim(0))
    count: Tensor = field(metadata=batch_dim(0))
    pending: Optional[Tensor] = field(default=None, metadata=batch_dim(1))

    def reset_(self, slots: Tensor) -> None:
        keep = (~slots).to(self.total.dtype)
        self.total, self.count = self.total * keep[:, None], self.count * keep
        if self.pending is not None:
            self.pending = self.pending * keep[None, :, None]


class MeanMemory(Memory):
    """Adds W·(mean of every vector that entered) to each position's attention output."""

    state_type = MeanState
    inputs = ("segment", "residual")

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def empty_state(self, bsz: int, device) -> MeanState:
        return MeanState(torch.zeros(bsz, WIDTH, device=device), torch.zeros(bsz, device=device))

    def step(self, query, state, chunk, chunk_valid=None) -> MemoryStep:
        total, count = state.total, state.count
        if state.pending is not None:
            total, count = total + state.pending.sum(0), count + state.pending.size(0)
        out = self.proj(total / count.clamp_min(1.0)[:, None])[None].expand_as(query)
        return MemoryStep(out, MeanState(total, count, chunk).detach(), None)


def _decoder(memory_factory=MeanMemory, seed=0):
    torch.manual_seed(seed)
    dictionary = Dictionary()
    for i in range(40):
        dictionary.add_symbol(f"w{i}")
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=WIDTH, decoder_attention_heads=HEADS, decoder_layers=2,
                                 decoder_ffn_embed_dim=32, segment_length=SEGMENT, mem_len=0, dropout=0.0)
    layers = nn.ModuleList(PreNormBlock(WIDTH, ShortTermMemoryAttention(WIDTH, HEADS, 0), FeedForward(WIDTH, 32),
                                        memory=memory_factory(WIDTH), dropout=0.0) for _ in range(2))
    return InfiniteFormerDecoder(cfg, dictionary, build_embedding(dictionary, WIDTH), layers=layers).eval()


def _by_hand(dec, tokens):
    x = (dec.embed_scale * dec.embed_tokens(tokens)).transpose(0, 1)
    entered = [[] for _ in dec.layers]
    outputs = []
    for start in range(0, x.size(0), SEGMENT):
        h = x[start:start + SEGMENT]
        for i, layer in enumerate(dec.layers):
            normed = layer.self_attn_layer_norm(h)
            y = layer.self_attn(normed).out
            if entered[i]:
                y = y + layer.long_term_memory.proj(torch.cat(entered[i]).mean(0))[None]
            else:
                y = y + layer.long_term_memory.proj.bias
            entered[i].append(normed)
            h = h + y
            h = h + layer.ffn(layer.final_layer_norm(h))
        outputs.append(h)
    return dec.output_layer(dec.layer_norm(torch.cat(outputs)).transpose(0, 1))


def test_a_memory_of_the_contract_runs_in_the_decoder_as_written_by_hand():
    dec = _decoder()
    tokens = torch.randint(4, 44, (3, 4 * SEGMENT - 2))
    with torch.no_grad():
        got, extra = dec(tokens)
        expected = _by_hand(dec, tokens)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert extra["ltm_stats"] == [] and extra["memory_holdings"] == [None] * 2 * 4  # no reads to regularise


def test_its_declared_state_crosses_calls_through_the_flat_form():
    dec, fresh = _decoder(seed=1), _decoder(seed=1)
    tokens = torch.randint(4, 44, (2, 3 * SEGMENT))
    flat, resumed, whole = resume_through_flat_state(dec, fresh, tokens, 2 * SEGMENT)
    assert "0.memory.total" in flat and "0.memory.pending" in flat
    assert isinstance(fresh.memory_bank.peek("k")[0].memory, MeanState)
    torch.testing.assert_close(resumed, whole, atol=1e-5, rtol=1e-5)


def test_the_block_refuses_what_it_cannot_host():
    attention = ShortTermMemoryAttention(WIDTH, HEADS, 4)

    class KeysValuesMemory(MeanMemory):
        contribution = "keys_values"

    with pytest.raises(ConfigError, match="KeysValuesMemory contributes extra keys and values .* which "
                                          "AdditiveAttention cannot host"):
        PreNormBlock(WIDTH, AdditiveAttention(WIDTH, HEADS, causal=True), FeedForward(WIDTH, 32),
                     memory=KeysValuesMemory(WIDTH))
    with pytest.raises(ConfigError, match="MeanMemory takes segment, residual") as e:
        PreNormBlock(WIDTH, attention, FeedForward(WIDTH, 32), memory=MeanMemory(WIDTH), memory_input="evicted")
    assert "\n" not in str(e.value)


def test_incremental_decoding_needs_a_memory_with_a_cache():
    dec = _decoder()
    with pytest.raises(ConfigError, match="a memory with a segment cache in every block .MeanMemory has none"):
        dec(torch.randint(4, 44, (1, 3)), incremental_state={})
