"""Tests for data-prep/prepare-summarization.sh (and its stages ``fairseq-longmem prep summarization``).

The script runs through subprocess on the small fixtures in tests/fixtures/summarization/ with a
tiny sentencepiece vocabulary. Every check compares VALUES with an independent reading of the
fixture files (plain json / str.splitlines / unicodedata NFKC), with sentencepiece called
directly, with fairseq's own translation task, and with hand-computed statistics.
"""
import functools
import hashlib
import json
import math
import shutil
import unicodedata
import zipfile
from pathlib import Path

import pytest

from helpers import data_prep, needs_fairseq_preprocess, one_line_error, snapshot as helpers_snapshot
from prep_command import prep

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "summarization"
ST = FIX / "source_target"
JSONL = FIX / "jsonl"
ACLSUM = FIX / "aclsum"
ACLSUM_DATASET = ACLSUM / "aclsum-0.1.2" / "aclsum" / "dataset"
BOOK = Path(__file__).resolve().parents[2] / "fixtures" / "books_txt" / "austen-emma.txt"
SPLITS = ("train", "valid", "test")
PREFIX = "prepare-summarization.sh: error: "

pytestmark = needs_fairseq_preprocess
run_prep = functools.partial(data_prep, "prepare-summarization.sh")  # (*args, **env) -> CompletedProcess


def ok(proc):
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


# a refusal: exit status 2 and stderr one line ``PREFIX...`` holding every needle; returns it
assert_one_line_error = functools.partial(one_line_error, prefix=PREFIX, status=2, alone=True)


def snapshot(folder):
    """``helpers.snapshot`` with each file's sha256."""
    return helpers_snapshot(folder, sha256=True)


def lines_of(path):
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n") and "\r" not in text
    return text[:-1].split("\n")


# --------------------------------------------------------------------------- independent oracles


def norm(text):
    """The documented normalisation: NFKC, whitespace runs -> one space (fixtures have no controls)."""
    return " ".join(unicodedata.normalize("NFKC", " ".join(text.split())).split())


def expected_source_target(folder):
    """{split: [(id, document, summary)]} from line-aligned files (universal newlines)."""
    out = {}
    for split in SPLITS:
        name = "val" if split == "valid" and (Path(folder) / "val.source").exists() else split
        src = (Path(folder) / f"{name}.source").read_text(encoding="utf-8").splitlines()
        tgt = (Path(folder) / f"{name}.target").read_text(encoding="utf-8").splitlines()
        assert len(src) == len(tgt)
        out[split] = [(f"{name}.source:{i}", norm(s), norm(t)) for i, (s, t) in enumerate(zip(src, tgt), 1)]
    return out


def expected_jsonl_nested(folder):
    out = {}
    for split in SPLITS:
        rows = [json.loads(l) for l in (Path(folder) / f"{split}.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]
        out[split] = [(r["id"], norm(" ".join(r["article"]["paragraphs"])), norm(r["highlights"])) for r in rows]
    return out


def expected_aclsum(dataset):
    out = {}
    for split, listing in (("train", "train.jsonl"), ("valid", "val.jsonl"), ("test", "test.jsonl")):
        ids = [json.loads(l)["id"] for l in (Path(dataset) / listing).read_text().splitlines() if l.strip()]
        out[split] = []
        for i in ids:
            paper = json.loads((Path(dataset) / "paper_jsons" / f"{i}.json").read_text(encoding="utf-8"))
            body = " ".join(p["text"] for p in paper["pdf_parse"]["body_text"])
            out[split].append((i, norm(body), norm(paper["abstract"])))
    return out


def produced(raw):
    return {s: list(zip(lines_of(Path(raw) / f"{s}.ids"), lines_of(Path(raw) / f"{s}.source"),
                        lines_of(Path(raw) / f"{s}.target"))) for s in SPLITS}


def md5_split(text):
    bucket = int(hashlib.md5(text.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "test" if bucket < 5 else "valid" if bucket < 10 else "train"


def expected_hash_splits(docs):
    """The documented md5 rule + fill rule for empty splits, written independently."""
    groups = {s: sorted({d for d in docs if md5_split(d) == s}) for s in SPLITS}
    for target in ("test", "valid", "train"):
        if not groups[target]:
            donor = max(SPLITS, key=lambda s: (len(groups[s]), -SPLITS.index(s)))
            moved = min(groups[donor], key=lambda n: (hashlib.md5(n.encode()).hexdigest(), n))
            groups[donor].remove(moved)
            groups[target].append(moved)
    return {d: s for s, ds in groups.items() for d in ds}


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default), by hand."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# --------------------------------------------------------------------------- pipeline outputs


@pytest.fixture(scope="module")
def st_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("st") / "out"
    proc = ok(run_prep("--corpus", "source-target", "--input", ST, "--out", out, "--vocab-size", 200, "--workers", 1))
    return out, proc


@pytest.fixture(scope="module")
def aclsum_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("aclsum") / "out"
    proc = ok(run_prep("--input", ACLSUM, "--out", out, "--vocab-size", 150, "--workers", 1))
    return out, proc


@pytest.fixture(scope="module")
def single_jsonl(tmp_path_factory):
    """One .jsonl file (default field names): the source-target fixture's 20 examples, one long
    document (a whole book fixture) and one example with an empty summary."""
    d = tmp_path_factory.mktemp("single")
    rows = [{"id": i, "document": doc, "summary": summ}
            for split in SPLITS for i, doc, summ in expected_source_target(ST)[split]]
    rows.append({"id": "emma", "document": BOOK.read_text(encoding="utf-8"), "summary": ["Emma", "Woodhouse."]})
    rows.append({"id": "blank", "document": "Some text.", "summary": " \n "})
    path = d / "all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


@pytest.fixture(scope="module")
def single_out(st_out, single_jsonl, tmp_path_factory):
    """jsonl single file, split by hash, REUSING the source-target run's sentencepiece model."""
    path, _ = single_jsonl
    out = tmp_path_factory.mktemp("single_out") / "out"
    proc = ok(run_prep("--corpus", "jsonl", "--input", path, "--out", out, "--drop-empty", "--workers", 1,
                       "--spm-model", st_out[0] / "spm" / "spm.model"))
    return out, proc


@pytest.mark.full
def test_help_prints_usage():
    proc = ok(run_prep("--help"))
    assert "bash data-prep/prepare-summarization.sh [--corpus aclsum|source-target|jsonl|facts] [--input PATH]" in proc.stdout
    for opt in ("--vocab-size N", "--spm-model FILE", "--document-field F", "--summary-field F", "--drop-empty",
                "--force", "data/aclsum", "raw/{train,valid,test}.source", "stats.json"):
        assert opt in proc.stdout, opt


# ---- readers: exactly the expected (document, summary) pairs


@pytest.mark.full
def test_source_target_pairs(st_out):
    out, proc = st_out
    assert produced(out / "raw") == expected_source_target(ST)
    train = lines_of(out / "raw" / "train.source")
    # the full-width comma of the fixture is NFKC-normalised, the tabs and double spaces collapsed
    assert train[0] == '"Poor Miss Taylor!--I wish she were here again. What a pity it is that Mr. Weston ever thought of her!"'
    assert train[1] == ('"A house of her own!--But where is the advantage of a house of her own? This is three times as '
                        'large.--And you have never any odd humours, my dear."')
    assert "\uff0c" in (ST / "train.source").read_text(encoding="utf-8")
    assert "examples (given split): train 12, valid 4, test 4" in proc.stdout


def test_source_target_valid_name_and_crlf(tmp_path):
    # valid.* instead of val.*; CRLF line ends everywhere: the same examples
    inp = tmp_path / "in"
    inp.mkdir()
    for f in ST.iterdir():
        data = f.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        (inp / f.name.replace("val.", "valid.")).write_bytes(data)
    proc = _convert("--corpus", "source-target", "--input", inp, "--out", tmp_path / "raw")
    assert proc.returncode == 0, proc.stderr
    want = expected_source_target(ST)
    want["valid"] = [(i.replace("val.", "valid."), d, s) for i, d, s in want["valid"]]
    assert produced(tmp_path / "raw") == want


def test_jsonl_folder_nested_fields(tmp_path):
    proc = _convert("--corpus", "jsonl", "--input", JSONL, "--out", tmp_path / "raw",
                    "--document-field", "article.paragraphs", "--summary-field", "highlights")
    assert proc.returncode == 0, proc.stderr
    got = produced(tmp_path / "raw")
    assert got == expected_jsonl_nested(JSONL)
    assert [len(got[s]) for s in SPLITS] == [12, 4, 4]
    # a dotted path with a list index picks one paragraph
    proc = _convert("--corpus", "jsonl", "--input", JSONL, "--out", tmp_path / "raw1",
                    "--document-field", "article.paragraphs.1", "--summary-field", "id")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(l) for l in (JSONL / "test.jsonl").read_text().splitlines() if l.strip()]
    assert lines_of(tmp_path / "raw1" / "test.source") == [norm(r["article"]["paragraphs"][1]) for r in rows]
    assert lines_of(tmp_path / "raw1" / "test.target") == [r["id"] for r in rows]


@pytest.mark.full
def test_aclsum_pairs(aclsum_out):
    out, proc = aclsum_out
    got = produced(out / "raw")
    assert got == expected_aclsum(ACLSUM_DATASET)
    assert [len(got[s]) for s in SPLITS] == [12, 4, 4]
    everything = "".join((out / "raw" / f"{s}.source").read_text() for s in SPLITS)
    # back matter and figure captions are not part of the body
    assert "We thank the reviewers" not in everything and "Figure 1" not in everything
    assert "fetch" in proc.stdout
    manifest = json.loads((out / "prepare.json").read_text())
    assert manifest["options"]["sources"]["unpacked"].startswith(f"{sum(1 for p in ACLSUM_DATASET.rglob('*') if p.is_file())} files")


@pytest.mark.full
def test_single_jsonl_hash_split_and_drop_empty(single_out, single_jsonl):
    out, proc = single_out
    _, rows = single_jsonl
    kept = [(str(r["id"]), norm(r["document"]), norm(r["summary"] if isinstance(r["summary"], str) else " ".join(r["summary"])))
            for r in rows if r["id"] != "blank"]
    where = expected_hash_splits([d for _, d, _ in kept])
    want = {s: [ex for ex in kept if where[ex[1]] == s] for s in SPLITS}
    assert produced(out / "raw") == want
    assert all(want[s] for s in SPLITS)
    assert "dropped 1 example(s)" in proc.stderr and "all.jsonl:22" in proc.stderr
    assert "1 empty dropped" in proc.stdout


# ---- sentencepiece and fairseq binaries


@pytest.mark.full
def test_reused_spm_model(single_out, st_out):
    import sentencepiece as spm

    out, _ = single_out
    src = st_out[0] / "spm"
    assert (out / "spm" / "spm.model").read_bytes() == (src / "spm.model").read_bytes()
    parse = lambda p: [(l.split("\t")[0], float(l.split("\t")[1])) for l in lines_of(p)]  # noqa: E731
    mine, trained = parse(out / "spm" / "spm.vocab"), parse(src / "spm.vocab")
    assert [p for p, _ in mine] == [p for p, _ in trained]
    assert all(abs(a - b) <= 1e-4 * max(1, abs(b)) for (_, a), (_, b) in zip(mine, trained))
    manifest = json.loads((out / "prepare.json").read_text())
    assert manifest["options"]["vocab_size"] is None
    assert manifest["options"]["spm_model"]["sha256"] == "sha256:" + hashlib.sha256((src / "spm.model").read_bytes()).hexdigest()
    assert spm.SentencePieceProcessor(model_file=str(out / "spm" / "spm.model")).get_piece_size() == 200


@pytest.mark.full
@pytest.mark.parametrize("which", ["st_out", "aclsum_out", "single_out"])
def test_tok_is_spm_encoding_and_decodes_to_raw(which, request):
    import sentencepiece as spm

    out, _ = request.getfixturevalue(which)
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm" / "spm.model"))
    checked = 0
    for split in SPLITS:
        for side in ("source", "target"):
            raw = lines_of(out / "raw" / f"{split}.{side}")
            tok = lines_of(out / "tok" / f"{split}.{side}")
            assert len(tok) == len(raw)
            for r, t in zip(raw, tok):
                pieces = t.split(" ")
                assert pieces == sp.encode(r, out_type=str)
                if all(sp.piece_to_id(p) != sp.unk_id() for p in pieces):
                    assert sp.decode(pieces) == r
                    checked += 1
                else:
                    assert split != "train" or which == "single_out", "train text is fully covered"
    assert checked >= 20


def _load_task(out):
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    cfg = TranslationConfig(data=str(out / "bin"), source_lang="source", target_lang="target", dataset_impl=None,
                            max_source_positions=100000, max_target_positions=100000)
    return TranslationTask.setup_task(cfg)


@pytest.mark.full
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("which", ["st_out", "aclsum_out", "single_out"])
def test_binaries_load_in_the_translation_task(which, request):
    """What `fairseq-train OUT/bin --task translation --source-lang source --target-lang target` reads."""
    import sentencepiece as spm
    from fairseq.data import LanguagePairDataset

    out, _ = request.getfixturevalue(which)
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm" / "spm.model"))
    task = _load_task(out)
    d = task.source_dictionary
    assert task.target_dictionary.symbols == d.symbols
    assert (out / "bin" / "dict.source.txt").read_bytes() == (out / "bin" / "dict.target.txt").read_bytes()
    # the dictionary is the sentencepiece vocabulary minus <unk> <s> </s>, after fairseq's 4 specials
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert d.symbols[4:] == [p for p in pieces if p not in ("<unk>", "<s>", "</s>")]
    for split in SPLITS:
        task.load_dataset(split)
        ds = task.datasets[split]
        assert isinstance(ds, LanguagePairDataset)
        src = lines_of(out / "raw" / f"{split}.source")
        tgt = lines_of(out / "raw" / f"{split}.target")
        assert len(ds) == len(src)
        for i in range(len(ds)):
            item = ds[i]
            for side, text in (("source", src[i]), ("target", tgt[i])):
                want = [d.index(p) for p in sp.encode(text, out_type=str)] + [d.eos()]
                assert item[side].tolist() == want, (split, i, side)


@pytest.mark.full
def test_stats_are_the_lengths(single_out):
    out, proc = single_out
    stats = json.loads((out / "stats.json").read_text())["splits"]
    long_seen = 0
    for split in SPLITS:
        assert stats[split]["examples"] == len(lines_of(out / "raw" / f"{split}.source"))
        for side in ("source", "target"):
            raw = lines_of(out / "raw" / f"{split}.{side}")
            toks = [len(l.split(" ")) for l in lines_of(out / "tok" / f"{split}.{side}")]
            words = [len(l.split(" ")) for l in raw]
            for key, values in (("spm_tokens", toks), ("words", words)):
                s = stats[split][side][key]
                assert s["min"] == min(values) and s["max"] == max(values), (split, side, key)
                assert s["mean"] == pytest.approx(sum(values) / len(values), rel=1e-12)
                assert s["median"] == pytest.approx(percentile(values, 50), rel=1e-12)
                assert s["p90"] == pytest.approx(percentile(values, 90), rel=1e-12)
            if side == "source":
                for n in (1024, 4096, 16384):
                    assert stats[split]["sources_longer_than"][str(n)] == sum(1 for t in toks if t + 1 > n)
                long_seen += stats[split]["sources_longer_than"]["1024"]
    assert long_seen == 1  # the whole book; the other sources are short
    # the printed table carries the same numbers
    fmt = lambda v: f"{v:,.1f}" if v != int(v) else f"{int(v):,}"  # noqa: E731
    for split in SPLITS:
        for side in ("source", "target"):
            for unit, key in (("tokens", "spm_tokens"), ("words", "words")):
                s = stats[split][side][key]
                row = next(l for l in proc.stdout.splitlines() if l.split()[:3] == [split, side, unit])
                assert row.split()[3:] == [str(stats[split]["examples"])] + [fmt(s[k]) for k in ("min", "median", "mean", "p90", "max")]
        row = next(l for l in proc.stdout.splitlines() if l.split()[:1] == [split] and len(l.split()) == 5)
        assert row.split()[2:] == [str(stats[split]["sources_longer_than"][str(n)]) for n in (1024, 4096, 16384)]


# ---- idempotence, refusal, --force


@pytest.mark.full
def test_second_run_is_up_to_date_and_touches_nothing(st_out):
    out, _ = st_out
    before = snapshot(out)
    for workers in (1, 2):  # --workers does not change the output
        proc = ok(run_prep("--corpus", "source-target", "--input", ST, "--out", out, "--vocab-size", 200, "--workers", workers))
        assert proc.stdout.strip().splitlines() == [f"{out} is up to date (corpus source-target); nothing to do"]
        assert proc.stderr == ""
    assert snapshot(out) == before


@pytest.mark.full
def test_other_options_are_refused_then_force_rebuilds(st_out, tmp_path):
    src, _ = st_out
    out = tmp_path / "out"
    shutil.copytree(src, out)
    before = snapshot(out)
    base = ("--corpus", "source-target", "--input", ST, "--out", out)
    assert_one_line_error(run_prep(*base, "--vocab-size", 150), "vocab_size=200", "150", "--force", str(out))
    assert_one_line_error(run_prep(*base, "--vocab-size", 200, "--drop-empty"), "drop_empty=false", "--force")
    assert_one_line_error(run_prep(*base, "--spm-model", src / "spm" / "spm.model"), "vocab_size=200 (requested null)")
    assert snapshot(out) == before

    # the input's CONTENT is part of the identity: pretend `out` was made from a copy of the fixture
    inp = tmp_path / "inp"
    shutil.copytree(ST, inp)
    manifest = json.loads((out / "prepare.json").read_text())
    manifest["options"]["input"] = str(inp.resolve())
    (out / "prepare.json").write_text(json.dumps(manifest))
    before = snapshot(out)
    same = ("--corpus", "source-target", "--input", inp, "--out", out, "--vocab-size", 200)
    assert "up to date" in ok(run_prep(*same)).stdout
    (inp / "test.target").write_bytes((ST / "test.target").read_bytes().replace(b"WHALE", b"WHALF"))
    assert_one_line_error(run_prep(*same), "the input data differ", "--force")
    assert snapshot(out) == before

    proc = ok(run_prep(*base, "--vocab-size", 150, "--workers", 1, "--force"))
    assert "up to date" not in proc.stdout
    assert len(lines_of(out / "spm" / "spm.vocab")) == 150
    assert json.loads((out / "prepare.json").read_text())["options"]["vocab_size"] == 150
    assert (out / "raw" / "train.source").read_bytes() == (src / "raw" / "train.source").read_bytes()


@pytest.mark.full
def test_unfinished_or_foreign_folder_is_refused(st_out, tmp_path):
    src, _ = st_out
    args = ("--corpus", "source-target", "--input", ST, "--vocab-size", 200)
    a = tmp_path / "a"
    shutil.copytree(src, a)
    (a / "prepare.json").unlink()
    before = snapshot(a)
    assert_one_line_error(run_prep(*args, "--out", a), "no prepare.json", "--force")
    assert snapshot(a) == before
    b = tmp_path / "b"
    shutil.copytree(src, b)
    (b / "bin" / "valid.source-target.target.bin").unlink()
    assert_one_line_error(run_prep(*args, "--out", b), "incomplete", "bin/valid.source-target.target.bin")


# ---- bad input: exit 2, one line, nothing created or overwritten


def _convert(*args):
    return prep("summarization", "convert", *args)


def _copy(src, dst, **edits):
    shutil.copytree(src, dst)
    for name, fn in edits.items():
        p = Path(dst) / name.replace("__", ".")
        p.write_text(fn(p.read_text(encoding="utf-8")), encoding="utf-8")
    return dst


@pytest.fixture
def complete_out(st_out, tmp_path):
    out = tmp_path / "complete"
    shutil.copytree(st_out[0], out)
    return out, snapshot(out)


def _bad(tmp_path, complete_out, *args):
    """Run twice: into a fresh folder (must not be created) and with --force onto a complete
    output folder (must stay byte-identical); both must give the same single error line."""
    fresh = tmp_path / "fresh"
    p1 = run_prep("--vocab-size", 200, "--workers", 1, "--out", fresh, *args)
    assert not fresh.exists(), "a failed run must not leave an output folder behind"
    out, before = complete_out
    p2 = run_prep("--vocab-size", 200, "--workers", 1, "--out", out, "--force", *args)
    assert snapshot(out) == before, "a failed run must not touch existing output"
    assert p1.stderr == p2.stderr.replace(str(out), str(fresh))
    return p1


@pytest.mark.full
def test_mismatched_line_counts(tmp_path, complete_out):
    inp = _copy(ST, tmp_path / "in", train__target=lambda t: t.split("\n", 1)[1])
    line = assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "source-target", "--input", inp),
                                 "has 12 lines but", "has 11", "line-aligned")
    assert f"{inp}/train.source" in line and f"{inp}/train.target" in line


@pytest.mark.full
def test_empty_document_and_drop_empty(tmp_path, complete_out):
    def blank_third(t):
        lines = t.split("\n")
        lines[2] = "  \t "
        return "\n".join(lines)
    inp = _copy(ST, tmp_path / "in", val__source=blank_third)
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "source-target", "--input", inp),
                          f"{inp}/val.source:3: empty document", "--drop-empty")
    proc = _convert("--corpus", "source-target", "--input", inp, "--out", tmp_path / "raw", "--drop-empty")
    assert proc.returncode == 0, proc.stderr
    want = expected_source_target(ST)
    del want["valid"][2]
    assert produced(tmp_path / "raw") == want
    assert "dropped 1 example(s)" in proc.stderr and "val.source:3" in proc.stderr


@pytest.mark.full
def test_bad_jsonl(tmp_path, complete_out):
    fields = ("--document-field", "article.paragraphs", "--summary-field", "highlights")
    rows = (JSONL / "valid.jsonl").read_text(encoding="utf-8").splitlines()
    cases = {
        "invalid": (rows[:1] + ['{"id": "x", "article": '] + rows[1:], "valid.jsonl:2: invalid JSON"),
        "nofield": (rows[:2] + ['{"id": "x", "article": {"paragraphs": ["a b"]}}'] + rows[2:], "valid.jsonl:3: no field 'highlights'"),
        "empty": (rows + ['{"id": "x", "article": {"paragraphs": ["a b"]}, "highlights": ""}'],
                  f"valid.jsonl:{len(rows) + 1} ('highlights'): empty summary"),
        "number": (rows + ['{"id": "x", "article": {"paragraphs": ["a b"]}, "highlights": 3}'], "field 'highlights' is a number, not text"),
        "array": (rows + ["[1, 2]"], "a JSON object is expected"),
    }
    for name, (content, needle) in cases.items():
        inp = tmp_path / name
        shutil.copytree(JSONL, inp)
        (inp / "valid.jsonl").write_text("\n".join(content) + "\n", encoding="utf-8")
        assert_one_line_error(_bad(tmp_path / name, complete_out, "--corpus", "jsonl", "--input", inp, *fields), needle, str(inp))
    # the default field names do not exist in this fixture
    assert_one_line_error(run_prep("--corpus", "jsonl", "--input", JSONL, "--out", tmp_path / "o"),
                          "train.jsonl:1: no field 'document'", "--document-field")


@pytest.mark.full
def test_missing_inputs(tmp_path, complete_out):
    no_test = tmp_path / "no_test"
    shutil.copytree(ST, no_test)
    (no_test / "test.target").unlink()
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "source-target", "--input", no_test), "lacks test.target")
    both = tmp_path / "both"
    shutil.copytree(ST, both)
    shutil.copy(both / "val.source", both / "valid.source")
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "source-target", "--input", both), "valid.source", "val.source")
    jl = tmp_path / "jl"
    jl.mkdir()
    shutil.copy(JSONL / "train.jsonl", jl)
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "jsonl", "--input", jl), "valid.jsonl (or val.jsonl)", "test.jsonl")
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "source-target", "--input", tmp_path / "nope"), "does not exist")
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "source-target"), "--input")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(_bad(tmp_path, complete_out, "--input", empty), "aclsum-0.1.2-py3-none-any.whl")
    assert_one_line_error(_bad(tmp_path, complete_out, "--corpus", "cnn"), "--corpus")


@pytest.mark.full
def test_missing_or_bad_spm_model(tmp_path, complete_out):
    args = ("--corpus", "source-target", "--input", ST, "--out", tmp_path / "o")
    assert_one_line_error(run_prep(*args, "--spm-model", tmp_path / "nope.model"), "--spm-model", "nope.model", "does not exist")
    junk = tmp_path / "junk.model"
    junk.write_text("not a model")
    assert_one_line_error(run_prep(*args, "--spm-model", junk), "is not a sentencepiece model")
    assert_one_line_error(run_prep(*args, "--spm-model", junk, "--vocab-size", 100), "exclude each other")
    assert not (tmp_path / "o").exists()


@pytest.mark.full
def test_aclsum_wheel_with_wrong_checksum(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    with zipfile.ZipFile(inp / "aclsum-0.1.2-py3-none-any.whl", "w") as z:
        for p in ACLSUM_DATASET.rglob("*"):
            if p.is_file():
                z.write(p, "aclsum/dataset/" + str(p.relative_to(ACLSUM_DATASET)))
    out = tmp_path / "out"
    assert_one_line_error(run_prep("--input", inp, "--out", out), "sha256", "aclsum-0.1.2-py3-none-any.whl", "not the aclsum==0.1.2")
    assert not out.exists()
