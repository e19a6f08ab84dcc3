"""``fairseq-longmem analyze position`` against fairseq-eval-lm and hand computations.

Tiny checkpoints are trained with fairseq-train subprocesses on the books fixture (the helpers
and prepared data of test_inference_traps.py); the split scored is ``train`` (6 documents), so
that offsets restart several times.
"""

import json
import os
import re

import numpy as np
import pytest
import torch

import helpers
from helpers import BIN, longmem, run
from test_inference_traps import EVALUATED, LOSS, SMALL, data, ok, split_tokens, train, work  # noqa: F401

PERPLEXITY = re.compile(r"Perplexity: ([0-9.]+)")

SPLIT = "train"


def analyze(*args):
    """``fairseq-longmem analyze ARGS`` (``helpers.longmem``, unchecked)."""
    return longmem("analyze", *args, check=False)


def one_line_error(proc, *needles):
    """A refusal of ``fairseq-longmem analyze``: exit status 2, no traceback, and of the stderr
    lines that hold ``error:`` exactly one, the analyze command's, holding every needle."""
    line = helpers.one_line_error(proc, *needles, prefix="fairseq-longmem analyze", status=2)
    assert [x for x in proc.stderr.splitlines() if "error:" in x] == [line], proc.stderr[-3000:]


@pytest.fixture(scope="module")
def checkpoints(work, data):
    infinite = train(data, work / "pos_if", "--task", "streaming_lm", "--arch", "infinite_former_lm", *SMALL,
                     "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--batch-size", "2",
                     "--num-basis-functions", "16", "--num-samples", "16")
    transformer = train(data, work / "pos_tlm", "--task", "language_modeling", "--arch", "transformer_lm", *SMALL,
                        "--tokens-per-sample", "32", "--sample-break-mode", "none", "--batch-size", "4")
    return {"infinite_former": infinite, "transformer_lm": transformer}


@pytest.fixture(scope="module")
def result(work, data, checkpoints):
    out = work / "position"
    ok(analyze("position", "--checkpoint", checkpoints["infinite_former"], "--checkpoint",
               checkpoints["transformer_lm"], "--data", data, "--split", SPLIT, "--out", out, "--edges", "16,64,256",
               "--streams", "3", "--replicates", "200"))
    with open(out / "position.json") as f:
        return json.load(f), out


def naive_offsets(data, split):
    """Offset of every token of the split from its document's start, by a loop over the lines:
    a document starts at the first non-empty line after an empty one (docs/data-preparation.md)."""
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(data / "dict.txt"))
    lines = data_utils.load_indexed_dataset(str(data / split), d)
    offsets, doc, offset, after_empty, first = [], [], 0, False, True
    document = 0
    for i in range(len(lines)):
        line = lines[i].tolist()
        empty = line == [d.eos()]
        if not empty and after_empty and not first:
            document, offset = document + 1, 0
        for _ in line:
            offsets.append(offset)
            doc.append(document)
            offset += 1
        after_empty = empty
        first = first and empty
    return np.array(offsets), np.array(doc)


@pytest.mark.full
def test_bucket_totals_equal_eval_lm_for_both_models(data, result):
    """Token counts add up to eval-lm's count; the token-weighted mean of the buckets is its loss."""
    res, _ = result
    assert len(res["models"]) == 2
    for model in res["models"]:
        out = ok(run([os.path.join(BIN, "fairseq-eval-lm"), data, *model["eval_args"]], check=False))
        count = int(EVALUATED.search(out).group(1).replace(",", ""))
        loss = float(LOSS.search(out).group(1))
        buckets = model["buckets"]
        assert count == split_tokens(data, SPLIT) == model["tokens"] == sum(b["tokens"] for b in buckets)
        mean = sum(b["tokens"] * b["loss_bits"] for b in buckets) / count
        assert abs(mean - loss) < 1e-3, (model["label"], mean, loss)
        assert abs(model["loss_bits"] - loss) < 1e-3
        # one seed: the `all` perplexity is eval-lm's, to the digit both print
        assert f"{model['ppl']:.2f}" == PERPLEXITY.search(out).group(1), (model["label"], model["ppl"], out[-300:])
        for b in buckets:
            assert b["ppl_low"] <= b["ppl"] * (1 + 1e-9) and b["ppl"] <= b["ppl_high"] * (1 + 1e-9)
    assert {m["task"] for m in res["models"]} == {"streaming_lm", "language_modeling"}


@pytest.mark.full
def test_offsets_restart_at_document_boundaries(data, result):
    """Per bucket token counts and document counts = those of a loop over the lines."""
    res, _ = result
    offsets, doc = naive_offsets(data, SPLIT)
    assert doc.max() + 1 == res["documents"] >= 3
    edges = [0, 16, 64, 256, None]
    for b in res["models"][0]["buckets"]:
        k = edges.index(b["start"])
        inside = (offsets >= b["start"]) & ((offsets < edges[k + 1]) if edges[k + 1] is not None else True)
        assert b["tokens"] == int(inside.sum())
        assert b["documents"] == len(set(doc[inside].tolist()))
        assert b["mean_offset"] == pytest.approx(offsets[inside].mean())
    assert res["models"][0]["buckets"][0]["tokens"] == 16 * res["documents"]  # every document has ≥ 16 tokens


def test_offsets_of_scored_positions_match_the_loop(data):
    from fairseq.data import Dictionary, data_utils

    from fairseq_plugins.lab.lm.position import document_offsets
    from fairseq_plugins.tasks.streaming_language_modeling import document_starts

    d = Dictionary.load(str(data / "dict.txt"))
    starts = document_starts(data_utils.load_indexed_dataset(str(data / SPLIT), d), d.eos())
    offsets, doc = naive_offsets(data, SPLIT)
    got_doc, got_offset = document_offsets(torch.arange(offsets.size), starts)
    assert np.array_equal(got_offset.numpy(), offsets) and np.array_equal(got_doc.numpy(), doc)


@pytest.mark.full
def test_differences_and_outputs(result):
    res, out = result
    (diff,) = res["differences"]
    a, b = res["models"]
    assert (diff["a"], diff["b"]) == (a["label"], b["label"]) == ("pos_if", "pos_tlm")
    for row, ba, bb in zip(diff["buckets"], a["buckets"], b["buckets"]):
        assert row["loss_bits_diff"] == pytest.approx(ba["loss_bits"] - bb["loss_bits"])
        assert row["low"] <= row["loss_bits_diff"] + 1e-12 <= row["high"] + 2e-12
    table = (out / "position.md").read_text()
    assert table.count("\n| ") == len(a["buckets"]) + 1 and "pos_if vs pos_tlm" in table
    assert (out / "position.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [f for f in os.listdir(out) if f.endswith(".tmp")]


def test_bootstrap_against_a_loop():
    from fairseq_plugins.lab.common.bootstrap import percentile_interval, replicate_means, resample_weights

    rng = np.random.default_rng(0)
    sums, counts = rng.random((5, 3)) * 10, rng.integers(0, 4, (5, 3)).astype(float)
    weights = resample_weights(5, 50, seed=3)
    assert (weights.sum(1) == 5).all()
    got = replicate_means(sums, counts, weights)
    for r in range(50):
        for k in range(3):
            s = sum(weights[r, d] * sums[d, k] for d in range(5))
            n = sum(weights[r, d] * counts[d, k] for d in range(5))
            assert (np.isnan(got[r, k]) and n == 0) or got[r, k] == pytest.approx(s / n)
    low, high = percentile_interval(np.arange(101.0)[:, None])
    assert (low[0], high[0]) == pytest.approx((2.5, 97.5))


@pytest.mark.full
def test_bad_input_one_line_nothing_written(work, data, checkpoints):
    out = work / "position_bad"
    one_line_error(analyze("position", "--checkpoint", checkpoints["infinite_former"], "--data", data, "--split",
                           "nope", "--out", out), "split 'nope' not found", "test", "train", "valid")
    other = work / "other_task.pt"
    state = torch.load(checkpoints["infinite_former"], weights_only=False)
    state["cfg"]["task"]["_name"] = "translation"
    torch.save(state, other)
    one_line_error(analyze("position", "--checkpoint", checkpoints["infinite_former"], "--checkpoint", other,
                           "--data", data, "--out", out), "task 'translation'", "streaming_lm or language_modeling")
    one_line_error(analyze("position", "--checkpoint", checkpoints["infinite_former"], "--data", data, "--out", out,
                           "--edges", "64,16"), "strictly increasing")
    one_line_error(analyze("position", "--checkpoint", checkpoints["transformer_lm"], "--memory-wiped", "--data", data,
                           "--out", out), "--memory-wiped needs a checkpoint with a long-term memory",
                   "drop --memory-wiped")
    one_line_error(analyze("position", "--checkpoint", f"a={checkpoints['infinite_former']}", "--checkpoint",
                           f"a={checkpoints['infinite_former']}", "--data", data, "--out", out),
                   "given twice for a", "give each seed's checkpoint once")
    seed2 = work / "transformer_seed2.pt"  # another seed, so that the arm's models are what differs
    state = torch.load(checkpoints["transformer_lm"], weights_only=False)
    state["cfg"]["common"]["seed"] = 2
    torch.save(state, seed2)
    one_line_error(analyze("position", "--checkpoint", f"x={checkpoints['infinite_former']}", "--checkpoint",
                           f"x={seed2}", "--data", data, "--out", out),
                   "the checkpoints of x are of different models", "its own arm name")
    one_line_error(analyze("position", "--checkpoint", f"a wiped={checkpoints['infinite_former']}", "--data", data,
                           "--out", out), "ends in ' wiped'")
    assert not out.exists()


@pytest.mark.full
def test_an_earlier_result_is_replaced_only_with_force(work, data, checkpoints, result):
    _, out = result
    before = (out / "position.json").read_bytes()
    one_line_error(analyze("position", "--checkpoint", checkpoints["infinite_former"], "--data", data, "--out", out),
                   "position.json", "already exist", "pass --force")
    assert (out / "position.json").read_bytes() == before


def uncut_documents(starts, n, segment, streams):
    """Token index ranges of the documents that no stream boundary cuts: with resets each document
    fills whole segments (its last one padded), and the split's padded length is cut into
    ``streams`` streams of a whole number of segments each."""
    bounds = list(starts) + [n]
    padded = [-(-(end - begin) // segment) * segment for begin, end in zip(bounds[:-1], bounds[1:])]
    stream_len = -(-sum(padded) // streams // segment) * segment
    cuts = [s * stream_len for s in range(1, streams)]
    kept, place = [], 0
    for (begin, end), length in zip(zip(bounds[:-1], bounds[1:]), padded):
        if not any(place < cut < place + length for cut in cuts):
            kept.append((begin, end))
        place += length
    return kept


@pytest.mark.full
def test_a_model_trained_with_resets_is_scored_with_them(work, data):
    """A checkpoint trained with --reset-memory-at-document-boundary reads every document from an
    empty memory: a document's log-probabilities are the same in one stream and in three (where the
    documents sit at other places and after other documents) unless a stream boundary cuts it;
    eval-lm with the option gives the same loss, and every token of the split is scored once.
    Without sticky memories: their samples are quantiles of a histogram, a step function of the
    reads, so float rounding that differs with the batch's size can move a sample and the two
    layouts then drift apart within a document (docs/analysis.md)."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_plugins.lab.lm.scoring import score_split
    from fairseq_plugins.tasks.streaming_language_modeling import document_starts

    ckpt = train(data, work / "pos_reset", "--task", "streaming_lm", "--arch", "infinite_former_lm", *SMALL,
                 "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--batch-size", "2",
                 "--num-basis-functions", "16", "--num-samples", "16", "--reset-memory-at-document-boundary",
                 "--no-sticky-memories")
    three = score_split(str(ckpt), str(data), SPLIT, streams=3)
    one = score_split(str(ckpt), str(data), SPLIT, streams=1)
    assert "--reset-memory-at-document-boundary" in three.eval_args
    n = split_tokens(data, SPLIT)
    for scored in (three, one):
        assert sorted(scored.positions.tolist()) == list(range(n))
    d = Dictionary.load(str(data / "dict.txt"))
    starts = document_starts(data_utils.load_indexed_dataset(str(data / SPLIT), d), d.eos())
    kept = uncut_documents(starts, n, 16, 3)
    assert len(kept) >= 3 and len(kept) < len(starts)
    by_place = {name: torch.empty(n, dtype=torch.float64) for name in ("one", "three")}
    by_place["one"][one.positions], by_place["three"][three.positions] = one.log_probs, three.log_probs
    for begin, end in kept:
        assert torch.allclose(by_place["one"][begin:end], by_place["three"][begin:end], atol=1e-5), (begin, end)
    out = ok(run([os.path.join(BIN, "fairseq-eval-lm"), data, *three.eval_args], check=False))
    assert int(EVALUATED.search(out).group(1).replace(",", "")) == n
    assert abs(float(LOSS.search(out).group(1)) - three.loss_bits) < 1e-3
