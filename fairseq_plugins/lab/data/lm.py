"""Document-level stages of data-prep/prepare-lm.sh (``fairseq-longmem prep lm COMMAND``).

Commands (bad input is a :class:`~fairseq_plugins.errors.ConfigError`: one line, exit 2):

  convert       read a corpus (a reader of :mod:`fairseq_plugins.lab.data.readers`) as whole
                documents, assign each document to train/valid/test, normalise the text and
                write RAW/{train,valid,test}.txt plus RAW/documents.tsv
  state         check the corpus and its options (registry), and compare an output folder's
                prepare.json with the requested options and the input's identity
  tokenize      train sentencepiece on OUT/raw/train.txt, encode the splits, write the fairseq
                dictionary (``token count``) from its vocab
  finish        count lines/tokens, write prepare.json and print the summary table

Text format written by ``convert`` (UTF-8): one paragraph per line (hard-wrapped lines of a
paragraph joined with one space, or with --paragraphs line every line its own paragraph; runs
of whitespace collapsed, empty paragraphs dropped),
documents separated by exactly ONE empty line, no empty line at the start or end of a file.
A paragraph longer than LONG_PARAGRAPH characters (the State of the Union speeches come as one
line per speech) is cut at sentence ends into lines of at most about PACK_TARGET characters.

Split rule when the corpus does not come with splits: bucket = int(md5(name)[:8], 16) % 100;
bucket < 5 -> test, bucket < 10 -> valid, else train. If valid or test (or train) ends up
empty, the document with the smallest md5 is moved there from the largest split (repeated
until every split holds at least one document); fewer than 3 documents is an error.

The text rules live in text.py, the split rule in splits.py, the manifest check in manifest.py;
one reader per corpus format in readers/.
"""
import json
import os
import sys

from fairseq_plugins.lab.common import cli
from fairseq_plugins.lab.data import readers
from fairseq_plugins.lab.data import spm
from fairseq_plugins.lab.data.manifest import check_prepared, write_manifest
from fairseq_plugins.lab.data.splits import assign_splits
from fairseq_plugins.lab.data.text import DEFAULT_PARAGRAPHS, SPLITS, has_text
from fairseq_plugins.lab.data.writers import SplitWriter, count_pieces, write_fairseq_dict
from fairseq_plugins.errors import ConfigError

# bump when the output of the pipeline changes (text normalisation, sentencepiece settings in
# spm.py, ...) so that older output folders are not taken as up to date
FORMAT_VERSION = 2

PIPELINE = "prepare-lm.sh"
# the reader options a user sets on prepare-lm.sh (the others are the pipeline's own plumbing)
USER_OPTIONS = ("paragraphs",)


def check_input(args):
    """The reader of ``args.corpus`` after the checks that depend on the corpus (the registry's)."""
    return readers.check_input("lm", vars(args), USER_OPTIONS, input_word="DIR")


# ----------------------------------------------------------------------------- convert


def convert(args):
    reader = check_input(args)
    docs, given, note = reader.read(args.input, **reader.option_values(vars(args)))

    writer = SplitWriter(args.out)
    try:
        if given:  # the corpus' own splits, documents in the reader's order
            rule = "given"
            for split, name, load in docs:
                writer.add(split, name, load())
        else:  # split by md5 of the name: a first pass finds the non-empty documents
            rule = "md5(name)"
            docs = sorted(docs, key=lambda d: d[1])
            assignment = assign_splits([name for _, name, load in docs if has_text(load())])
            for _, name, load in docs:
                if name in assignment:
                    writer.add(assignment[name], name, load())
                else:
                    writer.empty.append(name)
    finally:
        writer.close()

    for split in SPLITS:
        if not writer.count[split]:
            raise ConfigError(f"the {split} split is empty after conversion (no non-empty documents)")
    if note:
        print(f"{PIPELINE}: note: {note}", file=sys.stderr)
    if writer.empty:
        shown = ", ".join(writer.empty[:5]) + (" ..." if len(writer.empty) > 5 else "")
        print(f"{PIPELINE}: note: skipped {len(writer.empty)} empty document(s): {shown}", file=sys.stderr)
    counts = ", ".join(f"{s} {writer.count[s]}" for s in SPLITS)
    print(f"documents ({rule} split): {counts}")


# ----------------------------------------------------------------------------- manifest


def requested_options(args, vocab_size=None):
    """The manifest's ``options`` (what a rerun must match), the input identity included."""
    reader = readers.get("lm", args.corpus)
    ident = reader.identity(args.input, **reader.option_values(vars(args)))
    options = {
        "corpus": args.corpus,
        "input": ident["input"],
        "vocab_size": args.vocab_size if vocab_size is None else vocab_size,
        "sources": ident["sources"],
        "format_version": FORMAT_VERSION,
    }
    if (args.paragraphs or DEFAULT_PARAGRAPHS) != DEFAULT_PARAGRAPHS:  # recorded only when not the default: older manifests stay valid
        options["paragraphs"] = args.paragraphs
    return options


def expected_outputs():
    files = ["spm.model", "spm.vocab", "dict.txt", "raw/documents.tsv", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"{s}.spm", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); ConfigError: refuse."""
    check_input(args)
    want = requested_options(args)
    return check_prepared(args.out, args.force, want, ("corpus", "input", "vocab_size", "format_version", "paragraphs", "sources"),
                          expected_outputs(), f"corpus {want['corpus']}, vocab {want['vocab_size']}")


# ----------------------------------------------------------------------------- dictionary

SPM_SPECIALS_SKIPPED = ("<unk>", "<s>", "</s>")  # fairseq's Dictionary adds these itself


def read_spm_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[0] for line in f]


def make_dict(vocab, counts, out):
    """fairseq dict ``out``: every sentencepiece piece of ``vocab`` except <unk>, <s>, </s>, in
    vocab order, with its count in the encoded training split ``counts`` (0 for pieces that
    never occur there)."""
    occurrences = count_pieces([counts])
    pieces = [p for p in read_spm_vocab(vocab) if p not in SPM_SPECIALS_SKIPPED]
    write_fairseq_dict(out, pieces, occurrences)


def tokenize(args):
    """OUT/raw -> sentencepiece: OUT/spm.model and spm.vocab trained on raw/train.txt (spm.py's
    fixed settings), OUT/{train,valid,test}.spm, and OUT/dict.txt (:func:`make_dict`)."""
    out = args.out
    prefix = os.path.join(out, "spm")
    spm.train_model([os.path.join(out, "raw", "train.txt")], prefix, args.vocab_size)
    spm.encode_files(prefix + ".model", [os.path.join(out, "raw", f"{s}.txt") for s in SPLITS],
                     [os.path.join(out, f"{s}.spm") for s in SPLITS], args.workers)
    make_dict(prefix + ".vocab", os.path.join(out, "train.spm"), os.path.join(out, "dict.txt"))


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
    manifest = write_manifest(
        out, requested_options(args), args, packages=json.loads(args.packages) if args.packages else {}, splits=stats,
        valid_documents=names["valid"] if len(names["valid"]) <= 200 else len(names["valid"]),
        test_documents=names["test"] if len(names["test"]) <= 200 else len(names["test"]))

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


def add_corpus_options(q):
    """``--corpus`` and every LM reader's options (registry), and ``--input``."""
    readers.add_options(q, "lm")
    q.add_argument("--input", help="the corpus folder (books: where the packages were found)")


def add_manifest_options(q, vocab=True):
    """What the manifest records: the output folder, the corpus and its options."""
    q.add_argument("--out", required=True)
    add_corpus_options(q)
    if vocab:
        q.add_argument("--vocab-size", type=int, required=True)


def add_finish_options(q):
    q.add_argument("--workers", type=int, default=1)
    q.add_argument("--tools", default="", help="JSON: the versions of the tools that made the output")
    q.add_argument("--timing", action="append", default=[], help="STAGE=SECONDS, repeated")


def main(argv, prog="fairseq-longmem prep lm"):
    """``fairseq-longmem prep lm COMMAND``: the Python stages of data-prep/prepare-lm.sh."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("convert", help="documents -> OUT/{train,valid,test}.txt + documents.tsv")
    add_corpus_options(c)
    c.add_argument("--out", required=True)

    s = sub.add_parser("state", help="exit 0: build OUT, 3: up to date; refuses other output")
    add_manifest_options(s)
    s.add_argument("--force", action="store_true")

    t = sub.add_parser("tokenize", help="sentencepiece model, OUT/{train,valid,test}.spm and dict.txt from OUT/raw")
    t.add_argument("--out", required=True)
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--workers", type=int, default=1, help="sentencepiece encoding threads")

    f = sub.add_parser("finish", help="OUT/prepare.json (written last) and the summary table")
    add_manifest_options(f)
    add_finish_options(f)
    f.add_argument("--packages", default="", help="JSON: the pinned packages read (books)")
    args = p.parse_args(argv)
    return {"convert": convert, "state": state, "tokenize": tokenize, "finish": finish}[args.cmd](args)
