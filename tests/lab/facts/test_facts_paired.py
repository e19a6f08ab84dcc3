"""Paired differences of the scores per fact, a model against its memory-wiped control
(fairseq_plugins/lab/facts/paired.py): values by hand, intervals against a naive
bootstrap loop over explicitly drawn (run, document) pairs, and the CLI's second table."""
import json

import numpy as np
import pytest

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.facts import paired as facts_paired
from helpers import longmem_in_process
from test_facts_score import ENTRIES, HYPS

# a control that finds only Amber (d0's first fact, bucket 0-1023, slot 0), and one that finds nothing
CONTROL = ["Amber", "", ""]
EMPTY = ["", "", ""]


def test_identical_sides_differ_by_exactly_zero():
    got = facts_paired.paired_difference([HYPS, CONTROL], [HYPS, CONTROL], ENTRIES, replicates=200, seed=4)
    assert got["runs"] == 2
    for name, m in got["metrics"].items():
        assert (m["value"], m["low"], m["high"]) == (0.0, 0.0, 0.0), name


def _naive(runs, control, replicates, seed):
    """Pooled set recall of ``runs`` minus ``control`` per replicate, from explicitly drawn runs and
    documents (the draws of fairseq_plugins.lab.common.bootstrap.resample_weights, seeds as
    paired_difference), by counting the facts found on each drawn (run, document) pair."""
    d, s = len(ENTRIES), len(runs)
    doc_draws = np.random.default_rng(seed).integers(0, d, size=(replicates, d))
    run_draws = np.random.default_rng(seed + 1).integers(0, s, size=(replicates, s))

    def found(hyp, entry):
        words = {w.casefold() for w in hyp.replace(",", " ").replace(".", " ").split()}
        return sum(f["value"].casefold() in words for f in entry["facts"]), len(entry["facts"])

    diffs = []
    for r in range(replicates):
        side = []
        for hyps in (runs, control):
            hits = total = 0
            for run in run_draws[r]:
                for doc in doc_draws[r]:
                    h, n = found(hyps[run][doc], ENTRIES[doc])
                    hits, total = hits + h, total + n
            side.append(hits / total)
        diffs.append(side[0] - side[1])
    return np.percentile(diffs, [2.5, 97.5])


def test_difference_equals_the_hand_counts_and_a_naive_paired_bootstrap():
    runs, control = [HYPS, EMPTY], [CONTROL, CONTROL]
    got = facts_paired.paired_difference(runs, control, ENTRIES, replicates=300, seed=7)
    # recall: runs find 7 + 0 of 24, the control 1 + 1 of 24; slot 3 + 0 against 1 + 1
    assert got["metrics"]["recall"]["value"] == pytest.approx(7 / 24 - 2 / 24)
    assert got["metrics"]["slot"]["value"] == pytest.approx(3 / 24 - 2 / 24)
    # 0-1023 (5 facts a run): runs find Amber Cobalt Ruby (3 of 10), the control Amber twice (2 of 10)
    assert got["metrics"]["recall 0-1023"]["value"] == pytest.approx(3 / 10 - 2 / 10)
    assert got["metrics"]["recall 4095+"]["value"] == pytest.approx(1 / 8 - 0)
    low, high = _naive(runs, control, 300, 7)
    assert (got["metrics"]["recall"]["low"], got["metrics"]["recall"]["high"]) == (pytest.approx(low),
                                                                                  pytest.approx(high))


def test_a_side_with_other_runs_is_refused():
    with pytest.raises(ConfigError, match="as many runs of the model as of its control, not 2 and 1"):
        facts_paired.paired_difference([HYPS, HYPS], [CONTROL], ENTRIES)


def test_wiped_pairs_follow_the_labels():
    assert facts_paired.wiped_pairs(["a", "b wiped", "a wiped", "c", "a  Wiped", "unwiped"]) == (
        [("a", "a wiped")], ["b wiped", "a  Wiped"])


def test_cli_adds_the_paired_table_for_a_wiped_control(tmp_path):
    manifest = tmp_path / "test.facts.jsonl"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in ENTRIES))
    hyp, wiped = tmp_path / "hyp.txt", tmp_path / "wiped.txt"
    hyp.write_text("\n".join(HYPS) + "\n")
    wiped.write_text("\n".join(CONTROL) + "\n")
    code, out, err = longmem_in_process("summarize", "facts", "--manifest", manifest, "--hyp", f"m={hyp}",
                                        "--hyp", f"m wiped={wiped}", "--out", tmp_path / "o", "--replicates", 50)
    assert code == 0, err
    saved = json.loads((tmp_path / "o" / "facts.json").read_text())
    (difference,) = saved["differences"]
    assert (difference["model"], difference["control"], difference["runs"]) == ("m", "m wiped", 1)
    assert difference["metrics"]["recall"]["value"] == pytest.approx(7 / 12 - 1 / 12)
    table = (tmp_path / "o" / "facts.md").read_text()
    assert "Paired differences, model − its memory-wiped control" in table and "| m − m wiped | 1 | +16.7 [" in table
    assert "| m − m wiped | 1 |" in out
    code, out, err = longmem_in_process("summarize", "facts", "--manifest", manifest, "--hyp", f"m={hyp}",
                                        "--hyp", f"other={wiped}", "--out", tmp_path / "p", "--replicates", 50)
    assert code == 0 and "Paired differences" not in out, err
    assert json.loads((tmp_path / "p" / "facts.json").read_text())["differences"] == []
    # a control whose label does not pair (another spacing or case): one warning, no difference
    code, out, err = longmem_in_process("summarize", "facts", "--manifest", manifest, "--hyp", f"m={hyp}",
                                        "--hyp", f"m  Wiped={wiped}", "--replicates", 20)
    assert code == 0 and "Paired differences" not in out and err.count("\n") == 1, err
    assert "'m  Wiped' looks like a memory-wiped control but is not 'MODEL wiped'" in err
    # unlabelled files are never paired; an empty label is refused in one line
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "hyp.txt").write_text(hyp.read_text())
    code, out, err = longmem_in_process("summarize", "facts", "--manifest", manifest, "--hyp", tmp_path / "m" / "hyp.txt",
                                        "--hyp", f"m wiped={wiped}", "--replicates", 20)
    assert code == 0 and "Paired differences" not in out, err
    code, out, err = longmem_in_process("summarize", "facts", "--manifest", manifest, "--hyp", f"={hyp}",
                                        "--out", tmp_path / "q")
    assert code == 2 and err.count("\n") == 1 and "the LABEL before '=' is empty" in err and not (tmp_path / "q").exists()


def test_a_few_replicates_plot_without_error(tmp_path):
    """With very few replicates a percentile interval may leave the pooled value outside it: the
    plot draws no negative error bar, and the run writes its files."""
    manifest = tmp_path / "test.facts.jsonl"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in ENTRIES))
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("\n".join(HYPS) + "\n")
    for replicates in (1, 2):
        code, _, err = longmem_in_process("summarize", "facts", "--manifest", manifest, "--hyp", f"m={hyp}",
                                          "--out", tmp_path / f"o{replicates}", "--replicates", replicates)
        assert code == 0, err
        assert (tmp_path / f"o{replicates}" / "facts.png").read_bytes()[:4] == b"\x89PNG"
