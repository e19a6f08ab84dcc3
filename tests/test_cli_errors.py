"""Bad options and bad data through fairseq-train: one line naming the problem
and the fix (``fairseq_plugins: error: ...``), no traceback, nothing written."""

import os
import shutil
import subprocess

import pytest

from helpers import fairseq, one_line_error


@pytest.fixture(scope="module")
def data(tmp_path_factory, books_bin):
    out = tmp_path_factory.mktemp("cli") / "data"
    shutil.copytree(books_bin.parent, str(out))  # data-prep's output, prepared once
    return out / "bin"


def train(data_dir, save_dir, *extra):
    """fairseq-train of a tiny infinite_former_lm for one update (``helpers.fairseq``, unchecked)."""
    return fairseq("fairseq-train", data_dir, "--task", "streaming_lm", "--arch", "infinite_former_lm",
                   "--criterion", "infinite_former_kl", "--tokens-per-sample", "16", "--batch-size", "2",
                   "--optimizer", "adam", "--lr", "1e-3", "--max-update", "1", "--save-dir", save_dir,
                   "--num-basis-functions", "16", "--num-samples", "16", *extra, check=False)


@pytest.mark.full
@pytest.mark.parametrize("extra,needles", [
    (["--decoder-attention-heads", "5"], ["--decoder-attention-heads", "divide"]),
    (["--tau", "1.5"], ["--tau", "between 0 and 1"]),
    (["--num-basis-functions", "0"], ["--num-basis-functions"]),
    (["--num-samples", "0"], ["--num-samples"]),
    (["--kl-weight", "-1"], ["--kl-weight"]),
])
def test_inconsistent_options(data, tmp_path, extra, needles):
    proc = train(data, tmp_path / "ckpt", *extra)
    one_line_error(proc, *needles)
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


@pytest.mark.full
def test_missing_data_directory(tmp_path):
    proc = train(tmp_path / "nowhere", tmp_path / "ckpt")
    one_line_error(proc, "does not exist", "prepare-lm.sh")


@pytest.mark.full
def test_empty_data_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = train(tmp_path / "empty", tmp_path / "ckpt")
    one_line_error(proc, "dict.txt")


@pytest.mark.full
def test_missing_split(data, tmp_path):
    proc = train(data, tmp_path / "ckpt", "--valid-subset", "dev")
    one_line_error(proc, "'dev'", "--valid-subset")


def _swap_two_entries(src, dst):
    """A copy of the data folder whose dict.txt has the same size but two
    entries swapped (so token ids would silently mean other words)."""
    shutil.copytree(src, dst)
    lines = (dst / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (dst / "dict.txt").write_text("".join(lines), encoding="utf-8")
    return dst


@pytest.mark.full
def test_same_size_other_dictionary_is_refused_on_resume_and_evaluation(data, tmp_path):
    save = tmp_path / "ckpt"
    first = train(data, save)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = save / "checkpoint_last.pt"
    before = checkpoint.read_bytes()
    other = _swap_two_entries(data, tmp_path / "other_bin")

    resumed = train(other, save, "--max-update", "2")
    one_line_error(resumed, "different dictionary")
    assert checkpoint.read_bytes() == before

    evaluated = fairseq("fairseq-eval-lm", other, "--task", "streaming_lm", "--path", checkpoint,
                        "--tokens-per-sample", "16", "--batch-size", "2", check=False)
    one_line_error(evaluated, "different dictionary")

    same = train(data, save, "--max-update", "2")  # the right dictionary still resumes
    assert same.returncode == 0, same.stderr[-3000:]


@pytest.mark.full
def test_missing_batch_size_is_one_line(data, tmp_path):
    proc = fairseq("fairseq-train", data, "--task", "streaming_lm", "--arch", "infinite_former_lm",
                   "--tokens-per-sample", "16", "--optimizer", "adam", "--lr", "1e-3", "--max-update", "1",
                   "--save-dir", tmp_path / "c", check=False)
    one_line_error(proc, "--batch-size", "parallel streams")


@pytest.mark.full
def test_prepare_output_folder_instead_of_its_bin_points_to_bin(data, tmp_path):
    proc = train(data.parent, tmp_path / "ckpt")  # data-prep's OUT: holds dict.txt too, but no .bin/.idx
    one_line_error(proc, os.path.join(str(data.parent), "bin"))
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def _train_merged(data_dir, save_dir, *extra):
    """fairseq-train (the default criterion) with stderr merged into stdout, as a terminal or
    ``2>&1 | tee log`` shows it."""
    return fairseq("fairseq-train", data_dir, "--task", "streaming_lm", "--arch", "infinite_former_lm",
                   "--tokens-per-sample", "16", "--batch-size", "2", "--optimizer", "adam", "--lr", "1e-3",
                   "--max-update", "1", "--save-dir", save_dir, *extra, check=False, merged=True)


@pytest.mark.full
@pytest.mark.parametrize("case", ["bad option", "missing data"])
def test_refused_run_ends_with_its_error_line_and_creates_no_save_directory(data, tmp_path, case):
    new = tmp_path / "new" / "ckpt"  # neither folder exists: fairseq-train would create both
    if case == "bad option":
        proc = _train_merged(data, new, "--tau", "1.5")
    else:
        proc = _train_merged(tmp_path / "nowhere", new)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode != 0
    assert lines[-1].startswith("fairseq_plugins: error:"), proc.stdout[-2000:]
    assert not (tmp_path / "new").exists()


@pytest.mark.full
def test_refused_run_leaves_existing_save_directories_alone(data, tmp_path):
    kept, empty = tmp_path / "kept", tmp_path / "empty"
    kept.mkdir()
    empty.mkdir()
    (kept / "checkpoint_last.pt").write_bytes(b"not touched")
    # the file it would resume from is read before fairseq starts, the options after
    for folder, needle in ((kept, "cannot read checkpoint"), (empty, "--tau")):
        proc = train(data, folder, "--tau", "1.5")
        one_line_error(proc, needle)
    assert empty.is_dir() and not any(empty.iterdir())
    assert sorted(p.name for p in kept.iterdir()) == ["checkpoint_last.pt"]
    assert (kept / "checkpoint_last.pt").read_bytes() == b"not touched"


# ---- a truncated checkpoint: the fix depends on the tool that is running -------------------------

@pytest.fixture(scope="module")
def whole_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("whole")
    proc = train(data, save, "--no-epoch-checkpoints")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save / "checkpoint_last.pt"


READ_ARGS = {
    "fairseq-eval-lm": ["--task", "streaming_lm", "--tokens-per-sample", "16", "--batch-size", "2"],
    "fairseq-generate": ["--task", "language_modeling", "--beam", "1", "--max-len-b", "2", "--batch-size", "2"],
    "fairseq-interactive": ["--task", "language_modeling", "--beam", "1", "--max-len-b", "2"],
}


@pytest.mark.full
@pytest.mark.parametrize("others", [False, True])
@pytest.mark.parametrize("tool", sorted(READ_ARGS))
def test_truncated_checkpoint_under_a_reading_tool_gives_its_fix(data, whole_checkpoint, tmp_path, tool, others):
    blob = whole_checkpoint.read_bytes()
    (tmp_path / "checkpoint_last.pt").write_bytes(blob[:len(blob) // 2])
    if others:
        (tmp_path / "checkpoint_best.pt").write_bytes(blob)
    proc = fairseq(tool, data, "--path", tmp_path / "checkpoint_last.pt", *READ_ARGS[tool], check=False,
                   stdin=subprocess.DEVNULL)
    one_line_error(proc, f"cannot read checkpoint {tmp_path / 'checkpoint_last.pt'}", "truncated or corrupt",
                          "--path")
    line = next(x for x in proc.stderr.splitlines() if x.startswith("fairseq_plugins: error:"))
    for training_advice in ("--restore-file", "train from scratch", "resume", "fairseq-train"):
        assert training_advice not in line, line
    if others:
        assert f"--path {tmp_path / 'checkpoint_best.pt'}" in line, line
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == blob[:len(blob) // 2]


@pytest.mark.full
@pytest.mark.parametrize("others", [False, True])
def test_truncated_checkpoint_under_fairseq_train_names_the_resume_fix(data, whole_checkpoint, tmp_path, others):
    blob = whole_checkpoint.read_bytes()
    (tmp_path / "checkpoint_last.pt").write_bytes(blob[:len(blob) // 2])
    if others:
        (tmp_path / "checkpoint_best.pt").write_bytes(blob)
    proc = train(data, tmp_path, "--max-update", "2")
    one_line_error(proc, "truncated or corrupt", "train from scratch")
    line = next(x for x in proc.stderr.splitlines() if x.startswith("fairseq_plugins: error:"))
    assert ("--path" in line) is False, line
    if others:
        assert f"--restore-file {tmp_path / 'checkpoint_best.pt'}" in line, line


def test_the_checkpoints_suggested_instead_of_a_corrupt_one_are_those_that_load(tmp_path):
    import torch

    from fairseq_plugins.compat.checkpoint_files import unreadable_message

    torch.save({"model": {"w": torch.zeros(2)}, "cfg": {"model": {}}, "optimizer_history": [], "extra_state": {}},
               tmp_path / "checkpoint3.pt")
    blob = (tmp_path / "checkpoint3.pt").read_bytes()
    (tmp_path / "checkpoint_last.pt").write_bytes(blob[:len(blob) // 2])
    (tmp_path / "checkpoint2.pt").write_bytes(blob[:100])  # another truncated one
    torch.save(torch.zeros(3), tmp_path / "embeddings.pt")  # loads, but holds no model
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    line = unreadable_message(str(tmp_path / "checkpoint_last.pt"), RuntimeError("truncated"), "eval_lm")
    assert f"that load: checkpoint3.pt; use another one with --path {tmp_path / 'checkpoint3.pt'}" in line, line
    (tmp_path / "checkpoint3.pt").unlink()
    line = unreadable_message(str(tmp_path / "checkpoint_last.pt"), RuntimeError("truncated"), "eval_lm")
    assert "no other checkpoint in" in line and "embeddings.pt" not in line and "checkpoint2.pt" not in line, line
