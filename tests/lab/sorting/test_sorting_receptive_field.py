"""The receptive-field baseline of the sorting task: how far a stack of blocks with a short-term
memory reaches, and exact counting over it.

References are independent of the code under test: a brute-force dependency set built layer by
layer (the union of what each attended input depends on) and counted with ``collections.Counter``,
and the real model's reach found by perturbing one input token at a time and seeing which outputs
change (tiny random weights, float64).
"""
from collections import Counter

import pytest
import torch
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.lab.sorting import score as sorting_accuracy
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)
from fairseq_plugins.modules.memory.contract import set_memory_wiped


def _dependencies(total: int, segment: int, mem_len: int, layers: int):
    """deps[q]: the input positions the output at q depends on, built block by block: a block at q
    reads the inputs of its segment up to q and the mem_len positions before the segment."""
    deps = [{q} for q in range(total)]
    for _ in range(layers):
        below = deps
        deps = []
        for q in range(total):
            start = q - q % segment
            read = [j for j in range(total) if start - mem_len <= j <= q]
            deps.append(set().union(*(below[j] for j in read)))
    return deps


@pytest.mark.parametrize("segment,mem_len,layers", [(4, 4, 1), (4, 4, 2), (4, 4, 3), (4, 3, 2), (3, 7, 2),
                                                    (5, 0, 3), (8, 8, 2)])
def test_receptive_field_baseline_vs_brute_force(segment, mem_len, layers):
    length, k_symbols, n = 37, 6, 12
    g = torch.Generator().manual_seed(segment * 100 + mem_len * 10 + layers)
    seqs = torch.randint(0, k_symbols, (n, length), generator=g)
    answers = torch.stack([torch.tensor(sorted(range(k_symbols), key=lambda s: (-Counter(row.tolist())[s], s)))
                           for row in seqs])
    deps = _dependencies(length + 1 + k_symbols, segment, mem_len, layers)
    reach = sorting_accuracy.visible_sequence_tokens(length, k_symbols, segment=segment, mem_len=mem_len,
                                                     layers=layers)
    expected_preds = torch.zeros(n, k_symbols, dtype=torch.long)
    for k in range(k_symbols):
        p = length + 1 + k  # [</s>, x_1..x_T, sep, a_1..]: position p predicts answer k
        seen = sorted(j for j in deps[p] if 1 <= j <= length)  # the sequence tokens x_j it depends on
        assert reach[k] == len(seen)
        for b in range(n):
            counts = Counter(int(seqs[b, j - 1]) for j in seen)
            given = set(answers[b, :k].tolist())
            expected_preds[b, k] = min((s for s in range(k_symbols) if s not in given),
                                       key=lambda s: (-counts.get(s, 0), s))
    preds = sorting_accuracy.window_count_predictions(seqs, answers, reach)
    assert torch.equal(preds, expected_preds)
    if layers == 1:  # one block: the window count baseline's window
        assert reach == sorting_accuracy.visible_sequence_tokens(length, k_symbols, segment=segment, mem_len=mem_len)


def test_the_sorting_arms_reach_65_tokens_at_512():
    # 2 blocks, S = M = 32 (docs/results/sorting.md): the answers' segment starts at x_512, one block
    # reads back to x_480, two to x_448
    assert sorting_accuracy.visible_sequence_tokens(512, 8, segment=32, mem_len=32) == [33] * 8
    assert sorting_accuracy.visible_sequence_tokens(512, 8, segment=32, mem_len=32, layers=2) == [65] * 8
    # a window model reads its W tokens whatever its depth
    assert sorting_accuracy.visible_sequence_tokens(512, 8, window=64, layers=3) == [63 - k for k in range(8)]
    with pytest.raises(ValueError):
        sorting_accuracy.visible_sequence_tokens(512, 8, segment=32, layers=0)


def _model(segment, mem_len, layers, memory=None, seed=0):
    torch.manual_seed(seed)
    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"w{i}")
    options = {"no_long_term_memory": True} if memory is None else {"memory_type": memory}
    if memory == "compressive":
        options.update(compressed_memory_slots=2, compression_rate=segment, ltm_input="evicted")
    else:
        options.update(num_basis_functions=8, basis_widths="0.05,0.1", num_samples=8)
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=layers,
                                 decoder_attention_heads=2, segment_length=segment, mem_len=mem_len, dropout=0.0,
                                 **options)
    model = InfiniteFormerLanguageModel(InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), 16, d.pad())))
    if memory is not None:
        set_memory_wiped(model)  # the baseline counts what the model reaches without its long-term memory
    return model.double().eval()


@pytest.mark.parametrize("segment,mem_len,layers,memory", [(4, 4, 2, None), (4, 4, 3, None), (4, 3, 2, None),
                                                           (3, 7, 2, None), (4, 0, 2, None), (4, 4, 1, None),
                                                           (4, 4, 2, "continuous"), (4, 4, 2, "compressive")])
def test_receptive_field_is_the_models_reach(segment, mem_len, layers, memory):
    model = _model(segment, mem_len, layers, memory)
    assert sorting_accuracy.stack_of(model) == (segment, mem_len, layers)
    total = 30
    tokens = torch.randint(4, 24, (1, total), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(tokens, features_only=True)[0][0]  # (T, C): the whole row in one call, as scoring reads it
        changed = torch.zeros(total, total, dtype=torch.bool)  # changed[j, p]: token j moves output p
        for j in range(total):
            other = tokens.clone()
            other[0, j] = 4 + (int(tokens[0, j]) - 4 + 7) % 20
            diff = (model(other, features_only=True)[0][0] - base).abs().amax(-1)
            assert bool(((diff == 0) | (diff > 1e-9)).all())  # unmoved outputs are bit for bit the same
            changed[j] = diff > 0
    for p in range(total):
        first = sorting_accuracy.first_reached(p, *sorting_accuracy.stack_of(model))
        # every token from the first reached up to p moves the output at p, none before or after
        assert changed[:, p].nonzero().flatten().tolist() == list(range(first, p + 1)), p
