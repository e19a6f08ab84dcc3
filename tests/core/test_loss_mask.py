"""``--loss-after-symbol`` of ``infinite_former_kl``: the loss on the answer only.

References: the answer positions found by a plain loop over each row, the cross-entropy
computed by hand from the model's logits (``log_softmax`` picked at those positions), and the
same criterion without the option for the KL term.
"""

import argparse
import math

import pytest
import torch
from fairseq import metrics
from fairseq.data import Dictionary
from torch import nn

from fairseq_plugins.criterions.infinite_former_kl import InfiniteFormerKLCriterion
from fairseq_plugins.criterions.loss_mask import after_symbol_mask
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.models.infinite_former_lm import (InfiniteFormerDecoder, InfiniteFormerLanguageModel,
                                                       InfiniteFormerLMConfig)
from fairseq_plugins.tasks.streaming_language_modeling import StreamingLanguageModelingTask


def _dictionary():
    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"s{i:02d}")
    d.add_symbol("sep")
    return d


def _naive_mask(src, tgt, symbol, eos, pad):
    """Row by row: after the marker in the input, until an end-of-sentence token."""
    out = torch.zeros_like(tgt, dtype=torch.bool)
    for r in range(src.size(0)):
        inside = False
        for j in range(src.size(1)):
            if int(src[r, j]) == eos:
                inside = False
            if int(src[r, j]) == symbol:
                inside = True
            out[r, j] = inside and int(tgt[r, j]) not in (eos, pad)
    return out


def test_mask_on_a_hand_written_row():
    d = _dictionary()
    sep, eos, pad = d.index("sep"), d.eos(), d.pad()
    s = [d.index(f"s{i:02d}") for i in range(20)]
    # </s> s07 s13 s07 sep s07 s13 </s> </s> s02 sep s02 | the last row starts inside an answer
    row = [eos, s[7], s[13], s[7], sep, s[7], s[13], eos, eos, s[2], sep, s[2], pad]
    src, tgt = torch.tensor([row[:-1]]), torch.tensor([row[1:]])
    expected = [False, False, False, False, True, True, False, False, False, False, True, False]
    assert after_symbol_mask(src, tgt, sep, eos, pad).tolist() == [expected]
    # a block that starts after the separator: nothing of its answer part counts
    src, tgt = torch.tensor([[s[3], s[4], eos, s[5]]]), torch.tensor([[s[4], eos, s[5], s[6]]])
    assert not after_symbol_mask(src, tgt, sep, eos, pad).any()


def test_mask_matches_a_plain_loop_on_random_rows():
    g = torch.Generator().manual_seed(0)
    # few distinct ids so that markers and end-of-sentence tokens are frequent
    tokens = torch.randint(0, 7, (6, 41), generator=g)
    src, tgt = tokens[:, :-1], tokens[:, 1:]
    for symbol in (3, 5):
        assert torch.equal(after_symbol_mask(src, tgt, symbol, 2, 1), _naive_mask(src, tgt, symbol, 2, 1))


def _model_and_task(seed=0):
    torch.manual_seed(seed)
    d = _dictionary()
    cfg = InfiniteFormerLMConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2,
                                 decoder_attention_heads=4, segment_length=8, mem_len=8, num_basis_functions=16,
                                 basis_widths="0.05,0.1", num_samples=16, dropout=0.0)
    dec = InfiniteFormerDecoder(cfg, d, nn.Embedding(len(d), 32, d.pad()))
    task = StreamingLanguageModelingTask(argparse.Namespace(), d)
    return InfiniteFormerLanguageModel(dec).eval(), task, d


def _sorting_rows(d, lengths=(13, 5), seed=0):
    """Two streams of sorting-like lines ``x.. sep a.. </s>`` (the answer 4 symbols), 32 inputs each."""
    g = torch.Generator().manual_seed(seed)
    sep, eos = d.index("sep"), d.eos()
    rows = []
    for n in lengths:
        row = [eos]
        while len(row) < 33:
            row += [4 + int(t) for t in torch.randint(0, 20, (n,), generator=g)] + [sep]
            row += [4 + int(t) for t in torch.randint(0, 20, (4,), generator=g)] + [eos]
        rows.append(row[:33])
    tokens = torch.tensor(rows)
    return {"id": torch.arange(2), "nsentences": 2, "ntokens": int(tokens[:, 1:].ne(d.pad()).sum()),
            "net_input": {"src_tokens": tokens[:, :-1].contiguous(), "src_lengths": torch.full((2,), 32),
                          "reset_memory": torch.ones(2, dtype=torch.bool), "memory_key": "train"},
            "target": tokens[:, 1:].contiguous()}


def test_loss_is_the_answer_cross_entropy_and_the_kl_term_is_unchanged():
    model, task, d = _model_and_task()
    sample = _sorting_rows(d)
    weight = 0.01  # large enough that the KL term is far above float rounding
    full = InfiniteFormerKLCriterion(task, False, kl_weight=weight)
    answer = InfiniteFormerKLCriterion(task, False, kl_weight=weight, loss_after_symbol="sep")
    with torch.no_grad():
        loss_full, size_full, log_full = full(model, sample)
        loss, size, log = answer(model, sample)  # reset_memory: the same empty memory at the start
        logits = model(**sample["net_input"])[0]
    # the answer positions by hand: the 4 targets after each sep that lie in the row
    src, tgt = sample["net_input"]["src_tokens"], sample["target"]
    positions = [(r, j) for r in range(2) for j in range(32)
                 if any(int(src[r, k]) == d.index("sep") and all(int(src[r, i]) != d.eos() for i in range(k, j + 1))
                        for k in range(j + 1)) and int(tgt[r, j]) != d.eos()]
    assert len(positions) >= 8
    logp = torch.log_softmax(logits.double(), dim=-1)
    nll = -sum(float(logp[r, j, tgt[r, j]]) for r, j in positions)
    assert size == len(positions) and log["ntokens"] == len(positions) and log["sample_size"] == len(positions)
    assert float(log["nll_loss"]) == pytest.approx(nll, rel=1e-5)
    # the KL per read is the same with and without the mask, weighted by the scored targets
    kl = float(log_full["kl"]) / size_full
    assert kl > 1.0
    assert float(log["kl"]) / size == pytest.approx(kl, rel=1e-6)
    assert float(loss) == pytest.approx(nll + weight * size * kl, rel=1e-5)
    # without the option every target counts, as before
    assert size_full == sample["ntokens"] == 64


def test_logged_metrics_are_per_answer_token_and_an_empty_batch_weighs_nothing():
    logs = [{"loss": torch.tensor(6.0), "nll_loss": torch.tensor(4.0), "kl": torch.tensor(2.0),
             "ntokens": 2, "sample_size": 2},
            {"loss": torch.tensor(0.0), "nll_loss": torch.tensor(0.0), "kl": torch.tensor(0.0),
             "ntokens": 0, "sample_size": 0}]
    for batch in (logs, logs[1:]):
        with metrics.aggregate(new_root=True) as agg:
            InfiniteFormerKLCriterion.reduce_metrics(batch)
            values = agg.get_smoothed_values()
        if batch is logs:
            assert values["nll_loss"] == pytest.approx(2.0 / math.log(2), abs=1e-3)
            assert values["loss"] == pytest.approx(3.0 / math.log(2), abs=1e-3)
        else:
            assert values["nll_loss"] == 0.0


def test_an_unknown_symbol_is_one_line():
    _, task, _ = _model_and_task()
    with pytest.raises(ConfigError, match="--loss-after-symbol 'SEP' is not in the dictionary"):
        InfiniteFormerKLCriterion(task, False, loss_after_symbol="SEP")
