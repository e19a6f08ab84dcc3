"""Bad options and bad data through fairseq-train: one line naming the problem
and the fix (``fairseq_plugins: error: ...``), no traceback, nothing written."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "data"
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"]}
    subprocess.run(["bash", "data-prep/prepare-lm.sh", "--corpus", "txt", "--input", "tests/fixtures/books_txt",
                    "--out", str(out), "--vocab-size", "300", "--workers", "1"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    return out / "bin"


def train(data_dir, save_dir, *extra):
    args = [os.path.join(BIN, "fairseq-train"), str(data_dir), "--user-dir", os.path.join(ROOT, "fairseq_plugins"),
            "--task", "streaming_lm", "--arch", "infinite_former_lm", "--criterion", "infinite_former_kl",
            "--tokens-per-sample", "16", "--batch-size", "2", "--optimizer", "adam", "--lr", "1e-3",
            "--max-update", "1", "--cpu", "--save-dir", str(save_dir), "--num-basis-functions", "16",
            "--num-samples", "16", *extra]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def assert_one_line_error(proc, *needles):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fairseq_plugins: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0]


@pytest.mark.parametrize("extra,needles", [
    (["--decoder-attention-heads", "5"], ["--decoder-attention-heads", "divide"]),
    (["--tau", "1.5"], ["--tau", "between 0 and 1"]),
    (["--num-basis-functions", "0"], ["--num-basis-functions"]),
    (["--num-samples", "0"], ["--num-samples"]),
    (["--kl-weight", "-1"], ["--kl-weight"]),
])
def test_inconsistent_options(data, tmp_path, extra, needles):
    proc = train(data, tmp_path / "ckpt", *extra)
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_missing_data_directory(tmp_path):
    proc = train(tmp_path / "nowhere", tmp_path / "ckpt")
    assert_one_line_error(proc, "does not exist", "prepare-lm.sh")


def test_empty_data_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = train(tmp_path / "empty", tmp_path / "ckpt")
    assert_one_line_error(proc, "dict.txt")


def test_missing_split(data, tmp_path):
    proc = train(data, tmp_path / "ckpt", "--valid-subset", "dev")
    assert_one_line_error(proc, "'dev'", "--valid-subset")
