"""Scores per fact (fairseq_plugins/lab/facts/score.py, ``fairseq-longmem summarize facts``;
docs/summarization.md) against hand-computed values, and its bad input (one line each)."""
import json

import numpy as np
import pytest

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.facts import score as facts
from helpers import longmem_in_process

# three documents; token_end decides the bucket (edges 1023, 4095: <= 1023, <= 4095, beyond)
ENTRIES = [
    {"id": "d0", "tokens": 9000, "facts": [{"value": "Amber", "token_end": 100}, {"value": "Cobalt", "token_end": 1023},
                                           {"value": "Jade", "token_end": 2000}, {"value": "Onyx", "token_end": 8000}]},
    {"id": "d1", "tokens": 9000, "facts": [{"value": "Ruby", "token_end": 50}, {"value": "Teal", "token_end": 1024},
                                           {"value": "Opal", "token_end": 4095}, {"value": "Umber", "token_end": 4096}]},
    {"id": "d2", "tokens": 9000, "facts": [{"value": "Lilac", "token_end": 10}, {"value": "Sepia", "token_end": 20},
                                           {"value": "Cyan", "token_end": 5000}, {"value": "Ochre", "token_end": 6000}]},
]
HYPS = [
    "Amber Cobalt Onyx Jade",        # slots 1,1,0,0; all 4 found; 4 distinct words, 4 right
    "ruby, Opal Teal. Zircon Ruby",  # slots: ruby=Ruby yes, opal!=teal, teal!=opal, zircon!=umber -> 1; found Ruby, Teal, Opal
    "",                              # nothing
]


def by_hand():
    # slot hits: d0 2, d1 1, d2 0 -> 3/12; recall: 4 + 3 + 0 = 7/12
    # precision: d0 4/4 distinct words, d1 {ruby, opal, teal, zircon} -> 3/4, d2 0/0 -> 7/8
    # buckets (token_end <= 1023 / <= 4095 / more):
    #   0-1023: Amber Cobalt | Ruby | Lilac Sepia -> recall 2+1+0 = 3/5, slot 2+1+0 = 3/5
    #   1023-4095: Jade | Teal Opal -> recall 1+2 = 3/3, slot 0/3
    #   4095+: Onyx | Umber | Cyan Ochre -> recall 1/4, slot 0/4
    return {"slot": 3 / 12, "recall": 7 / 12, "precision": 7 / 8,
            "buckets": [(5, 3 / 5, 3 / 5), (3, 3 / 3, 0 / 3), (4, 1 / 4, 0 / 4)]}


def test_scores_equal_the_hand_computed_case():
    got = facts.score(HYPS, ENTRIES, replicates=200, seed=3, closed_set=32)
    want = by_hand()
    assert got["documents"] == 3 and got["facts"] == 12
    for name in ("slot", "recall", "precision"):
        assert got["metrics"][name]["value"] == pytest.approx(want[name]), name
        assert got["metrics"][name]["low"] <= want[name] <= got["metrics"][name]["high"]
    assert [b["bucket"] for b in got["buckets"]] == ["0-1023", "1023-4095", "4095+"]
    for b, (n, recall, slot) in zip(got["buckets"], want["buckets"]):
        assert (b["facts"], b["recall"]["value"], b["slot"]["value"]) == (n, pytest.approx(recall), pytest.approx(slot))
    assert got["hyp_words"] == pytest.approx((4 + 5 + 0) / 3)
    # slots by bucket: 0-1023 holds slots 0,1 | 0 | 0,1; 1023-4095 slots 2 | 1,2; 4095+ slots 3 | 3 | 2,3
    after = {"0-1023": (3 / 32 + 2 / 31) / 5, "1023-4095": (2 / 30 + 1 / 31) / 3, "4095+": (3 / 29 + 1 / 30) / 4}
    assert {k: v for k, v in got["chance"].items() if k != "slot_after_earlier_facts"} == \
        {"closed_set": 32, "slot": 1 / 32, "recall": 4 / 32}
    assert got["chance"]["slot_after_earlier_facts"] == pytest.approx(after)


def test_the_conditional_slot_chance_equals_a_simulated_guesser():
    """A guesser that knows every value before slot i and draws slot i from the values left scores,
    per bucket, what conditional_slot_chance says (within 4 standard errors of 8,000 documents)."""
    rng = np.random.default_rng(5)
    values = [f"V{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(12)]  # 12 letter-only values
    entries, hyps = [], []
    for _ in range(8000):
        order = rng.permutation(len(values))[:6]
        ends = np.sort(rng.integers(1, 9000, size=6))
        entries.append({"facts": [{"value": values[j], "token_end": int(e)} for j, e in zip(order, ends)]})
        guess = []
        for i in range(6):
            left = [v for v in values if v not in {values[j] for j in order[:i]}]  # the earlier slots known
            guess.append(left[rng.integers(len(left))])
        hyps.append(" ".join(guess))
    got = facts.score(hyps, entries, replicates=1, closed_set=len(values))
    for bucket, chance in zip(got["buckets"], facts.conditional_slot_chance(entries, facts.DEFAULT_EDGES, 12)):
        n, p = bucket["facts"], bucket["slot"]["value"]
        assert abs(p - chance) < 4 * (chance * (1 - chance) / n) ** 0.5, (bucket["bucket"], p, chance)


def test_bootstrap_interval_is_over_documents():
    # identical documents: every replicate gives the same value, the interval is a point
    got = facts.score([HYPS[0]] * 5, [ENTRIES[0]] * 5, replicates=100)
    assert got["metrics"]["slot"]["low"] == got["metrics"]["slot"]["high"] == 0.5
    # two documents, recall 1 and 0: replicates draw 0, 1 or 2 copies of the good one
    two = facts.score([HYPS[0], ""], ENTRIES[:2], replicates=2000, seed=1)
    assert two["metrics"]["recall"]["value"] == 0.5
    assert (two["metrics"]["recall"]["low"], two["metrics"]["recall"]["high"]) == (0.0, 1.0)
    # an empty bucket has no value
    one = facts.score(["Ruby"], [{"facts": [{"value": "Ruby", "token_end": 3}]}], replicates=10)
    assert [b["recall"]["value"] for b in one["buckets"]] == [1.0, None, None]


def test_runs_pool_and_resample_the_seeds():
    """A model scored over several runs (seeds): pooled counts, each run's own value, and an interval
    that resamples the runs as well as the documents."""
    one = facts.score(HYPS, ENTRIES, replicates=300, seed=4, closed_set=32)
    # two identical runs: every figure and interval is the single run's (same document draws)
    twice = facts.score_runs([HYPS, HYPS], ENTRIES, replicates=300, seed=4, closed_set=32)
    for name in ("slot", "recall", "precision"):
        for key in ("value", "low", "high"):
            assert twice["metrics"][name][key] == pytest.approx(one["metrics"][name][key]), (name, key)
    assert [b["facts"] for b in twice["buckets"]] == [5, 3, 4] and twice["runs"] == 2
    assert twice["per_run"]["recall"] == pytest.approx([7 / 12, 7 / 12])
    assert twice["bootstrap"]["unit"] == "document and run" and one["runs"] == 1
    assert one["per_run"]["slot 0-1023"] == pytest.approx([3 / 5]) and one["per_run"]["recall 4095+"] == [0.25]
    # a run that finds everything and one that finds nothing, on identical documents: documents
    # alone cannot move the pooled recall (0.5); the runs' draws (0, 1 or 2 good copies) can
    good = " ".join(f["value"] for f in ENTRIES[0]["facts"])
    split = facts.score_runs([[good] * 4, [""] * 4], [ENTRIES[0]] * 4, replicates=2000, seed=2)
    assert split["metrics"]["recall"]["value"] == 0.5
    assert (split["metrics"]["recall"]["low"], split["metrics"]["recall"]["high"]) == (0.0, 1.0)
    assert split["per_run"]["recall"] == [1.0, 0.0] and split["per_run"]["recall 4095+"] == [1.0, 0.0]
    assert split["per_run"]["recall 1023-4095"] == [1.0, 0.0]
    with pytest.raises(ConfigError, match=r"^2 hypotheses but 3 manifest entries"):
        facts.score_runs([HYPS, HYPS[:2]], ENTRIES)


def test_cli_pools_a_label_given_twice(files, tmp_path):
    manifest, hyp = files
    other = tmp_path / "hyp2.txt"
    other.write_text("\n".join(["", "", "Lilac Sepia Cyan Ochre"]) + "\n")
    log = tmp_path / "train.log"
    log.write_text(LOG)
    code, out, err = _cli("--manifest", manifest, "--hyp", f"A={hyp}", "--hyp", f"A={other}", "--hyp", f"B={hyp}",
                          "--log", f"A={log}", "--log", f"A={log}", "--out", tmp_path / "o", "--replicates", 50)
    assert code == 0, err
    rows = json.loads((tmp_path / "o" / "facts.json").read_text())["rows"]
    assert [(r["model"], r.get("runs", 1)) for r in rows] == [("A", 2), ("B", 1)]
    # A: run 1 finds 7 of 12, run 2 the 4 of d2: 11 of 24
    assert rows[0]["metrics"]["recall"]["value"] == pytest.approx(11 / 24)
    assert rows[0]["per_run"]["recall"] == pytest.approx([7 / 12, 4 / 12])
    assert "| runs (seeds) |" in out and "| A | 3 | 2 |" in out and "over documents and runs" in out
    assert (tmp_path / "o" / "facts-curves.png").read_bytes()[:4] == b"\x89PNG"
    # unlabelled files are rows of their own, even from folders of the same name (arm/test/hyp.txt)
    for arm in ("x", "y"):
        (tmp_path / arm / "test").mkdir(parents=True)
        (tmp_path / arm / "test" / "hyp.txt").write_text(hyp.read_text())
    code, out, err = _cli("--manifest", manifest, "--hyp", tmp_path / "x" / "test" / "hyp.txt",
                          "--hyp", tmp_path / "y" / "test" / "hyp.txt", "--replicates", 20)
    assert code == 0 and out.count("| test | 3 | 25.0 [") == 2 and "runs (seeds)" not in out, err
    # the same file twice for one model: refused in one line, nothing written
    code, _, err = _cli("--manifest", manifest, "--hyp", f"A={hyp}", "--hyp", f"A={hyp}", "--out", tmp_path / "p")
    assert code == 2 and err.count("\n") == 1 and f"--hyp {hyp} is given twice for A" in err
    assert not (tmp_path / "p").exists()


def test_chance_row_leaves_empty_buckets_blank():
    one = facts.score(["Ruby"], [{"facts": [{"value": "Ruby", "token_end": 3}]}], replicates=10, closed_set=32)
    last = facts.markdown([{"model": "m", **one}]).splitlines()[-1]
    assert last == "| chance (a guess from the 32 values) | | 3.1 | 3.1 | | 3.1 | - | - | 3.12 | - | - | |"


def test_words_of_a_hypothesis():
    assert facts.hypothesis_words("Amber, cobalt.Jade 12 Onyx-Ruby") == ["amber", "cobalt", "jade", "onyx", "ruby"]


def test_bad_library_input():
    with pytest.raises(ConfigError, match=r"^2 hypotheses but 3 manifest entries"):
        facts.score(HYPS[:2], ENTRIES)
    with pytest.raises(ConfigError, match=r"^bucket edges must be increasing"):
        facts.score(HYPS, ENTRIES, edges=(4095, 1023))


def _cli(*args):
    """``fairseq-longmem summarize facts ARGS`` in this process: (status, stdout, stderr)."""
    return longmem_in_process("summarize", "facts", *args)


@pytest.fixture
def files(tmp_path):
    manifest = tmp_path / "test.facts.jsonl"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in ENTRIES))
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("\n".join(HYPS) + "\n")
    return manifest, hyp


def test_cli_writes_the_table_and_json(files, tmp_path):
    manifest, hyp = files
    code, out, err = _cli("--manifest", manifest, "--hyp", f"model A={hyp}", "--out", tmp_path / "o", "--replicates", 50)
    assert code == 0, err
    assert "| model A | 3 | 25.0 [" in out and "chance (a guess from the 32 values): slot exact match 3.1, set recall 12.5" in out
    payload = json.loads((tmp_path / "o" / "facts.json").read_text())
    assert payload["rows"][0]["metrics"]["recall"]["value"] == pytest.approx(7 / 12)
    assert (tmp_path / "o" / "facts.md").read_text().splitlines()[2].startswith("| model A | 3 |")
    # the last row: the chance levels, the slot exact match per bucket conditional on the earlier slots
    assert (tmp_path / "o" / "facts.md").read_text().splitlines()[-1] == (
        "| chance (a guess from the 32 values) | | 3.1 | 12.5 | | 12.5 | 12.5 | 12.5 | 3.17 | 3.30 | 3.42 | |")
    assert (tmp_path / "o" / "facts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # an existing output is refused without --force, and left as it was
    before = (tmp_path / "o" / "facts.json").read_bytes()
    code, _, err = _cli("--manifest", manifest, "--hyp", hyp, "--out", tmp_path / "o")
    assert code == 2 and err.count("\n") == 1 and "exists (use --force to overwrite)" in err
    assert (tmp_path / "o" / "facts.json").read_bytes() == before


@pytest.mark.parametrize("case, needle", [
    ("missing manifest", "manifest {tmp}/none.jsonl not found"),
    ("missing hypotheses", "--hyp {tmp}/none.txt not found"),
    ("line counts", "has 2 lines but {tmp}/test.facts.jsonl has 3; they must be line-aligned"),
    ("no token offsets", "{tmp}/bad.jsonl:1: not a facts manifest entry with each fact's value and token_end"),
])
def test_cli_bad_input_one_line(files, tmp_path, case, needle):
    manifest, hyp = files
    args = {"missing manifest": ("--manifest", tmp_path / "none.jsonl", "--hyp", hyp),
            "missing hypotheses": ("--manifest", manifest, "--hyp", tmp_path / "none.txt")}.get(case)
    if case == "line counts":
        short = tmp_path / "short.txt"
        short.write_text("a\nb\n")
        args = ("--manifest", manifest, "--hyp", short)
    if case == "no token offsets":
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({"facts": [{"value": "Amber", "char": 3}]}) + "\n")
        args = ("--manifest", bad, "--hyp", hyp)
    code, out, err = _cli(*args, "--out", tmp_path / "o")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("fairseq-longmem summarize facts: error: ") and needle.format(tmp=tmp_path) in err, err
    assert not (tmp_path / "o").exists()


def test_bucket_edges_follow_the_windows():
    # a value ending at piece 1023 is wholly inside the transformer's 1023 source pieces
    counts = facts.document_counts("x", {"facts": [{"value": "A", "token_end": t} for t in (1023, 1024, 4095, 4096)]},
                                   facts.DEFAULT_EDGES)
    assert np.array_equal(counts["totals"][3::2], [1, 2, 1])


LOG = """2026-12-03 03:17:06 | INFO | train_inner | epoch 001:     10 / 500 loss=7.609, ppl=195.23, num_updates=10, lr=0.0007
2026-12-03 03:17:08 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 1.911 | num_updates 10
2026-12-03 03:17:11 | INFO | train_inner | epoch 001:     20 / 500 loss=6.579, nll_loss=6.5, kl=272.1, num_updates=20
"""


def test_training_curve_reads_train_inner_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    # nll_loss where logged (the ∞-former's loss adds its KL term), else loss; validation lines skipped
    assert facts.training_curve(str(log)) == [(10, 7.609), (20, 6.5)]
    (tmp_path / "empty.log").write_text("no training here\n")
    with pytest.raises(ConfigError, match="holds no fairseq-train train_inner line"):
        facts.training_curve(str(tmp_path / "empty.log"))


def test_the_loss_axis_holds_every_settled_point():
    # 10 points per run: the first fifth (2 points) may lie above the axis, every later one below it
    runs = {"a": [[(u, 12.0 if u < 20 else 4.8) for u in range(0, 100, 10)]],
            "b": [[(u, 1.0) for u in range(0, 100, 10)], [(u, 5.5 if u == 90 else 2.0) for u in range(0, 100, 10)]]}
    assert facts.loss_axis_top(runs) == pytest.approx(1.1 * 5.5)
    assert facts.loss_axis_top(runs, floor=7.0) == pytest.approx(7.7)
    assert facts.loss_axis_top({}) == pytest.approx(1.0)


def test_cli_plots_the_curves(files, tmp_path):
    manifest, hyp = files
    log = tmp_path / "train.log"
    log.write_text(LOG)
    code, _, err = _cli("--manifest", manifest, "--hyp", hyp, "--log", f"A={log}", "--out", tmp_path / "o",
                        "--replicates", 20)
    assert code == 0, err
    assert (tmp_path / "o" / "facts-curves.png").read_bytes()[:4] == b"\x89PNG"
    # a rerun without --log: refused while the curves of the earlier run are there; with --force they go
    for name in ("facts.md", "facts.json", "facts.png"):
        (tmp_path / "o" / name).unlink()
    code, _, err = _cli("--manifest", manifest, "--hyp", hyp, "--out", tmp_path / "o", "--replicates", 20)
    assert code == 2 and err.count("\n") == 1 and "facts-curves.png exists (use --force to overwrite)" in err
    code, _, err = _cli("--manifest", manifest, "--hyp", hyp, "--out", tmp_path / "o", "--replicates", 20, "--force")
    assert code == 0 and (tmp_path / "o" / "facts.md").exists() and not (tmp_path / "o" / "facts-curves.png").exists()
    code, _, err = _cli("--manifest", manifest, "--hyp", hyp, "--log", f"A={tmp_path / 'none.log'}",
                        "--out", tmp_path / "p")
    assert code == 2 and err.count("\n") == 1 and "training log" in err and not (tmp_path / "p").exists()
