"""GPT-2 BPE for data-prep/prepare-lm.sh --bpe gpt2, offline (docs/gpt2.md).

``fairseq-longmem prep gpt2 COMMAND`` (bad input: a ConfigError, one line, exit 2):

  encode     RAW/{train,valid,test}.txt -> OUT/split.bpe: GPT-2 token ids in decimal, one DOCUMENT per
             line, and dict.txt from vocab.json (the symbols gpt2/convert.py writes, same order)
  state      check the corpus (as ``prep lm state``) and that --hf-dir holds GPT-2's tokenizer
             files (vocab.json, merges.txt), then compare OUT/prepare.json with the request
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
import os
from multiprocessing import Pool

from fairseq_plugins.lab.common import cli
from fairseq_plugins.lab.data import lm
from fairseq_plugins.lab.data.manifest import check_prepared, sha256_files, write_manifest
from fairseq_plugins.lab.data.text import SPLITS
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.gpt2.vocab import TOKENIZER_FILES, dictionary_symbols, eot_id, read_merges, read_vocab, write_dict

# the encoder of this process: set before the worker pool forks, which inherits it
_ENCODER = None


def _fairseq_gpt2_encoder():
    """fairseq's ``gpt2_bpe_utils.Encoder`` (it needs the ``regex`` package)."""
    try:
        from fairseq.data.encoders.gpt2_bpe_utils import Encoder
    except ImportError as e:
        raise ConfigError(f"fairseq's GPT-2 BPE needs {e.name}: pip install regex") from None
    return Encoder


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
    """RAW/{train,valid,test}.txt -> OUT/{split}.bpe (one process for all splits), then --dict."""
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
    make_dict(args.hf_dir, args.dict)


def check(args):
    if not os.path.isdir(args.hf_dir):
        raise ConfigError(f"--hf-dir {args.hf_dir} is not a directory")
    eot_id(read_vocab(args.hf_dir))
    read_merges(args.hf_dir)


def make_dict(hf_dir, path):
    """dict.txt from vocab.json: the symbols the GPT-2 conversion writes, in the same order."""
    vocab = read_vocab(hf_dir)
    write_dict(path, dictionary_symbols(len(vocab), eot_id(vocab)))


# ----------------------------------------------------------------------------- manifest


def requested_options(args):
    options = lm.requested_options(args, vocab_size=len(read_vocab(args.hf_dir)))
    options["bpe"] = "gpt2"
    options["gpt2_tokenizer"] = sha256_files([os.path.join(args.hf_dir, f) for f in TOKENIZER_FILES])
    return options


def expected_outputs():
    files = ["dict.txt", "raw/documents.tsv", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"{s}.bpe", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); ConfigError: refuse."""
    lm.check_input(args)
    check(args)
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
    manifest = write_manifest(out, requested_options(args), args, splits=stats)
    print()
    print(f"{'split':<6} {'documents':>10} {'GPT-2 tokens':>13} {'+ <|endoftext|>':>16}")
    for s in SPLITS:
        st = stats[s]
        print(f"{s:<6} {st['documents']:>10,} {st['bpe_tokens']:>13,} {st['end_of_text_tokens']:>16,}")
    print(f"fairseq-train data: {manifest['fairseq_data']}")


def main(argv, prog="fairseq-longmem prep gpt2"):
    """``fairseq-longmem prep gpt2 COMMAND``: the GPT-2 stages of data-prep/prepare-lm.sh --bpe gpt2."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("encode", help="RAW/{train,valid,test}.txt -> OUT/{split}.bpe")
    e.add_argument("--hf-dir", required=True)
    e.add_argument("--raw", required=True, help="folder with {train,valid,test}.txt")
    e.add_argument("--out", required=True, help="folder for {train,valid,test}.bpe")
    e.add_argument("--dict", required=True, help="the dict.txt to write (make_dict)")
    e.add_argument("--workers", type=int, default=1)
    s = sub.add_parser("state", help="exit 0: build OUT, 3: up to date; refuses other output")
    lm.add_manifest_options(s, vocab=False)
    s.add_argument("--hf-dir", required=True)
    s.add_argument("--force", action="store_true")
    f = sub.add_parser("finish", help="OUT/prepare.json (written last) and the summary table")
    lm.add_manifest_options(f, vocab=False)
    f.add_argument("--hf-dir", required=True)
    lm.add_finish_options(f)
    args = p.parse_args(argv)
    return {"encode": encode, "state": state, "finish": finish}[args.cmd](args)
