"""The comparison recipe, scripts/summarization-comparison.sh, end to end on tiny models:

    source-target: fairseq's transformer and Lead-3, scored, and a rerun that redoes nothing;
    facts, two seeds (the ∞-former and its memory-wiped control): the scores per fact of each
    seed, pooled over the seeds, the paired difference, and a rerun with another budget refused.

Checked against independent readings of the files, as in test_summarization_e2e.py."""

import json
import os

import pytest
import torch

from fairseq_plugins.lab.facts import score as facts
from fairseq_plugins.lab.summarization.lead import lead
from facts_filler import write_filler
from test_summarization_e2e import FIX, check_generation, check_scores, lines, sh


@pytest.mark.full
def test_comparison_script_source_target(tmp_path):
    out, data = tmp_path / "runs", tmp_path / "data"
    args = ["bash", "scripts/summarization-comparison.sh", "--arms", "transformer", "--out", out, "--data", data,
            "--corpus", "source-target", "--input", os.path.join(FIX, "source_target"), "--vocab-size", "150"]
    first = sh(*args, extra_env={"TRANSFORMER_MAX_SOURCE": "48"})
    rows = json.loads((out / "comparison.json").read_text())
    assert [r["model"] for r in rows] == ["Lead-3", "transformer (source cut at 48)"]
    hyps, refs = check_generation(str(data), str(out / "transformer" / "test"), truncated=True)
    check_scores(rows[1], hyps, refs)
    assert rows[1]["checkpoint"] == str(out / "transformer" / "checkpoint_last.pt")
    # Lead-3: the first three sentences of each test document, scored the same way
    lead3 = [lead(doc, 3) for doc in lines(data / "raw" / "test.source")]
    assert lines(out / "lead3" / "test" / "hyp.txt") == lead3
    check_scores(rows[0], lead3, refs)
    table = (out / "comparison.md").read_text()
    assert table.strip() in first.stdout and table.count("\n") == 4
    # a re-run redoes nothing and prints the same table
    second = sh(*args, extra_env={"TRANSFORMER_MAX_SOURCE": "48"})
    assert "up to date" in second.stdout
    for done in ("Lead-3 already scored", "transformer already trained", "summaries of test already in"):
        assert done in second.stdout
    assert "== training" not in second.stdout and "== generating" not in second.stdout
    assert (out / "comparison.md").read_text() == table


@pytest.mark.full
def test_comparison_script_facts_two_seeds(tmp_path):
    """On the facts corpus the recipe scores each fact per seed, then pools each arm's seeds; the
    ∞-former also generates with its memory wiped (its own row in every table)."""
    (tmp_path / "filler").mkdir()
    filler = write_filler(tmp_path / "filler")
    out, data = tmp_path / "runs", tmp_path / "data"
    sh("bash", "scripts/summarization-comparison.sh", "--arms", "infinite_former", "--out", out,
       "--data", data, "--corpus", "facts", "--input", filler, "--doc-tokens", "512", "--facts", "3",
       "--examples", "6,2,3", "--vocab-size", "300", "--placement", "uniform", "--seeds", "1,2",
       extra_env={"MAX_UPDATE": "10", "MIN_LEN": "1", "MAX_LEN_B": "6"})  # logs update 10
    entries = facts.read_manifest(str(data / "raw" / "test.facts.jsonl"))
    runs = {"infinite_former": "infinite_former/test", "infinite_former wiped": "infinite_former/test-wiped"}
    hyps = {name: [lines(out / f"seed{s}" / path / "hyp.txt") for s in (1, 2)] for name, path in runs.items()}
    for i, s in enumerate((1, 2)):  # each seed's own tables
        rows = json.loads((out / f"seed{s}" / "facts.json").read_text())["rows"]
        assert [r["model"] for r in rows] == list(runs)
        for row in rows:
            assert row["metrics"]["recall"]["value"] == pytest.approx(
                facts.score(hyps[row["model"]][i], entries, replicates=10)["metrics"]["recall"]["value"])
        models = [r["model"] for r in json.loads((out / f"seed{s}" / "comparison.json").read_text())]
        assert models == ["Lead-3", "infinite_former (whole document)",
                          "infinite_former (whole document), memory wiped"]
        # --seeds: each seed trains in OUT/seedS with that seed, on the same data
        ckpt = out / f"seed{s}" / "infinite_former" / "checkpoint_last.pt"
        assert torch.load(ckpt, weights_only=False)["cfg"]["common"]["seed"] == s
        decoding = (out / f"seed{s}" / "infinite_former" / "test-wiped" / "decoding.txt").read_text()
        assert decoding.endswith(" extra: --model-overrides \"{'memory_wiped': True}\"\n")  # as typed in a shell
    pooled = json.loads((out / "facts.json").read_text())["rows"]
    assert [(r["model"], r["runs"]) for r in pooled] == [(name, 2) for name in runs]
    for row in pooled:
        want = facts.score_runs(hyps[row["model"]], entries, replicates=10)
        for name in ("slot", "recall", "precision"):
            assert row["metrics"][name]["value"] == pytest.approx(want["metrics"][name]["value"])
        assert row["hyp"] == [str(out / f"seed{s}" / runs[row["model"]] / "hyp.txt") for s in (1, 2)]
    (paired,) = json.loads((out / "facts.json").read_text())["differences"]  # the model against its control
    assert (paired["model"], paired["control"], paired["runs"]) == ("infinite_former", "infinite_former wiped", 2)
    assert paired["metrics"]["recall"]["value"] == pytest.approx(
        pooled[0]["metrics"]["recall"]["value"] - pooled[1]["metrics"]["recall"]["value"])
    assert (out / "facts-curves.png").read_bytes()[:4] == b"\x89PNG"
    # a rerun into the same OUT with another budget is refused before anything is trained
    again = sh("bash", "scripts/summarization-comparison.sh", "--arms", "infinite_former", "--out", out, "--data", data,
               "--corpus", "facts", "--input", filler, "--doc-tokens", "512", "--facts", "3", "--examples", "6,2,3",
               "--vocab-size", "300", "--placement", "uniform", "--seeds", "1,2", check=False,
               extra_env={"MAX_UPDATE": "11", "MIN_LEN": "1", "MAX_LEN_B": "6"})
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert f"{out / 'seed1' / 'infinite_former'} was trained with another budget (MAX_UPDATE 10 -> 11)" in again.stderr

