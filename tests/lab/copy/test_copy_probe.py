"""The copy probe (fairseq_plugins/lab/copy/; docs/results/copy.md): its documents hold what they
say where they say, its curve is the model's accuracy, its table is the seeds' numbers, and bad
options are one line with nothing written."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.copy.probe import Documents, dictionary
from fairseq_plugins.lab.copy.table import first_learned, load, summarize
from helpers import longmem, longmem_here, one_line_error


@pytest.mark.parametrize("where,lo,hi", [("lead", 0, 30), ("far", 32, 126), ("any", 0, 126)])
def test_documents_hold_distinct_values_after_markers_in_order_inside_their_span(where, lo, hi):
    d = dictionary(40)
    docs = Documents(d, 128, 3, 8, where, 32)
    src, prev, target = docs.batch(64, torch.Generator().manual_seed(0))
    marker, first, last = d.nspecial, d.nspecial + 1, d.nspecial + 8
    assert src.shape == (64, 128) and prev.shape == target.shape == (64, 4)
    for row, tgt, pr in zip(src, target, prev):
        where_markers = (row == marker).nonzero().flatten()
        assert len(where_markers) == 3 and lo <= int(where_markers.min()) and int(where_markers.max()) < hi
        values = row[where_markers + 1]
        assert torch.equal(tgt[:3], values) and int(tgt[3]) == d.eos() and int(pr[0]) == d.eos()
        assert torch.equal(pr[1:], values) and len(set(values.tolist())) == 3
        assert bool(((values >= first) & (values <= last)).all())
        others = torch.ones(128, dtype=torch.bool)
        others[where_markers], others[where_markers + 1] = False, False
        assert bool((row[others] > last).all())  # filler only elsewhere: no other marker or value


def test_documents_refuse_a_span_too_small():
    with pytest.raises(ConfigError, match="--where far leaves positions"):
        Documents(dictionary(40), 40, 4, 8, "far", 36)


def _result(accuracies, wiped=None, seed=1):
    curve = [{"update": 100 * (i + 1), "loss": 1.0, "accuracy": a} for i, a in enumerate(accuracies)]
    for row, w in zip(curve, wiped or []):
        row["wiped_accuracy"] = w
    return {"options": {"arch": "x", "set": ["a=1"], "length": 64, "where": "far", "seed": seed}, "parameters": 10,
            "chance": 0.125, "curve": curve}


def test_table_is_the_seeds_numbers(tmp_path):
    for seed, accs, wiped in ((1, [0.1, 0.95, 1.0], [0.1, 0.1, 0.2]), (2, [0.1, 0.2, 0.5], [0.1, 0.1, 0.1])):
        (tmp_path / "gate").mkdir(exist_ok=True)
        (tmp_path / "gate" / f"seed{seed}.json").write_text(json.dumps(_result(accs, wiped, seed)))
    rows = summarize(load(str(tmp_path)))
    assert len(rows) == 1 and rows[0]["final"] == [1.0, 0.5] and rows[0]["final_wiped"] == [0.2, 0.1]
    half = 12.706204736174707 * math.sqrt(0.125) / math.sqrt(2)  # t(1, .975) · sd / √2
    assert rows[0]["accuracy"] == f"0.750 [{0.75 - half:.3f}, {0.75 + half:.3f}] (1.000, 0.500)"
    assert rows[0]["learned_at"] == "200, -"
    assert first_learned(_result([0.5, 0.89, 0.9])["curve"]) == 300


@pytest.mark.full
def test_train_writes_a_curve_and_refuses_bad_options_in_one_line(tmp_path):
    out = tmp_path / "r" / "seed1.json"
    small = ["--length", "48", "--lead-span", "16", "--eval-size", "8", "--batch-size", "4", "--set", "lead_window=16",
             "--set", "encoder_chunk_length=16", "--set", "num_basis_functions=8", "--set", "encoder_embed_dim=16",
             "--set", "decoder_embed_dim=16", "--set", "encoder_ffn_embed_dim=16", "--set", "decoder_ffn_embed_dim=16"]
    longmem("copy", "train", *small, "--updates", "4", "--eval-every", "2", "--out", out)
    result = json.loads(out.read_text())
    assert [r["update"] for r in result["curve"]] == [2, 4] and all(0 <= r["wiped_accuracy"] <= 1 for r in result["curve"])
    for bad, needle in ((["--updates", "0"], "--updates must be a positive integer"),
                        (["--set", "nope=1"], "--set nope: infinite_former_summarizer has no such option"),
                        (["--set", "lead_window"], "--set takes KEY=VALUE")):
        one_line_error(longmem_here("copy", "train", *small, *bad, "--out", tmp_path / "x.json", check=False), needle,
                       prefix="fairseq-longmem copy", status=2)
    one_line_error(longmem_here("copy", "train", *small, "--out", out, check=False), "exists (use --force",
                   prefix="fairseq-longmem copy", status=2)
    one_line_error(longmem_here("copy", "table", tmp_path / "none", check=False), "no copy-probe runs under",
                   prefix="fairseq-longmem copy", status=2)
    assert not (tmp_path / "x.json").exists()
