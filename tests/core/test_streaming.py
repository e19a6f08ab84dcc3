"""Streaming task layout and memory carried across calls (values, not smoke)."""

import argparse

import pytest
import torch
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)
from fairseq_plugins.tasks.streaming_language_modeling import (
    StreamingLanguageModelingTask,
    StreamingLMDataset,
    document_starts,
)

PAD, EOS = 1, 2


def _tokens(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 50, (n,), generator=g)


def _collect(dataset):
    """Concatenate (src, tgt, reset) of all items along time."""
    items = [dataset.collater([dataset[i]]) for i in range(len(dataset))]
    src = torch.cat([it["net_input"]["src_tokens"] for it in items], dim=1)
    tgt = torch.cat([it["target"] for it in items], dim=1)
    return items, src, tgt


@pytest.mark.parametrize("n", [1000, 1003])
def test_streams_are_contiguous_and_cover_every_token_once(n):
    tokens = _tokens(n)
    ds = StreamingLMDataset(tokens, bsz=4, tokens_per_sample=16, pad=PAD, eos=EOS, split="train")
    items, src, tgt = _collect(ds)
    # concatenating the streams' targets (pads removed) gives back the split, in order
    assert torch.equal(tgt[tgt.ne(PAD)], tokens)
    # the source is the target shifted right by one, with eos before the split
    flat_src = src[src.ne(PAD)]
    assert flat_src[0] == EOS and torch.equal(flat_src[1:], tokens[:-1])
    # every segment has the requested length except possibly the last
    assert all(it["net_input"]["src_tokens"].size(1) == 16 for it in items[:-1])
    assert items[0]["net_input"]["reset_memory"].all()
    assert not any(it["net_input"]["reset_memory"].any() for it in items[1:])
    assert sum(it["ntokens"] for it in items) == n
    assert items[3]["net_input"]["memory_key"] == "train"


def test_each_rank_reads_its_own_streams():
    tokens = _tokens(999)
    shards = [StreamingLMDataset(tokens, bsz=2, tokens_per_sample=8, pad=PAD, eos=EOS, split="train",
                                 num_shards=3, shard_id=r) for r in range(3)]
    assert len({len(s) for s in shards}) == 1  # same number of batches on every rank
    targets = torch.cat([_collect(s)[2] for s in shards], dim=0)  # (6 streams, T)
    assert torch.equal(targets[targets.ne(PAD)], tokens)  # disjoint, together the whole split


def test_document_mode_starts_documents_at_segment_boundaries():
    # three documents separated by empty lines (a line holding only eos)
    lines = [torch.tensor([5, 6, EOS]), torch.tensor([7, EOS]), torch.tensor([EOS]),
             torch.tensor([8, 9, 10, 11, EOS]), torch.tensor([EOS]), torch.tensor([12, EOS])]
    tokens = torch.cat(lines)
    starts = document_starts(lines, EOS)
    assert starts == [0, 6, 12]
    ds = StreamingLMDataset(tokens, bsz=1, tokens_per_sample=4, pad=PAD, eos=EOS, split="train",
                            document_starts=starts)
    items, src, tgt = _collect(ds)
    resets = [bool(it["net_input"]["reset_memory"][0]) for it in items]
    # doc 1 = 5 tokens -> 2 segments, doc 2 = 6 tokens -> 2 segments, doc 3 = 2 tokens -> 1
    assert resets == [True, False, True, False, True]
    assert src[0, 0] == EOS and src[0, 8] == EOS and src[0, 16] == EOS
    assert torch.equal(tgt[tgt.ne(PAD)], tokens)


def _decoder(ltm=True, seg=8, mem=8, seed=0, width=32, heads=4):
    torch.manual_seed(seed)
    d = Dictionary()
    for i in range(40):
        d.add_symbol(f"w{i}")
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=width, decoder_ffn_embed_dim=64, decoder_layers=2,
                                 decoder_attention_heads=heads, segment_length=seg, mem_len=mem,
                                 num_basis_functions=16, basis_widths="0.05,0.1", num_samples=16,
                                 no_long_term_memory=not ltm, dropout=0.0)
    return InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), width, d.pad())).eval()


@pytest.mark.parametrize("ltm", [True, False])
def test_memory_carried_across_calls_equals_one_long_call(ltm):
    dec = _decoder(ltm)
    x = torch.randint(4, 44, (3, 32))
    with torch.no_grad():
        whole, _ = dec(x)  # one call, segmented internally, memory from empty
        parts = [dec(x[:, i:i + 8], memory_key="k", reset_memory=torch.full((3,), i == 0))[0]
                 for i in range(0, 32, 8)]
        fresh_last, _ = dec(x[:, 24:])  # last segment without any memory
    assert torch.allclose(torch.cat(parts, dim=1), whole, atol=1e-5)
    assert not torch.allclose(fresh_last, whole[:, 24:], atol=1e-3)  # the memory is really used


@pytest.mark.parametrize("width,heads", [(32, 4), (30, 2)])  # head width 8, and odd 15
def test_reset_flag_empties_only_the_flagged_slot(width, heads):
    # a reset slot still has (masked) memory positions, so its queries sit at other
    # absolute positions than in a fresh run: equality also shows positions are relative
    dec = _decoder(width=width, heads=heads)
    x = torch.randint(4, 44, (2, 24))
    with torch.no_grad():
        dec(x[:, :16], memory_key="k", reset_memory=torch.ones(2, dtype=torch.bool))
        out, _ = dec(x[:, 16:], memory_key="k", reset_memory=torch.tensor([True, False]))
        fresh, _ = dec(x[:, 16:])
    assert torch.allclose(out[0], fresh[0], atol=1e-5)
    assert not torch.allclose(out[1], fresh[1], atol=1e-3)


def test_training_and_validation_memories_are_separate():
    dec = _decoder()
    a, b = torch.randint(4, 44, (2, 16)), torch.randint(4, 44, (2, 8))
    with torch.no_grad():
        dec(a, memory_key="train", reset_memory=torch.ones(2, dtype=torch.bool))
        ref, _ = dec(b, memory_key="train")
        dec(a, memory_key="train", reset_memory=torch.ones(2, dtype=torch.bool))
        dec(torch.randint(4, 44, (2, 16)), memory_key="valid", reset_memory=torch.ones(2, dtype=torch.bool))
        out, _ = dec(b, memory_key="train")
    assert torch.allclose(out, ref, atol=1e-5)


def test_task_resets_memory_at_epoch_and_validation_start():
    dec = _decoder()
    model = InfiniteFormerLanguageModel(dec)
    task = StreamingLanguageModelingTask(argparse.Namespace(), Dictionary())
    task.datasets = {"train": None, "valid": None}
    with torch.no_grad():
        for key in ("train", "valid"):
            dec(torch.randint(4, 44, (2, 8)), memory_key=key)
    task.begin_valid_epoch(1, model)
    assert dec.memory_bank.peek("valid") is None and dec.memory_bank.peek("train") is not None
    task.begin_epoch(2, model)
    assert dec.memory_bank.peek("train") is None


def test_evaluation_is_deterministic_with_sticky_memories():
    dec = _decoder()
    x = torch.randint(4, 44, (2, 64))
    with torch.no_grad():
        runs = []
        for _ in range(2):
            dec.memory_bank.reset("test")  # as begin_valid_epoch / a new fairseq-eval-lm run
            outs = [dec(x[:, i:i + 8], memory_key="test", reset_memory=torch.full((2,), i == 0))[0]
                    for i in range(0, 64, 8)]
            runs.append(torch.cat(outs, dim=1))
    assert torch.equal(runs[0], runs[1])


def test_state_size_does_not_grow_with_stream_length():
    dec = _decoder()
    sizes = []
    with torch.no_grad():
        for i in range(12):
            dec(torch.randint(4, 44, (2, 8)), memory_key="k", reset_memory=torch.full((2,), i == 0))
            mem = dec.memory_bank.peek("k")
            sizes.append(sum(t.numel() for m in mem for t in m.to_dict().values()))
    assert len(set(sizes[1:])) == 1


def test_bad_model_options_raise_one_line_errors():
    d = Dictionary()
    base = dict(decoder_embed_dim=32, decoder_attention_heads=4, segment_length=8, mem_len=8,
                num_basis_functions=16, basis_widths="0.05,0.1", num_samples=16)
    cases = [
        (dict(decoder_attention_heads=5), "divide"),
        (dict(num_basis_functions=0), "--num-basis-functions"),
        (dict(num_samples=0), "--num-samples"),
        (dict(tau=1.0), "--tau"),
        (dict(tau=0.0), "--tau"),
        (dict(num_basis_functions=15), "multiple"),
        (dict(basis_widths="0.05,x"), "--basis-widths"),
        (dict(segment_length=0), "--tokens-per-sample"),
    ]
    for override, needle in cases:
        cfg = InfiniteFormerLMConfig(**{**base, **override})
        with pytest.raises(ConfigError, match=needle) as err:
            InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), 32))
        assert "\n" not in str(err.value)


def test_interactive_generation_points_to_language_modeling():
    task = StreamingLanguageModelingTask.__new__(StreamingLanguageModelingTask)
    with pytest.raises(ConfigError, match="--task language_modeling"):
        task.build_dataset_for_inference([torch.tensor([5, 6])], [2])


def _gpt2_decoder(block=8):
    from fairseq_plugins.models.backbone import build_embedding
    from fairseq_plugins.models.infinite_former_gpt2 import GPT2Decoder, InfiniteFormerGPT2Config

    torch.manual_seed(0)
    d = Dictionary()
    for i in range(40):
        d.add_symbol(str(i))
    cfg = InfiniteFormerGPT2Config(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2,
                                   decoder_attention_heads=4, max_positions=2 * block, segment_length=block,
                                   num_basis_functions=16, basis_widths="0.05,0.1", num_samples=16, dropout=0.0,
                                   attention_dropout=0.0)
    return GPT2Decoder(cfg, d, build_embedding(d, 32)).eval()


@pytest.mark.parametrize("make", [_decoder, _gpt2_decoder], ids=["infinite_former_lm", "infinite_former_gpt2"])
def test_segmented_decoders_refuse_an_empty_input_and_keep_their_memory(make):
    """One segment loop serves both decoders: an empty input is one ConfigError for each,
    raised before the memory of its key is touched."""
    dec = make()
    with torch.no_grad():
        dec(torch.randint(4, 40, (2, 12)), memory_key="k")
        before = {k: t.clone() for k, t in dec.memory_bank.state_dict("k").items()}
        with pytest.raises(ConfigError, match="the decoder input is an empty sequence") as e:
            dec(torch.zeros(2, 0, dtype=torch.long), memory_key="k")
    assert "\n" not in str(e.value)
    after = dec.memory_bank.state_dict("k")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_streaming_models_declare_their_segment_lengths():
    """What the task reads through the protocol (the checkpoint's segment and short-term
    memory lengths), for both memory models."""
    from fairseq_plugins.models.infinite_former_gpt2 import InfiniteFormerGPT2Model

    assert InfiniteFormerLanguageModel(_decoder(seg=8, mem=12)).segment_lengths() == (8, 12)
    assert InfiniteFormerGPT2Model(_gpt2_decoder(block=6)).segment_lengths() == (6, 0)
