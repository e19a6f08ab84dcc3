"""What a memory reports it holds (docs/design/architecture.md, "What a memory holds"): the
∞-former memory's report against an independent re-simulation of its update, in every
``--ltm-input``; memory_map.json's mapping read from the report equals the re-simulation's; the
report is off unless asked for and changes nothing the model computes."""

from typing import Optional

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.lab.lm.memory_map import MemoryMap, build_map
from fairseq_plugins.lab.lm.timeline import Timeline
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)
from fairseq_plugins.modules.continuous.basis import (first_fit_positions, sticky_histogram, sticky_positions,
                                                       update_positions)
from fairseq_plugins.modules.continuous.read import ReadStats
from fairseq_plugins.modules.memory.contract import set_holdings_report
from fairseq_plugins.modules.memory.continuous import LongTermMemory

SEGMENT = 8


# ---- the reference: the update re-simulated from the memory's settings and its reads' Gaussians ----

def reference_samples(memory: LongTermMemory, previous: Optional[ReadStats]) -> torch.Tensor:
    """``(M,)`` float64: where an update samples the old signal in evaluation (uniform k/M, or the
    deterministic sticky positions of the previous read's histogram)."""
    m = memory.num_samples
    if memory.sticky and previous is not None:
        hist = sticky_histogram(previous.mu[:1].float(), previous.sigma2[:1].float().sqrt(), memory.sticky_bins)
        return sticky_positions(hist, m, random=False)[0].double()
    return torch.arange(1, m + 1, dtype=torch.float64) / m


def reference_enter(timeline: Timeline, chunk_tokens: torch.Tensor, memory: LongTermMemory,
                    previous: Optional[ReadStats]) -> Timeline:
    """The timeline after ``chunk_tokens`` entered: first fit, or the old positions moved through
    ``interp(p, [0, s_1..s_M], [0, τ/M..τ])`` and the chunk on (τ, 1]."""
    length = int(chunk_tokens.numel())
    if length == 0:
        return timeline
    if len(timeline) == 0:
        return Timeline(chunk_tokens.long().clone(), first_fit_positions(length))
    m = memory.num_samples
    placed = update_positions(m, length, memory.tau)
    xp = np.concatenate([[0.0], reference_samples(memory, previous).numpy()])
    fp = np.concatenate([[0.0], placed[:m].numpy()])
    moved = torch.from_numpy(np.interp(timeline.positions.numpy(), xp, fp))
    return Timeline(torch.cat([timeline.tokens, chunk_tokens.long()]), torch.cat([moved, placed[m:]]))


def reference_chunk_tokens(layer, segment: int, total: int) -> torch.Tensor:
    """The stream positions the block's step at ``segment`` leaves pending: the segment, or with
    ``evicted`` what leaves the short-term memory of S positions."""
    begin, end = segment * SEGMENT, min(total, (segment + 1) * SEGMENT)
    if layer.memory_input != "evicted":
        return torch.arange(begin, end)
    held = min(layer.self_attn.mem_len, begin)
    leaving = held + (end - begin) - layer.self_attn.mem_len
    return torch.arange(begin - held, begin - held + max(0, leaving))


def reference_timelines(decoder, stats, total: int):
    """Per layer, ``{segment: Timeline}`` of the segments that read a memory holding something."""
    layers, segments = decoder.layers, -(-total // SEGMENT)
    result = []
    for i, layer in enumerate(layers):
        timeline, maps = Timeline.empty(), {}
        for s in range(1, segments):
            previous = stats[(s - 1) * len(layers) + i]
            timeline = reference_enter(timeline, reference_chunk_tokens(layer, s - 1, total), layer.long_term_memory,
                                       previous)
            if len(timeline):
                maps[s] = timeline
        result.append(maps)
    return result


# ---- the model ---------------------------------------------------------------

def _model(ltm_input: str, mem: int, sticky: bool = True, seed: int = 0) -> InfiniteFormerLanguageModel:
    torch.manual_seed(seed)
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2,
                                 decoder_attention_heads=2, segment_length=SEGMENT, mem_len=mem, num_basis_functions=16,
                                 num_samples=12, sticky_bins=16, no_sticky_memories=not sticky, ltm_input=ltm_input)
    decoder = InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), 16, d.pad()))
    with torch.no_grad():  # reads that put their mass unevenly: sticky samples far from uniform
        for layer in decoder.layers:
            layer.long_term_memory.mu_proj.mul_(20.0)
    return InfiniteFormerLanguageModel(decoder).eval()


def _tokens(length: int, bsz: int = 1, seed: int = 1) -> torch.Tensor:
    return torch.randint(4, 44, (bsz, length), generator=torch.Generator().manual_seed(seed))


CASES = [("segment", SEGMENT, True), ("segment", SEGMENT, False), ("evicted", 4, True), ("evicted", 12, True),
         ("evicted", 0, False), ("residual", SEGMENT, True)]


@pytest.mark.parametrize("ltm_input,mem,sticky", CASES)
def test_the_report_is_the_re_simulated_update(ltm_input, mem, sticky):
    model, total = _model(ltm_input, mem, sticky), 6 * SEGMENT + 3
    tokens = _tokens(total)
    assert set_holdings_report(model) == 2
    with torch.no_grad():
        _, extra = model.decoder.extract_features(tokens)
    reference = reference_timelines(model.decoder, extra["ltm_stats"], total)
    layers = len(model.decoder.layers)
    for i in range(layers):
        for s in range(-(-total // SEGMENT)):
            tokens_held, positions = extra["memory_holdings"][s * layers + i].slot(0)
            if s not in reference[i]:
                assert tokens_held.numel() == 0
                continue
            assert torch.equal(tokens_held, reference[i][s].tokens)
            assert torch.equal(positions, reference[i][s].positions)  # bit for bit
    assert any(len(maps) for maps in reference)


@pytest.mark.parametrize("ltm_input,mem,sticky", CASES[:4])
def test_memory_map_json_equals_the_re_simulation(ltm_input, mem, sticky):
    model, total = _model(ltm_input, mem, sticky), 5 * SEGMENT + 5
    tokens = _tokens(total)[0]
    got = build_map(model, tokens, [f"w{int(t)}" for t in tokens], "ckpt.pt")
    with torch.no_grad():
        _, extra = model.decoder.extract_features(tokens[None])
    expected = MemoryMap(got.checkpoint, got.tokens, got.pieces, got.segment_length, got.tau, got.num_samples,
                         got.sticky, got.sigma2_min, got.num_layers, got.num_heads, got.mu, got.sigma2,
                         reference_timelines(model.decoder, extra["ltm_stats"], total))
    assert got.to_json() == expected.to_json()
    assert not any(layer.long_term_memory.report_holdings for layer in model.decoder.layers)  # switched back off


def test_each_slot_of_a_batch_reports_its_own_stream():
    model, total = _model("segment", SEGMENT), 4 * SEGMENT
    tokens = _tokens(total, bsz=3)
    set_holdings_report(model)
    with torch.no_grad():
        _, batch = model.decoder.extract_features(tokens)
        for b in range(3):
            _, alone = model.decoder.extract_features(tokens[b:b + 1])
            for together, single in zip(batch["memory_holdings"], alone["memory_holdings"]):
                t1, p1 = together.slot(b)
                t0, p0 = single.slot(0)
                assert torch.equal(t1, t0) and torch.allclose(p1, p0, atol=1e-6, rtol=0)


def test_a_reset_slot_reports_its_new_stream_from_zero():
    memory = LongTermMemory(4, 2, num_basis=16, basis_widths=(0.05,), num_samples=8).eval()
    memory.report_holdings = True
    state = memory.empty_state(2, "cpu")
    for _ in range(3):
        state = memory.step(torch.randn(SEGMENT, 2, 4), state, torch.randn(SEGMENT, 2, 4)).state
    state.reset_(torch.tensor([True, False]))
    step = memory.step(torch.randn(SEGMENT, 2, 4), state, torch.randn(SEGMENT, 2, 4))
    step = memory.step(torch.randn(SEGMENT, 2, 4), step.state, None)
    # the chunk left pending before the reset never enters; the new stream's first one is token 0..L-1
    assert step.holdings.slot(0)[0].tolist() == list(range(SEGMENT))
    assert torch.equal(step.holdings.slot(0)[1], first_fit_positions(SEGMENT))
    assert step.holdings.slot(1)[0].tolist() == list(range(4 * SEGMENT))


def test_the_report_is_off_unless_asked_and_changes_nothing():
    model, tokens = _model("evicted", 4), _tokens(4 * SEGMENT + 2, bsz=2)
    with torch.no_grad():
        plain, extra = model.decoder.extract_features(tokens, memory_key="k")
    assert all(h is None for h in extra["memory_holdings"])
    flat = model.memory_state_dict("k")
    assert not any("holdings" in name for name in flat)
    set_holdings_report(model)
    with torch.no_grad():
        reported, extra = model.decoder.extract_features(tokens)
    assert torch.equal(plain, reported) and all(h is not None for h in extra["memory_holdings"])


def test_a_model_without_memory_is_refused():
    model = _model("segment", SEGMENT)
    for layer in model.decoder.layers:
        layer.long_term_memory = None
    with pytest.raises(ConfigError, match="no memory"):
        set_holdings_report(model)
