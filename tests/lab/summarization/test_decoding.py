"""Summarization decoding defaults from the training targets and the distinct-hypotheses check:
the fixed MIN_LEN=80 MAX_LEN_B=300 LENPEN=2 fit ACLSum abstracts only; on a
corpus of one-sentence summaries they force every hypothesis to 80+ pieces."""
import json

import pytest

from fairseq_plugins.lab.summarization import decoding
from helpers import longmem, one_line_error


def stats(tmp_path, median, p90):
    doc = {"splits": {"train": {"target": {"spm_tokens": {"min": 3, "median": median, "mean": median,
                                                            "p90": p90, "max": p90 * 2}}}}}
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "stats.json").write_text(json.dumps(doc))
    return tmp_path


def test_short_summaries_get_short_lengths(tmp_path):
    data = stats(tmp_path, median=24, p90=40)
    values, why = decoding.choose(str(data), env={})
    assert values == {"MIN_LEN": "12", "MAX_LEN_B": "44", "LENPEN": "1.0"}
    assert int(values["MIN_LEN"]) < 24 <= int(values["MAX_LEN_B"])  # the median summary fits
    # the bin/ folder alone finds ../stats.json; the environment wins
    values, why = decoding.choose(str(data / "bin"), env={"LENPEN": "0.5"})
    assert values["LENPEN"] == "0.5" and values["MIN_LEN"] == "12" and "LENPEN from the environment" in why


def test_aclsum_like_lengths_stay_near_the_old_defaults(tmp_path):
    values, _ = decoding.choose(str(stats(tmp_path, median=172, p90=281)), env={})
    assert values == {"MIN_LEN": "86", "MAX_LEN_B": "310", "LENPEN": "2.0"}


@pytest.mark.full
def test_no_stats_keeps_the_fixed_defaults_and_the_cli_prints_shell_lines(tmp_path):
    unset = {k: "" for k in ("MIN_LEN", "MAX_LEN_B", "LENPEN")}  # an empty variable counts as unset
    proc = longmem("summarize", "decoding-lengths", tmp_path, "--prog", "generate-summaries.sh", extra_env=unset)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[:3] == ["MIN_LEN=80", "MAX_LEN_B=300", "LENPEN=2.0"]
    assert lines[3].startswith("LENGTHS_FROM=") and "no stats.json" in lines[3] and proc.stderr == ""
    (tmp_path / "stats.json").write_text("{}")
    proc = longmem("summarize", "decoding-lengths", tmp_path, "--prog", "generate-summaries.sh", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("generate-summaries.sh: error: stats.json has no")
    one_line_error(proc, prefix="generate-summaries.sh: error:")
    (tmp_path / "stats.json").write_text("{not json")
    proc = longmem("summarize", "decoding-lengths", tmp_path, check=False)
    one_line_error(proc, "is not JSON", prefix="fairseq-longmem summarize decoding-lengths: error:")
    proc = longmem("summarize", "decoding-lengths", check=False)
    one_line_error(proc, "the following arguments are required: data",
                   prefix="fairseq-longmem summarize decoding-lengths: error:")


@pytest.mark.full
def test_scoring_reports_and_warns_about_repeated_hypotheses(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("we propose a method .\n" * 3 + "another summary .\n")
    ref.write_text("".join(f"reference number {i} .\n" for i in range(4)))
    proc = longmem("summarize", "score", "--hyp", hyp, "--ref", ref, "--model", "m", "--split", "test",
                   "--out", tmp_path / "o")
    row = json.loads((tmp_path / "o" / "results.json").read_text())
    assert row["distinct_hypotheses"] == 0.5
    assert "warning" not in proc.stderr  # half distinct: no warning (the threshold is < 50%)
    hyp.write_text("we propose a method .\n" * 4)
    proc = longmem("summarize", "score", "--hyp", hyp, "--ref", ref, "--model", "m", "--split", "test",
                   "--out", tmp_path / "p")
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        "fairseq-longmem summarize score: warning: only 1 of 4 hypotheses (25%) are distinct, i.e. much the same summary "
        "for different documents; check the model and the decoding lengths"]
