"""Corpus layouts of data-prep/prepare-lm.sh beyond one-document-per-file:
split files (train.txt / valid.txt / test.txt and the like), the paragraph convention of the
.txt reader (--paragraphs), and the file names the WikiText reader accepts.

Most checks call the helper's ``convert`` (no sentencepiece / fairseq run); the refusals are
also run through the pipeline, which must not leave anything behind.
"""
import shutil
from pathlib import Path

import pytest

from helpers import data_prep
from prep_command import message, prep

FIX = Path(__file__).resolve().parents[2] / "fixtures"
BOOKS_TXT = FIX / "books_txt"
SPLITS = ("train", "valid", "test")


def convert(*args):
    return prep("lm", "convert", *args)


def run_prep(*args):
    """``bash data-prep/prepare-lm.sh ARGS`` (``helpers.data_prep``)."""
    return data_prep("prepare-lm.sh", *args)


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


# --------------------------------------------------------------------------- split files

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


@pytest.mark.full
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
    line = one_error_line(convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw"), "fairseq-longmem prep lm")
    for n in needles:
        assert n in line, (n, line)
    assert "subfolders" in line or "rename" in line or "keep one" in line, line  # names the fix
    out = tmp_path / "out"
    proc = run_prep("--corpus", "txt", "--input", inp, "--out", out, "--vocab-size", 100, "--workers", 1)
    assert message(one_error_line(proc)) == message(line)
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


# --------------------------------------------------------------------------- paragraph convention

ONE_PER_LINE = "Heading One\nFirst paragraph, one line.\nSecond paragraph.\n\nHeading Two\nThird.\n"


def _three_docs(folder, text):
    folder.mkdir(parents=True)
    for n in ("a.txt", "b.txt", "c.txt"):
        (folder / n).write_text(text, encoding="utf-8")
    return folder


def _first_document(raw):
    return (Path(raw) / "train.txt").read_text(encoding="utf-8").split("\n\n")[0].rstrip("\n").split("\n")


def test_paragraphs_blank_line_is_the_default_and_line_keeps_each_line(tmp_path):
    inp = _three_docs(tmp_path / "in", ONE_PER_LINE)
    default = convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "d")
    assert default.returncode == 0, default.stderr
    assert _first_document(tmp_path / "d") == ["Heading One First paragraph, one line. Second paragraph.",
                                               "Heading Two Third."]
    blank = convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "b", "--paragraphs", "blank-line")
    assert blank.returncode == 0 and (tmp_path / "b" / "train.txt").read_bytes() == (tmp_path / "d" / "train.txt").read_bytes()
    line = convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "l", "--paragraphs", "line")
    assert line.returncode == 0, line.stderr
    assert _first_document(tmp_path / "l") == ["Heading One", "First paragraph, one line.", "Second paragraph.",
                                               "Heading Two", "Third."]


@pytest.mark.full
def test_paragraphs_option_of_the_pipeline(tmp_path):
    out = tmp_path / "out"
    args = ("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 300, "--workers", 1)
    proc = run_prep(*args, "--paragraphs", "line")
    assert proc.returncode == 0, proc.stderr
    import json
    assert json.loads((out / "prepare.json").read_text())["options"]["paragraphs"] == "line"
    lines = (out / "raw" / "train.txt").read_text(encoding="utf-8").split("\n")
    # Gutenberg's hard-wrapped lines stay lines: far more, and shorter, than with blank-line
    assert convert("--corpus", "txt", "--input", BOOKS_TXT, "--out", tmp_path / "blank").returncode == 0
    blank = (tmp_path / "blank" / "train.txt").read_text(encoding="utf-8").split("\n")
    assert len(lines) > 3 * len(blank) and max(map(len, lines)) < 100 < max(map(len, blank))
    assert "up to date" in run_prep(*args, "--paragraphs", "line").stdout
    assert "paragraphs" in one_error_line(run_prep(*args))  # the default is another option: refused
    bad = tmp_path / "bad"
    assert "--paragraphs" in one_error_line(run_prep("--corpus", "txt", "--input", BOOKS_TXT, "--out", bad,
                                                     "--paragraphs", "lines"))
    assert "--paragraphs" in one_error_line(run_prep("--corpus", "wikitext103", "--input", FIX / "wikitext103",
                                                     "--out", bad, "--paragraphs", "line"))
    assert not bad.exists()
    helped = run_prep("--help").stdout
    assert "--paragraphs blank-line|line" in helped and "[default]" in helped.split("--paragraphs blank-line|line")[1][:300]


# --------------------------------------------------------------------------- WikiText file names


@pytest.mark.full
def test_wikitext_tokens_names_and_the_error_says_which_names(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for s in SPLITS:
        shutil.copy(FIX / "wikitext103" / f"wiki.{s}.raw", tokens / f"wiki.{s}.tokens")
    a = convert("--corpus", "wikitext103", "--input", FIX / "wikitext103", "--out", tmp_path / "a")
    b = convert("--corpus", "wikitext103", "--input", tokens, "--out", tmp_path / "b")
    assert a.returncode == 0 and b.returncode == 0, b.stderr
    for f in ("train.txt", "valid.txt", "test.txt", "documents.tsv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    line = one_error_line(convert("--corpus", "wikitext103", "--input", BOOKS_TXT, "--out", tmp_path / "c"),
                          "fairseq-longmem prep lm")
    for n in ("wiki.train.raw", "wiki.valid.raw", "wiki.test.raw", ".tokens"):
        assert n in line, (n, line)
    assert ".tokens" in run_prep("--help").stdout.split("--corpus wikitext103")[1][:400]


# --------------------------------------------------------------------------- files that are not text


def test_text_and_binary_bytes_are_told_apart():
    from fairseq_plugins.lab.data.text import looks_binary

    for book in BOOKS_TXT.iterdir():  # UTF-8 and Latin-1 books are text
        assert not looks_binary(book.read_bytes()), book
    assert not looks_binary("tab\tform\ffeed\r\n é ü".encode("latin-1"))
    assert looks_binary(b"text\0more text")
    assert looks_binary(bytes(range(1, 9)) * 100 + b"a few letters")  # controls, no NUL
    assert not looks_binary(b"")


@pytest.mark.full
@pytest.mark.parametrize("binary", [b"\x7fELF\x02\x01\x01\0" + bytes(range(256)) * 20,
                                    bytes(range(1, 32)) * 200])
def test_a_binary_file_among_the_documents_is_refused_naming_it(tmp_path, binary):
    inp = make_folder(tmp_path / "in", {"a.txt": "austen-emma.txt", "b.txt": "blake-poems.txt"})
    (inp / "zz-binary.txt").write_bytes(binary)
    line = one_error_line(convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw"),
                          "fairseq-longmem prep lm")
    assert "zz-binary.txt is not a text file" in line and "remove it" in line, line
    out = tmp_path / "out"
    proc = run_prep("--corpus", "txt", "--input", inp, "--out", out, "--vocab-size", 100, "--workers", 1)
    assert message(one_error_line(proc)) == message(line)
    assert not out.exists(), "a refused input must not leave anything behind"


# --------------------------------------------------------------------------- encodings and special files

STRAY = "Café au lait, naïve déjà vu.\n\nA second paragraph.\n".encode("utf-8") + b"One stray \xe9 byte.\n"


def test_a_stray_byte_in_a_utf8_document_is_one_line_naming_its_offset(tmp_path):
    """A UTF-8 document with one byte that is not UTF-8 used to be decoded whole as Latin-1 (every
    accented letter mojibake, silently): one line naming the file, the byte's offset and the fix.
    A legacy Latin-1 book (no UTF-8 character in it) is still read, as Latin-1."""
    inp = make_folder(tmp_path / "in", {"a.txt": "austen-emma.txt", "caesar.txt": "shakespeare-caesar.txt"})
    (inp / "b.txt").write_bytes(STRAY)
    offset = STRAY.index(b"\xe9 byte")
    line = one_error_line(convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw"),
                          "fairseq-longmem prep lm")
    assert line == (f"fairseq-longmem prep lm: error: {inp / 'b.txt'}: byte 0xe9 at offset {offset} (line 4) is not "
                    "UTF-8; fix or remove it (e.g. iconv -f utf-8 -t utf-8 -c drops every such byte), or convert a "
                    "file of another encoding to UTF-8 (iconv -f ENCODING -t utf-8)"), line
    (inp / "b.txt").write_bytes(STRAY.replace(b"\xe9 byte", b"byte"))
    proc = convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw")
    assert proc.returncode == 0, proc.stderr
    text = "".join((tmp_path / "raw" / f"{s}.txt").read_text(encoding="utf-8") for s in SPLITS)
    assert "Café au lait, naïve déjà vu." in text and "CafÃ" not in text
    assert "Cæsar" in text  # the Latin-1 folio text


@pytest.mark.full
def test_a_stray_byte_through_the_pipeline_writes_nothing(tmp_path):
    inp = make_folder(tmp_path / "in", {"a.txt": "austen-emma.txt", "c.txt": "carroll-alice.txt"})
    (inp / "b.txt").write_bytes(STRAY)
    out = tmp_path / "out"
    proc = run_prep("--corpus", "txt", "--input", inp, "--out", out, "--vocab-size", 100, "--workers", 1)
    line = one_error_line(proc)
    offset = STRAY.index(b"\xe9 byte")
    assert f"{inp / 'b.txt'}: byte 0xe9 at offset {offset} (line 4) is not UTF-8" in line, line
    assert not out.exists(), "a refused input must not leave anything behind"


def test_readers_decode_strictly_naming_file_and_offset(tmp_path):
    """WikiText (read line by line) and the strict line reader of the summarization and facts corpora
    name the byte's offset too; WikiText's used to replace the byte silently."""
    from fairseq_plugins.errors import ConfigError
    from fairseq_plugins.lab.data.readers.wikitext import iter_articles
    from fairseq_plugins.lab.data.text import read_lines

    wiki = tmp_path / "wiki.train.raw"
    raw = b" = Title = \n\n Caf\xc3\xa9 text . \n More \xff text . \n"
    wiki.write_bytes(raw)
    with pytest.raises(ConfigError) as e:
        list(iter_articles(str(wiki)))
    at = raw.index(b"\xff")
    assert str(e.value).startswith(f"{wiki}: byte 0xff at offset {at} (line 4) is not UTF-8; fix or remove it")
    lines = tmp_path / "train.source"
    lines.write_bytes("première ligne\n".encode("utf-8") + b"seconde \xe8 ligne\n")
    with pytest.raises(ConfigError, match=rf"^{lines}: byte 0xe8 at offset 24 \(line 2\) is not UTF-8; "):
        read_lines(str(lines))


def test_only_regular_files_are_documents(tmp_path):
    """A FIFO named like a document used to hang prepare-lm.sh --corpus txt forever (reading it waits
    for a writer): only regular files (and links to one) are documents."""
    import os

    from fairseq_plugins.lab.data.readers.txt_folder import _txt_files

    inp = make_folder(tmp_path / "in", {"a.txt": "austen-emma.txt"})
    os.mkfifo(inp / "pipe.txt")
    os.symlink(inp / "a.txt", inp / "link.txt")
    assert [os.path.basename(p) for p in _txt_files(str(inp))] == ["a.txt", "link.txt"]


@pytest.mark.full
def test_a_fifo_in_the_input_folder_does_not_hang_the_pipeline(tmp_path):
    """The whole pipeline passes a FIFO over (it used to wait forever for a writer)."""
    import os

    inp = make_folder(tmp_path / "in", {"a.txt": "austen-emma.txt", "b.txt": "blake-poems.txt",
                                        "c.txt": "carroll-alice.txt"})
    os.mkfifo(inp / "pipe.txt")
    out = tmp_path / "out"
    proc = run_prep("--corpus", "txt", "--input", inp, "--out", out, "--vocab-size", 100, "--workers", 1)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(documents(out / "raw")["train"] + documents(out / "raw")["valid"] +
                  documents(out / "raw")["test"]) == ["a.txt", "b.txt", "c.txt"]
