#!/usr/bin/env python3
"""sentencepiece train / encode for data-prep/prepare-lm.sh and prepare-summarization.sh (the
PyPI wheel has no CLI tools).

  spm.py train  --input raw/train.txt [more files] --model-prefix OUT/spm --vocab-size N
                [--max-sentence-length BYTES]
  spm.py encode --model OUT/spm.model --input raw/valid.txt --output OUT/valid.spm [--threads N]

Training is a unigram model with a fixed random seed and a FIXED thread count (TRAIN_THREADS):
sentencepiece's EM result depends on the number of threads (measured: 1 vs 2 threads give ~300
different pieces out of 8000), so --workers must not change it. At most INPUT_SENTENCE_SIZE lines
are sampled (shuffle_input_sentence), which bounds training time on big corpora; the books corpus
(~57k lines after normalisation) is used whole and trains in ~15 s.
Lines longer than --max-sentence-length bytes (default 16384) are skipped by sentencepiece
training; prepare-summarization.sh, whose lines are whole documents, raises it.
Error lines start with "$SPM_PROG: error:" (default prepare-lm.sh).
Encoding writes one line of space-separated pieces per input line; empty input lines stay
empty (they are the document boundaries).
"""
import argparse
import os
import re
import sys

SEED = 1234
TRAIN_THREADS = 2
INPUT_SENTENCE_SIZE = 300_000
PROG = os.environ.get("SPM_PROG", "prepare-lm.sh")


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import sentencepiece as spm
except ImportError:
    fail(f"the Python package sentencepiece is not importable by {sys.executable} (pip install sentencepiece)")


def train(args):
    spm.set_random_generator_seed(SEED)
    try:
        spm.SentencePieceTrainer.train(
            input=args.input,
            model_prefix=args.model_prefix,
            model_type="unigram",
            vocab_size=args.vocab_size,
            # every character seen in training gets a piece (sentencepiece's advice for small
            # alphabets; with 0.9999 the books corpus lost X, [, ], *, /, & ... to <unk>)
            character_coverage=1.0,
            input_sentence_size=INPUT_SENTENCE_SIZE,
            shuffle_input_sentence=True,
            max_sentence_length=args.max_sentence_length,
            num_threads=TRAIN_THREADS,
            # <unk>=0 <s>=1 </s>=2, no <pad>: these three are skipped in fairseq's dict
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            minloglevel=1,
        )
    except RuntimeError as e:
        # "INTERNAL: src/trainer_interface.cc(744) [...] Vocabulary size too high (8000). ..." -> the message
        msg = re.sub(r"^.*\]\s*", "", str(e).strip().splitlines()[-1])
        hint = " (choose a smaller --vocab-size)" if "ocabulary size" in msg else ""
        fail(f"sentencepiece training failed: {msg}{hint}")


def encode(args):
    sp = spm.SentencePieceProcessor(model_file=args.model)
    with open(args.input, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    tmp = args.output + ".tmp"
    batch = 20_000
    with open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for start in range(0, len(lines), batch):
            chunk = lines[start:start + batch]
            pieces = sp.encode(chunk, out_type=str, num_threads=args.threads)
            for src, toks in zip(chunk, pieces):
                out.write((" ".join(toks) if src.strip() else "") + "\n")
    os.replace(tmp, args.output)


def main():
    p = argparse.ArgumentParser(prog="spm.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--input", required=True, nargs="+", help="training text file(s), one sentence per line")
    t.add_argument("--model-prefix", required=True)
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--max-sentence-length", type=int, default=16384,
                   help="longer lines (in bytes) are skipped by sentencepiece training")
    e = sub.add_parser("encode")
    e.add_argument("--model", required=True)
    e.add_argument("--input", required=True)
    e.add_argument("--output", required=True)
    e.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    train(args) if args.cmd == "train" else encode(args)


if __name__ == "__main__":
    main()
