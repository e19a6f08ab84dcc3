"""A rerun of data-prep/prepare-lm.sh after a failed or interrupted run redoes it without
--force (the ``OUT/.unfinished`` marker of data-prep/stages.sh, read by fairseq_plugins.lab.data.manifest.check_prepared),
while a complete output stays protected."""
import json
import shutil
from pathlib import Path

import pytest

from test_data_prep import BOOKS_TXT, assert_one_line_error, ok, pytestmark, run_prep, snapshot, txt_out  # noqa: F401


@pytest.mark.full
def test_vocab_too_large_for_the_corpus_then_the_rerun_just_works(txt_out, tmp_path):
    out = tmp_path / "out"
    args = ("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--workers", 1)
    assert_one_line_error(run_prep(*args, "--vocab-size", 50000), "Vocabulary size", "--vocab-size")
    # the converted text is there but nothing else: this script's unfinished run, redone without --force
    assert (out / "raw" / "train.txt").exists() and not (out / "prepare.json").exists()
    proc = ok(run_prep(*args, "--vocab-size", 300))
    assert "did not finish" in proc.stdout and "up to date" not in proc.stdout
    _same_output(out, txt_out[0])
    assert "up to date" in ok(run_prep(*args, "--vocab-size", 300)).stdout


def _same_output(out, reference):
    """``out`` holds what a clean run with the same options writes (manifest aside)."""
    def outputs(folder):  # logs name the folder; the manifest holds timings
        return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*")
                      if p.is_file() and p.parts[-2] != "logs" and p.suffix != ".log" and p.name != "prepare.json")

    names = outputs(reference)
    assert outputs(out) == names
    for name in set(names) - {"spm.model"}:  # spm.model records its training paths; spm.vocab is its content
        assert (Path(out) / name).read_bytes() == (Path(reference) / name).read_bytes(), name
    assert json.loads((Path(out) / "prepare.json").read_text())["options"] == \
        json.loads((Path(reference) / "prepare.json").read_text())["options"]


FAILING_PREPROCESS = "#!/bin/sh\necho 'fairseq-preprocess: out of disk space' >&2\nexit 1\n"
KILLED_PREPROCESS = "#!/bin/sh\nkill -9 $PPID\nsleep 5\n"  # the script dies mid-run, no trap runs


@pytest.mark.full
@pytest.mark.parametrize("how", ["failed", "killed"])
def test_a_rerun_after_a_failure_mid_way_rebuilds_without_force(txt_out, tmp_path, how):
    stub = tmp_path / "fairseq-preprocess"
    stub.write_text(FAILING_PREPROCESS if how == "failed" else KILLED_PREPROCESS)
    stub.chmod(0o755)
    out = tmp_path / "out"
    args = ("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 300, "--workers", 1)
    first = run_prep(*args, FAIRSEQ_PREPROCESS=str(stub))
    assert first.returncode != 0
    assert (out / "spm.model").exists() and not (out / "prepare.json").exists()
    proc = ok(run_prep(*args))
    assert "did not finish" in proc.stdout
    _same_output(out, txt_out[0])


@pytest.mark.full
def test_a_failed_force_rebuild_is_redone_but_a_complete_output_stays_protected(txt_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(txt_out[0], out)
    args = ("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--workers", 1)
    before = snapshot(out)
    # a complete output: other options are refused, a failure before anything was replaced keeps it whole
    assert_one_line_error(run_prep(*args, "--vocab-size", 250), "vocab_size=300", "--force")
    assert snapshot(out) == before
    bad = tmp_path / "bad"
    bad.mkdir()
    failed = run_prep("--corpus", "txt", "--input", bad, "--out", out, "--workers", 1, "--vocab-size", 250, "--force")
    assert failed.returncode != 0 and "no .txt documents" in failed.stderr  # in convert, before the old output is dropped
    assert snapshot(out) == before
    assert "up to date" in ok(run_prep(*args, "--vocab-size", 300)).stdout
    # a --force rebuild that fails mid-way has dropped the old output: the next run redoes it
    assert run_prep(*args, "--vocab-size", 50000, "--force").returncode != 0
    assert not (out / "prepare.json").exists()
    assert "did not finish" in ok(run_prep(*args, "--vocab-size", 300)).stdout
    _same_output(out, txt_out[0])
