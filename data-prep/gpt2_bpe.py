#!/usr/bin/env python3
"""GPT-2 BPE for data-prep/prepare-lm.sh --bpe gpt2, offline (docs/gpt2.md).

Subcommands (errors are one line on stderr and exit 1):

  check      the --hf-dir has GPT-2's tokenizer files (vocab.json, merges.txt)
  encode     RAW/{train,valid,test}.txt -> OUT/split.bpe: GPT-2 token ids in decimal, one DOCUMENT per line
  make-dict  dict.txt from vocab.json (the symbols convert_hf_gpt2.py writes, same order)
  state      compare OUT/prepare.json with the requested options (as lm_documents.py state)
  finish     count documents/lines/tokens, write prepare.json, print the summary table

Encoding: fairseq's own GPT-2 byte-level BPE (``fairseq.data.encoders.gpt2_bpe_utils``)
with the folder's ``vocab.json`` (= fairseq's ``encoder.json``) and ``merges.txt``
(= ``vocab.bpe``); nothing is downloaded. A document's paragraphs (the lines of raw/)
are joined with "\\n", so GPT-2 sees its newline token between paragraphs, as in its
training text; fairseq-preprocess then ends every line, i.e. every document, with
``</s>``, which is GPT-2's ``<|endoftext|>``. The empty line between two documents is
kept: it adds a second ``<|endoftext|>`` and is what ``streaming_lm
--reset-memory-at-document-boundary`` takes as a document boundary.
"""
import argparse
import importlib.util
import json
import os
import sys
from multiprocessing import Pool

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from prep_common import SPLITS, ScriptError, check_prepared, parse_timings, run_main, sha256_files, write_json  # noqa: E402
import lm_documents  # noqa: E402  (requested_options: the corpus part of the manifest)
from gpt2_vocab import TOKENIZER_FILES, dictionary_symbols, eot_id, read_merges, read_vocab, write_dict  # noqa: E402

PROG = "prepare-lm.sh"
_ENCODER = None


def _fairseq_gpt2_encoder():
    """fairseq's ``gpt2_bpe_utils.Encoder``, loaded from its file: importing the ``fairseq``
    package itself takes seconds and is not needed (the module needs only ``regex``)."""
    spec = importlib.util.find_spec("fairseq")
    if spec is None or not spec.submodule_search_locations:
        raise ScriptError(f"fairseq is not importable by {sys.executable}; activate the environment with fairseq")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "encoders", "gpt2_bpe_utils.py")
    module_spec = importlib.util.spec_from_file_location("fairseq_gpt2_bpe_utils", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ImportError as e:
        raise ScriptError(f"fairseq's GPT-2 BPE needs {e.name}: pip install regex") from None
    return module.Encoder


def _init_encoder(hf_dir):
    global _ENCODER
    Encoder = _fairseq_gpt2_encoder()
    vocab = read_vocab(hf_dir)
    _ENCODER = (Encoder(vocab, read_merges(hf_dir)), eot_id(vocab))


def _encode_document(text):
    encoder, eot = _ENCODER
    return " ".join("</s>" if i == eot else str(i) for i in encoder.encode(text))


def documents(path):
    """The documents of a raw/ split: lists of paragraph lines, separated by one empty line."""
    with open(path, encoding="utf-8") as f:
        doc = []
        for line in f:
            line = line.rstrip("\n")
            if line:
                doc.append(line)
            elif doc:
                yield doc
                doc = []
        if doc:
            yield doc


def encode(args):
    """RAW/{train,valid,test}.txt -> OUT/{split}.bpe (one process for all splits)."""
    _init_encoder(args.hf_dir)  # before the pool: forked workers inherit it
    pool = Pool(args.workers) if args.workers > 1 else None
    try:
        for split in SPLITS:
            texts = ["\n".join(doc) for doc in documents(os.path.join(args.raw, f"{split}.txt"))]
            if pool is not None and len(texts) > 1:
                lines = pool.map(_encode_document, texts, chunksize=max(1, len(texts) // (4 * args.workers)))
            else:
                lines = [_encode_document(t) for t in texts]
            output = os.path.join(args.out, f"{split}.bpe")
            with open(output + ".tmp", "w", encoding="utf-8", newline="\n") as out:
                out.write("\n\n".join(lines) + ("\n" if lines else ""))  # one empty line between documents
            os.replace(output + ".tmp", output)
    finally:
        if pool is not None:
            pool.close()
            pool.join()


def check(args):
    if not os.path.isdir(args.hf_dir):
        raise ScriptError(f"--hf-dir {args.hf_dir} is not a directory")
    eot_id(read_vocab(args.hf_dir))
    read_merges(args.hf_dir)


def make_dict(args):
    vocab = read_vocab(args.hf_dir)
    write_dict(args.out, dictionary_symbols(len(vocab), eot_id(vocab)))


# ----------------------------------------------------------------------------- manifest


def requested_options(args):
    ns = argparse.Namespace(corpus=args.corpus, identity=args.identity, paragraphs=args.paragraphs, vocab_size=None)
    options = lm_documents.requested_options(ns)
    options["vocab_size"] = len(read_vocab(args.hf_dir))
    options["bpe"] = "gpt2"
    options["gpt2_tokenizer"] = sha256_files([os.path.join(args.hf_dir, f) for f in TOKENIZER_FILES])
    return options


def expected_outputs():
    files = ["dict.txt", "raw/documents.tsv", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"{s}.bpe", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def state(args):
    want = requested_options(args)
    keys = ("corpus", "input", "bpe", "gpt2_tokenizer", "vocab_size", "format_version", "paragraphs", "sources")
    return check_prepared(args.out, args.force, want, keys, expected_outputs(),
                          f"corpus {want['corpus']}, GPT-2 BPE of {want['vocab_size']} tokens")


def finish(args):
    out = args.out
    stats = {}
    for s in SPLITS:
        docs = tokens = 0
        with open(os.path.join(out, f"{s}.bpe"), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    docs += 1
                    tokens += len(line.split())
        # fairseq-preprocess adds one </s> per line: one per document + one per empty line between two
        stats[s] = {"documents": docs, "bpe_tokens": tokens, "end_of_text_tokens": max(0, 2 * docs - 1)}
    manifest = {"options": requested_options(args), "workers": args.workers,
                "tools": json.loads(args.tools) if args.tools else {}, "splits": stats,
                "stage_seconds": parse_timings(args.timing), "fairseq_data": os.path.join(os.path.realpath(out), "bin")}
    write_json(os.path.join(out, "prepare.json"), manifest)
    print()
    print(f"{'split':<6} {'documents':>10} {'GPT-2 tokens':>13} {'+ <|endoftext|>':>16}")
    for s in SPLITS:
        st = stats[s]
        print(f"{s:<6} {st['documents']:>10,} {st['bpe_tokens']:>13,} {st['end_of_text_tokens']:>16,}")
    print(f"fairseq-train data: {manifest['fairseq_data']}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="gpt2_bpe.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--hf-dir", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--hf-dir", required=True)
    e.add_argument("--raw", required=True, help="folder with {train,valid,test}.txt")
    e.add_argument("--out", required=True, help="folder for {train,valid,test}.bpe")
    e.add_argument("--workers", type=int, default=1)
    d = sub.add_parser("make-dict")
    d.add_argument("--hf-dir", required=True)
    d.add_argument("--out", required=True)
    for name in ("state", "finish"):
        q = sub.add_parser(name)
        q.add_argument("--out", required=True)
        q.add_argument("--corpus", required=True)
        q.add_argument("--identity", required=True)
        q.add_argument("--paragraphs", default=lm_documents.DEFAULT_PARAGRAPHS)
        q.add_argument("--hf-dir", required=True)
        q.add_argument("--force", action="store_true")
        q.add_argument("--workers", type=int, default=1)
        q.add_argument("--tools", default="")
        q.add_argument("--timing", action="append", default=[])
    args = p.parse_args(argv)
    commands = {"check": check, "encode": encode, "make-dict": make_dict, "state": state, "finish": finish}
    return run_main(lambda: commands[args.cmd](args), PROG, 1)


if __name__ == "__main__":
    sys.exit(main())
