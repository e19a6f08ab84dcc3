"""One contract every attention and every memory of the registry runs, through the block that
holds them (docs/design/architecture.md, "Contracts"): :class:`BlockContract` is the mixin, each
subclass below one attention (alone or with one memory).

- empty state: the state of streams that saw nothing, of the declared types;
- round trip: a state through its flat form (what a checkpoint saves) continues identically;
- reset: a reset slot continues as a stream that saw nothing, the other slots as before;
- full = incremental: token-by-token decoding (``start_segment``/``step``/``end_segment``, where
  the attention declares a cache) gives the segment's outputs and the next state;
- wiped adds zero: with the memory wiped the block computes what it computes without the memory.
"""

import copy

import pytest
import torch

from fairseq_plugins.modules.attention.additive import AdditiveAttention
from fairseq_plugins.modules.attention.gpt2 import GPT2Attention
from fairseq_plugins.modules.attention.rotary import ShortTermMemoryAttention
from fairseq_plugins.modules.block import FeedForward, PreNormBlock
from fairseq_plugins.modules.continuous.basis import ContinuousBasis
from fairseq_plugins.modules.memory.compressive import CompressiveMemory
from fairseq_plugins.modules.memory.continuous import LongTermMemory
from fairseq_plugins.modules.memory.registry import MEMORIES


WIDTH, HEADS, SEGMENT, BSZ, N = 16, 2, 6, 3, 12


def _randomise(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return module


class BlockContract:
    """Mixin: a subclass sets :meth:`parts` ``-> (attention, memory or None, memory_input)``."""

    def parts(self):
        raise NotImplementedError

    def block(self, memory=True, seed=0):
        torch.manual_seed(seed)
        attention, mem, memory_input = self.parts()
        block = PreNormBlock(WIDTH, attention, FeedForward(WIDTH, 24), memory=mem if memory else None, dropout=0.0,
                             memory_input=memory_input)
        return _randomise(block, seed + 1).eval()

    def segments(self, count=3, seed=5):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(SEGMENT, BSZ, WIDTH, generator=g) for _ in range(count)]

    def run(self, block, state, segments):
        outs = []
        with torch.no_grad():
            for x in segments:
                result = block(x, state)
                outs.append(result.x)
                state = result.state
        return outs, state

    def test_empty_state_is_of_the_declared_types(self):
        block = self.block()
        state = block.empty_state(BSZ, torch.device("cpu"))
        for part, owner in ((state.attention, block.self_attn), (state.memory, block.long_term_memory)):
            declared = getattr(owner, "state_type", None) if owner is not None else None
            assert (part is None) == (declared is None) and (part is None or isinstance(part, declared))

    def test_state_round_trip_through_the_flat_form(self):
        block = self.block()
        first, second = self.segments(2)
        _, state = self.run(block, block.empty_state(BSZ, "cpu"), [first])
        restored = block.state_from_dict({k: v.clone() for k, v in state.to_dict().items()})
        expected, _ = self.run(block, state, [second])
        got, _ = self.run(block, restored, [second])
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)

    def test_reset_slot_continues_as_a_fresh_stream(self):
        block = self.block()
        segments = self.segments(3)
        _, state = self.run(block, block.empty_state(BSZ, "cpu"), segments[:2])
        kept, _ = self.run(block, copy.deepcopy(state), segments[2:])
        state.reset_(torch.tensor([False, True, False]))
        got, _ = self.run(block, state, segments[2:])
        fresh, _ = self.run(block, block.empty_state(BSZ, "cpu"), segments[2:])
        torch.testing.assert_close(got[0][:, 1], fresh[0][:, 1], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got[0][:, [0, 2]], kept[0][:, [0, 2]], rtol=0, atol=0)
        assert (kept[0][:, 1] - fresh[0][:, 1]).abs().max() > 1e-4  # the state mattered

    def test_full_equals_incremental(self):
        block = self.block()
        if block.self_attn.cache_type is None:
            pytest.skip(f"{type(block.self_attn).__name__} decodes through fairseq's incremental_state "
                        "(tested with its models)")
        segments = self.segments(2)
        expected, expected_state = self.run(block, block.empty_state(BSZ, "cpu"), segments)
        state = block.empty_state(BSZ, "cpu")
        with torch.no_grad():
            for x, want in zip(segments, expected):
                cache = block.start_segment(state, BSZ, torch.device("cpu"), SEGMENT)
                steps = []
                for t in range(SEGMENT):
                    out, cache = block.step(x[t:t + 1], cache, t)
                    steps.append(out)
                torch.testing.assert_close(torch.cat(steps), want, rtol=1e-5, atol=1e-5)
                state = block.end_segment(cache)
        for name, value in state.to_dict().items():
            torch.testing.assert_close(value, expected_state.to_dict()[name], rtol=1e-5, atol=1e-5)

    def test_wiped_memory_adds_zero(self):
        block = self.block()
        if block.long_term_memory is None:
            pytest.skip("no memory")
        without = self.block(memory=False)
        without.load_state_dict(block.state_dict(), strict=False)
        block.long_term_memory.wiped = True
        segments = self.segments(3)
        got, _ = self.run(block, block.empty_state(BSZ, "cpu"), segments)
        expected, _ = self.run(without, without.empty_state(BSZ, "cpu"), segments)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)


def _continuous(read="location"):
    basis = ContinuousBasis(N, (0.05, 0.1), 0.5)
    return LongTermMemory(WIDTH, HEADS, num_samples=N, basis=basis, read=read)


class TestShortTermMemoryAttention(BlockContract):
    def parts(self):
        return ShortTermMemoryAttention(WIDTH, HEADS, SEGMENT), None, "segment"


class TestShortTermMemoryAttentionWithContinuousMemory(BlockContract):
    def parts(self):
        return ShortTermMemoryAttention(WIDTH, HEADS, SEGMENT), _continuous(), "segment"


class TestShortTermMemoryAttentionWithContentRead(BlockContract):
    def parts(self):
        return ShortTermMemoryAttention(WIDTH, HEADS, SEGMENT), _continuous("content"), "evicted"


class TestShortTermMemoryAttentionWithMixtureRead(BlockContract):
    def parts(self):
        return ShortTermMemoryAttention(WIDTH, HEADS, SEGMENT), _continuous("mixture"), "segment"


class TestShortTermMemoryAttentionWithCompressiveMemory(BlockContract):
    def parts(self):
        return (ShortTermMemoryAttention(WIDTH, HEADS, SEGMENT), CompressiveMemory(WIDTH, 4, 2, segment_length=SEGMENT),
                "evicted")


class TestCausalAdditiveAttentionWithContinuousMemory(BlockContract):
    def parts(self):
        return AdditiveAttention(WIDTH, HEADS, causal=True), _continuous(), "segment"


class TestGPT2AttentionWithContinuousMemory(BlockContract):
    def parts(self):
        return GPT2Attention(WIDTH, HEADS), _continuous(), "residual"


# the class each registered memory builds: a memory added to the registry fails the test below
# until it is named here and runs the contract
REGISTERED = {"continuous": LongTermMemory, "compressive": CompressiveMemory}


def test_every_registered_memory_runs_the_contract():
    assert set(REGISTERED) == set(MEMORIES)
    covered = {type(cls().parts()[1]) for cls in BlockContract.__subclasses__()}
    assert set(REGISTERED.values()) <= covered


def test_the_memory_type_choices_are_the_registry():
    from fairseq_plugins.config import MEMORY_TYPES

    assert tuple(MEMORY_TYPES) == tuple(MEMORIES)
