"""Corpus layouts of data-prep/prepare-lm.sh beyond one-document-per-file (issue 13):
split files (train.txt / valid.txt / test.txt and the like), the paragraph convention of the
.txt reader (--paragraphs), and the file names the WikiText reader accepts.

Most checks call the helper's ``convert`` (no sentencepiece / fairseq run); the refusals are
also run through the pipeline, which must not leave anything behind.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "data-prep" / "prepare-lm.sh"
DOCS_HELPER = REPO / "data-prep" / "lm_documents.py"
FIX = Path(__file__).resolve().parent / "fixtures"
BOOKS_TXT = FIX / "books_txt"
SPLITS = ("train", "valid", "test")
BIN_DIR = Path(sys.executable).parent


def convert(*args):
    return subprocess.run([sys.executable, str(DOCS_HELPER), "convert", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def run_prep(*args):
    env = dict(os.environ, PATH=f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}", PYTHON=sys.executable)
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def documents(raw):
    rows = [line.split("\t") for line in (Path(raw) / "documents.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    return {s: [r[1] for r in rows if r[0] == s] for s in SPLITS}


def one_error_line(proc, prog="prepare-lm.sh"):
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def make_folder(path, files):
    """files: {name: fixture book whose text it gets}"""
    path.mkdir(parents=True)
    for name, book in files.items():
        shutil.copy(BOOKS_TXT / book, path / name)
    return path


# --------------------------------------------------------------------------- split files (issue 13 item 1)

SPLIT_BOOKS = {"train": "austen-emma.txt", "valid": "blake-poems.txt", "test": "carroll-alice.txt"}


@pytest.mark.parametrize("names", [
    ("train.txt", "valid.txt", "test.txt"),
    ("train.txt", "val.txt", "test.txt"),
    ("train.raw", "valid.raw", "test.raw"),
    ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"),
])
def test_split_files_are_the_splits(tmp_path, names):
    inp = make_folder(tmp_path / "in", {n: SPLIT_BOOKS[s] for n, s in zip(names, SPLITS)})
    out = tmp_path / "raw"
    proc = convert("--corpus", "txt", "--input", inp, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert documents(out) == {s: [n] for s, n in zip(SPLITS, names)}
    # each file's text as the PG-19 layout (tested in test_data_prep.py) writes it, in its own split
    pg19 = tmp_path / "pg19"
    for split in SPLITS:
        make_folder(pg19 / split, {"book.txt": SPLIT_BOOKS[split]})
    assert convert("--corpus", "txt", "--input", pg19, "--out", tmp_path / "pg19raw").returncode == 0
    for split in SPLITS:
        assert (out / f"{split}.txt").read_bytes() == (tmp_path / "pg19raw" / f"{split}.txt").read_bytes()
    notes = [l for l in proc.stderr.splitlines() if l.startswith("prepare-lm.sh: note: ")]
    assert len(notes) == 1 and all(n in notes[0] for n in names), proc.stderr
    assert "documents (given split): train 1, valid 1, test 1" in proc.stdout


@pytest.mark.parametrize("files, needles", [
    ({"train.txt": "austen-emma.txt", "test.txt": "carroll-alice.txt", "a.txt": "blake-poems.txt"},
     ["train.txt", "test.txt", "valid"]),
    ({"train.txt": "austen-emma.txt", "valid.txt": "blake-poems.txt", "val.txt": "blake-poems.txt",
      "test.txt": "carroll-alice.txt"}, ["valid.txt", "val.txt"]),
    ({"train.txt": "austen-emma.txt", "valid.txt": "blake-poems.txt", "test.txt": "carroll-alice.txt",
      "whitman-leaves.txt": "whitman-leaves.txt"}, ["whitman-leaves.txt"]),
    ({"train.txt": "austen-emma.txt", "train.raw": "austen-emma.txt", "valid.txt": "blake-poems.txt",
      "test.txt": "carroll-alice.txt"}, ["train.txt", "train.raw"]),
])
def test_ambiguous_split_files_are_refused(tmp_path, files, needles):
    inp = make_folder(tmp_path / "in", files)
    line = one_error_line(convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw"))
    for n in needles:
        assert n in line, (n, line)
    assert "subfolders" in line or "rename" in line or "keep one" in line, line  # names the fix
    out = tmp_path / "out"
    proc = run_prep("--corpus", "txt", "--input", inp, "--out", out, "--vocab-size", 100, "--workers", 1)
    assert one_error_line(proc) == line
    assert not out.exists(), "a refused layout must not leave anything behind"


def test_names_that_merely_contain_a_split_word_are_documents(tmp_path):
    names = ["contest.txt", "latest.txt", "training-manual.txt", "austen-emma.txt"]
    inp = make_folder(tmp_path / "in", dict(zip(names, ["austen-emma.txt", "blake-poems.txt",
                                                         "carroll-alice.txt", "whitman-leaves.txt"])))
    out = tmp_path / "raw"
    proc = convert("--corpus", "txt", "--input", inp, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "documents (md5(name) split)" in proc.stdout and "note" not in proc.stderr
    assert sorted(n for v in documents(out).values() for n in v) == sorted(names)
