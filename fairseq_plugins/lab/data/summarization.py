"""Example-level stages of data-prep/prepare-summarization.sh (``fairseq-longmem prep summarization``).

Commands (bad input is a :class:`~fairseq_plugins.errors.ConfigError`: one line, exit 2):

  state         check the corpus (a reader of :mod:`fairseq_plugins.lab.data.readers`), its
                input files and a reused --spm-model, then compare an output folder's
                prepare.json with the requested options and the input's identity (path +
                content sha256)
  fetch-aclsum  obtain the pinned aclsum wheel (pip download, cached), verify its sha256 and
                unpack aclsum/dataset/ from it; prints the dataset folder
  convert       read (document, summary) pairs, normalise the text and write
                RAW/{train,valid,test}.source, .target (one example per line) and .ids
                (and a reader's side file, RAW/{split}.NAME.jsonl: the facts' manifest)
  tokenize      train (or copy a reused --spm-model) the joined sentencepiece model, encode the
                splits into OUT/tok/, write spm.vocab (of a reused model) and the fairseq
                dictionary (every piece except <unk> and control pieces, with its count)
  finish        complete the reader's side file (the facts' token offsets), length statistics
                (stats.json + printed table) and prepare.json, written last

Text normalisation (the same for every corpus, documents and summaries): all whitespace runs
(newlines included) become one space, control characters are dropped, and the text is
normalised with sentencepiece's own ``nmt_nfkc`` rule (NFKC: ligatures such as "ﬁ" -> "fi",
full-width forms, zero-width characters removed), so that sentencepiece-decoded model output is
comparable to raw/*.target character for character. Nothing is truncated: documents are kept
whole whatever their length.

Readers (one per corpus format, in readers/; the text rule in text.py, the manifest check in manifest.py)
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
  facts          generated: filler sentences of INPUT/raw/{train,valid,test}.txt (prepare-lm.sh
                 output) with --facts marked facts; summary = the facts in order (lab/facts/reader.py).
"""
import json
import os
import shutil
import sys

from fairseq_plugins.lab.common import cli
from fairseq_plugins.lab.common.files import write_json
from fairseq_plugins.lab.data import readers
from fairseq_plugins.lab.data import spm
from fairseq_plugins.lab.data.manifest import check_prepared, sha256_file, write_manifest
from fairseq_plugins.lab.data.readers import aclsum
from fairseq_plugins.lab.data.splits import assign_splits
from fairseq_plugins.lab.data.text import SPLITS, normalize_text
from fairseq_plugins.lab.data.writers import count_pieces, write_examples, write_fairseq_dict
from fairseq_plugins.errors import ConfigError

PIPELINE = "prepare-summarization.sh"
# bump when the output changes for the same input and options
FORMAT_VERSION = 1
# the reader options a user sets on prepare-summarization.sh
USER_OPTIONS = ("document-field", "summary-field", "doc-tokens", "facts", "examples", "seed", "placement")
# sources longer than these many fairseq positions (sentencepiece pieces + the </s> that
# fairseq-preprocess appends) are counted in the statistics
LENGTH_LIMITS = (1024, 4096, 16384)



def check_input(args):
    """The reader of ``args.corpus`` after the checks that depend on the corpus (the registry's)."""
    return readers.check_input("summarization", vars(args), USER_OPTIONS, input_word="PATH")


def fetch_aclsum(args):
    """Print the dataset folder of the pinned aclsum wheel, downloading/unpacking as needed."""
    print(aclsum.fetch(args.out, args.input, args.python))


def packages(args):
    """The manifest's ``packages``: the pinned ACLSum wheel read (``{}`` for the other corpora)."""
    if args.corpus != "aclsum":
        return {}
    ident = aclsum.identity(args.input)
    check = "sha256:" + aclsum.SHA256 if "unpacked" not in ident["sources"] else "unpacked folder, not verified"
    return {aclsum.SPEC: {"wheel": aclsum.WHEEL, "sha256": check, "dataset": args.dataset}}


# ----------------------------------------------------------------------------- convert


def convert(args):
    reader = readers.get("summarization", args.corpus)
    examples = reader.read(args.input, **reader.option_values(vars(args)))

    kept = {s: [] for s in SPLITS}
    unsplit = []
    dropped = []
    for split, ex_id, doc, summ, (doc_where, sum_where), *side in examples:
        if side and normalize_text(doc) != doc:  # the side file's offsets refer to the document as read
            raise ConfigError(f"{doc_where}: the document is not normalised text (reader {args.corpus})")
        doc, summ = normalize_text(doc), normalize_text(summ)
        for text, where, what in ((doc, doc_where, "document"), (summ, sum_where, "summary")):
            if not text:
                if not args.drop_empty:
                    raise ConfigError(f"{where}: empty {what} (pass --drop-empty to drop such examples)")
                dropped.append(where)
                break
        else:
            (kept[split] if split else unsplit).append((ex_id, doc, summ, *side))
    rule = "given"
    if unsplit:
        rule = "md5(document)"
        assignment = assign_splits(sorted({doc for _, doc, _ in unsplit}), what="examples")
        for ex in unsplit:
            kept[assignment[ex[1]]].append(ex)
    for split in SPLITS:
        if not kept[split]:
            raise ConfigError(f"the {split} split has no examples" + (" after --drop-empty" if dropped else ""))

    write_examples(args.out, kept)
    if reader.side_file:  # raw/{split}.NAME.jsonl, line-aligned with raw/{split}.source
        for split in SPLITS:
            with open(os.path.join(args.out, f"{split}.{reader.side_file}.jsonl"), "w", encoding="utf-8",
                      newline="\n") as f:
                f.write("".join(json.dumps(ex[3], sort_keys=True) + "\n" for ex in kept[split]))
    if dropped:
        shown = ", ".join(dropped[:3]) + (" ..." if len(dropped) > 3 else "")
        print(f"{PIPELINE}: note: --drop-empty dropped {len(dropped)} example(s) with an empty document or summary: {shown}",
              file=sys.stderr)
    counts = ", ".join(f"{s} {len(kept[s])}" for s in SPLITS)
    print(f"examples ({rule} split): {counts}" + (f"; {len(dropped)} empty dropped" if dropped else ""))


# ----------------------------------------------------------------------------- spm / dictionary


def spm_files(model, dict_out, counts, vocab_out=None):
    """``vocab_out`` (a reused model's pieces and scores, when given) and the fairseq dictionary
    ``dict_out``: every piece except <unk> and control pieces, with its count in ``counts``."""
    sp = spm.load(model)
    if vocab_out:
        with open(vocab_out, "w", encoding="utf-8", newline="\n") as f:
            for i in range(sp.get_piece_size()):
                f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    occurrences = count_pieces(counts)
    # fairseq's Dictionary has its own <s> <pad> </s> <unk>; control pieces never occur in encodings
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_unknown(i) or sp.is_control(i))]
    write_fairseq_dict(dict_out, pieces, occurrences)


def max_line_bytes(paths):
    """The longest line of ``paths`` in UTF-8 bytes (its newline not counted)."""
    longest = 0
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                longest = max(longest, len(line.rstrip(b"\n")))
    return longest


def tokenize(args):
    """OUT/raw -> sentencepiece: OUT/spm/spm.model (trained on train source + target, or a copy
    of --spm-model), OUT/tok/{split}.{source,target}, OUT/spm/spm.vocab and spm/dict.txt."""
    out = args.out
    model = os.path.join(out, "spm", "spm.model")
    train = [os.path.join(out, "raw", f"train.{side}") for side in ("source", "target")]
    if args.spm_model:
        shutil.copyfile(args.spm_model, model)
    else:
        # whole documents are single lines: let sentencepiece train on lines of any length
        spm.train_model(train, os.path.join(out, "spm", "spm"), args.vocab_size,
                        max_sentence_length=max(max_line_bytes(train) + 1, 16384))
    names = [f"{split}.{side}" for split in SPLITS for side in ("source", "target")]
    spm.encode_files(model, [os.path.join(out, "raw", n) for n in names],
                     [os.path.join(out, "tok", n) for n in names], args.workers)
    spm_files(model, os.path.join(out, "spm", "dict.txt"),
              [os.path.join(out, "tok", f"train.{side}") for side in ("source", "target")],
              vocab_out=os.path.join(out, "spm", "spm.vocab") if args.spm_model else None)


def spm_model_sha256(path):
    """``sha256:HEX`` of a reused ``--spm-model``.

    Raises:
        ConfigError: the file is missing or not a loadable sentencepiece model.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"--spm-model {path} does not exist")
    try:
        spm.load(path)
    except ConfigError:
        raise ConfigError(f"--spm-model {path} is not a sentencepiece model") from None
    return f"sha256:{sha256_file(path)}"


# ----------------------------------------------------------------------------- manifest / state


def requested_options(args):
    """The manifest's ``options`` (what a rerun must match), the input identity included."""
    reader = readers.get("summarization", args.corpus)
    ident = reader.identity(args.input, **reader.option_values(vars(args)))
    jsonl = args.corpus == "jsonl"
    return {
        "corpus": args.corpus,
        "input": ident["input"],
        "sources": ident["sources"],
        "vocab_size": None if args.spm_model else args.vocab_size,
        "spm_model": ({"path": os.path.realpath(args.spm_model), "sha256": spm_model_sha256(args.spm_model)}
                      if args.spm_model else None),
        "document_field": (args.document_field or "document") if jsonl else None,
        "summary_field": (args.summary_field or "summary") if jsonl else None,
        "drop_empty": bool(args.drop_empty),
        "format_version": FORMAT_VERSION,
        # a generated corpus (facts): the generator's options (doc_tokens, facts, examples, seed, placement)
        # and constants; absent for the other corpora
        **ident.get("options", {}),
        **({"generator": ident["generator"]} if "generator" in ident else {}),
    }


def expected_outputs(side_file=None):
    files = ["spm/spm.model", "spm/spm.vocab", "spm/dict.txt", "bin/dict.source.txt", "bin/dict.target.txt", "stats.json"]
    for s in SPLITS:
        files += [f"raw/{s}.ids"] + ([f"raw/{s}.{side_file}.jsonl"] if side_file else [])
        for side in ("source", "target"):
            files += [f"raw/{s}.{side}", f"tok/{s}.{side}"]
            files += [f"bin/{s}.source-target.{side}.{ext}" for ext in ("bin", "idx")]
    return files


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); ConfigError: refuse."""
    reader = check_input(args)
    want = requested_options(args)
    return check_prepared(
        args.out, args.force, want,
        ("corpus", "input", "vocab_size", "spm_model", "document_field", "summary_field", "drop_empty",
         "format_version", "sources", "doc_tokens", "facts", "examples", "seed", "placement", "generator"),
        expected_outputs(reader.side_file), f"corpus {want['corpus']}",
        defaults=reader.prepared_defaults)


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
                raise ConfigError(f"raw/{split}.{side} and tok/{split}.{side} differ in line count")
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
    reader = readers.get("summarization", args.corpus)
    if reader.complete_side_file:  # e.g. the facts' sentencepiece offsets
        reader.complete_side_file(out)
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
    manifest = write_manifest(out, requested_options(args), args, packages=packages(args),
                              examples={s: stats[s]["examples"] for s in SPLITS})

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


def main(argv, prog="fairseq-longmem prep summarization"):
    """``fairseq-longmem prep summarization COMMAND``: the Python stages of prepare-summarization.sh."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add_corpus(q):
        readers.add_options(q, "summarization")
        q.add_argument("--input", default="", help="corpus folder or file (convert, aclsum: the dataset/ folder)")

    def add_options(q):
        q.add_argument("--out", required=True)
        add_corpus(q)
        q.add_argument("--vocab-size", type=int, required=True)
        q.add_argument("--spm-model", default="", help="reused sentencepiece model (empty: trained)")
        q.add_argument("--drop-empty", action="store_true")

    s = sub.add_parser("state", help="exit 0: build OUT, 3: up to date; refuses bad input and other output")
    add_options(s)
    s.add_argument("--force", action="store_true")

    fa = sub.add_parser("fetch-aclsum", help="print the dataset folder of the pinned ACLSum wheel")
    fa.add_argument("--out", required=True)
    fa.add_argument("--input", default="")
    fa.add_argument("--python", default=sys.executable, help="the Python whose pip downloads the wheel")

    c = sub.add_parser("convert", help="examples -> OUT/{train,valid,test}.source, .target, .ids")
    add_corpus(c)
    c.add_argument("--out", required=True)
    c.add_argument("--drop-empty", action="store_true")

    t = sub.add_parser("tokenize", help="sentencepiece model, OUT/tok/ and spm/dict.txt from OUT/raw")
    t.add_argument("--out", required=True)
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--spm-model", default="", help="reuse this sentencepiece model instead of training one")
    t.add_argument("--workers", type=int, default=1, help="sentencepiece encoding threads")

    f = sub.add_parser("finish", help="OUT/stats.json and OUT/prepare.json (written last), the tables")
    add_options(f)
    f.add_argument("--dataset", default="", help="aclsum: the dataset folder read (fetch-aclsum)")
    f.add_argument("--workers", type=int, default=1)
    f.add_argument("--tools", default="", help="JSON: the versions of the tools that made the output")
    f.add_argument("--timing", action="append", default=[], help="STAGE=SECONDS, repeated")

    args = p.parse_args(argv)
    commands = {"state": state, "fetch-aclsum": fetch_aclsum, "convert": convert, "tokenize": tokenize,
                "finish": finish}
    return commands[args.cmd](args)
