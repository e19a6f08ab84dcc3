"""The summarization loop end to end through subprocesses, once per input format, on the
fixtures of tests/fixtures/summarization/ (tiny models, a few updates):

    data-prep/prepare-summarization.sh -> scripts/train-summarizer.sh -> scripts/generate-summaries.sh
    -> fairseq-longmem summarize score   (jsonl: fastformer; ACLSum-shaped: infinite_former)
    (scripts/summarization-comparison.sh, all of the above: test_summarization_comparison.py)

Checked against independent readings of the files: hyp.txt is fairseq-generate's D- lines in
example order (the S- line of example i is raw/test.source line i, whole or cut as the
checkpoint's task says), ref.txt is raw/test.target, the scores are recomputed from the files
with rouge-score / sacrebleu, and the comparison re-run skips everything already done."""

import json
import os
import re

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from helpers import ROOT, longmem, run

FIX = os.path.join(ROOT, "tests", "fixtures", "summarization")
TINY = {  # tiny sizes for every arm (the ∞-former's chunk, lead window and basis scaled down too)
    "LAYERS": "1", "WIDTH": "32", "HEADS": "2", "FFN": "64", "DOCS": "4", "MAX_UPDATE": "3", "WARMUP": "1",
    "CHUNK": "16", "LEAD_WINDOW": "8", "NUM_BASIS": "16", "MAX_TARGET": "128",
    "BEAM": "2", "MIN_LEN": "2", "MAX_LEN_B": "10", "GEN_BATCH": "8",
}


def sh(*args, extra_env=None, check=True):
    """``ARGS`` in a subprocess (helpers.run) with the tiny sizes of :data:`TINY` in its environment."""
    return run(args, check=check, extra_env={**TINY, **(extra_env or {})})


def lines(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.endswith("\n")
    return text[:-1].split("\n")


def generated(out_dir, tag):
    """{id: text} of fairseq-generate's TAG- lines (S: source, D: detokenized hypothesis)."""
    found = {}
    for line in lines(os.path.join(out_dir, "generate.out")):
        m = re.match(rf"{tag}-(\d+)\t(.*)$", line)
        if m:
            text = m.group(2)
            found[int(m.group(1))] = text.split("\t", 1)[1] if tag == "D" else text
    return found


def check_generation(data, gen, truncated):
    """hyp.txt/ref.txt line-aligned with the data, in example order; returns (hyps, refs)."""
    sources, refs = lines(os.path.join(data, "raw", "test.source")), lines(os.path.join(data, "raw", "test.target"))
    hyps = lines(os.path.join(gen, "hyp.txt"))
    assert len(hyps) == len(refs) == len(sources) >= 2
    assert lines(os.path.join(gen, "ref.txt")) == refs
    d, s = generated(gen, "D"), generated(gen, "S")
    assert sorted(d) == list(range(len(refs))) and hyps == [d[i] for i in range(len(refs))]
    n_cut = 0
    for i, src in enumerate(sources):
        # the S- line is the source as the model saw it, decoded; a character the tiny vocabulary
        # lacks comes back as <unk>
        pattern = "".join(".+?" if part == "<unk>" else re.escape(part) for part in re.split(r"(<unk>)", s[i]))
        m = re.match(pattern if truncated else pattern + "$", src)
        assert m, (i, s[i][:80], src[:80])
        n_cut += m.end() < len(src)
    assert (n_cut > 0) == truncated  # the limit below is short enough to cut some fixture documents
    return hyps, refs


def check_scores(row, hyps, refs):
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for t in ("rouge1", "rouge2", "rougeL"):
        assert row[t] == pytest.approx(100 * sum(scorer.score(r, h)[t].fmeasure for h, r in zip(hyps, refs))
                                       / len(refs), abs=1e-9)
    assert row["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    assert row["n"] == len(refs)


def prepare(tmp_path, *args):
    data = tmp_path / "data"
    sh("bash", "data-prep/prepare-summarization.sh", *args, "--out", data, "--vocab-size", "150", "--workers", "1")
    return str(data)


@pytest.mark.full
@pytest.mark.parametrize("fmt,arm,prep_args", [
    ("jsonl", "fastformer", ["--corpus", "jsonl", "--input", os.path.join(FIX, "jsonl"),
                             "--document-field", "article.paragraphs", "--summary-field", "highlights"]),
    ("aclsum", "infinite_former", ["--corpus", "aclsum", "--input", os.path.join(FIX, "aclsum")]),
])
def test_prepare_train_generate_score(tmp_path, fmt, arm, prep_args):
    data = prepare(tmp_path, *prep_args)
    save = tmp_path / "ck"
    # too-long examples stop training with one error line instead of being dropped by fairseq
    too_long = {"MAX_TARGET": "4"} if arm == "fastformer" else {"INF_MAX_SOURCE": "8"}
    proc = sh("bash", "scripts/train-summarizer.sh", arm, os.path.join(data, "bin"), save, extra_env=too_long,
              check=False)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    what = "targets longer than --max-target-positions 4" if arm == "fastformer" else \
        "sources longer than --max-source-positions 8"
    assert errors[0].startswith(f"train-summarizer.sh ({arm}): error: train: ") and what in errors[0]
    assert not save.exists()
    # fastformer: a source limit below the fixture's longest document, so truncation is exercised
    limits = {"FASTFORMER_MAX_SOURCE": "48"} if arm == "fastformer" else {}
    train = sh("bash", "scripts/train-summarizer.sh", arm, os.path.join(data, "bin"), save, extra_env=limits)
    assert (save / "checkpoint_last.pt").exists()
    if arm == "fastformer":
        assert re.search(r"\(fastformer\): test: \d+ examples.*--truncate-source cuts [1-9]\d* of", train.stdout)
    else:
        assert "--truncate-source cuts" not in train.stdout and "limits 131072 / 128" in train.stdout
    gen = tmp_path / "gen"
    generated = sh("bash", "scripts/generate-summaries.sh", save / "checkpoint_last.pt", data, "test", gen)
    hyps, refs = check_generation(data, str(gen), truncated=arm == "fastformer")
    decoding = (gen / "decoding.txt").read_text().strip()
    # LENPEN (not in TINY) comes from the training targets' lengths in stats.json: short here -> 1.0
    train_median = json.load(open(os.path.join(data, "stats.json")))["splits"]["train"]["target"]["spm_tokens"]["median"]
    lenpen = "2.0" if train_median >= 64 else "1.0"
    assert decoding == f"beam=2 lenpen={lenpen} min_len=2 max_len_a=0 max_len_b=10 no_repeat_ngram_size=3"
    assert f"LENPEN={lenpen} from {os.path.join(data, 'stats.json')}" in generated.stdout
    longmem("summarize", "score", "--hyp", gen / "hyp.txt", "--ref", gen / "ref.txt",
            "--model", arm, "--checkpoint", save / "checkpoint_last.pt", "--split", "test", "--decoding", decoding,
            "--out", gen)
    row = json.loads((gen / "results.json").read_text())
    check_scores(row, hyps, refs)
    assert (row["model"], row["split"], row["decoding"]) == (arm, "test", decoding)
    assert row["checkpoint"] == str(save / "checkpoint_last.pt")
