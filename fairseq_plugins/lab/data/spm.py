"""sentencepiece train / encode for data-prep/prepare-lm.sh and prepare-summarization.sh (the
PyPI wheel has no CLI tools)::

  fairseq-longmem prep spm train  --input raw/train.txt [more files] --model-prefix OUT/spm
                                  --vocab-size N [--max-sentence-length BYTES]
  fairseq-longmem prep spm encode --model OUT/spm.model --input raw/valid.txt [more files]
                                  --output OUT/valid.spm [as many files] [--threads N]

Training is a unigram model with a fixed random seed and a FIXED thread count (TRAIN_THREADS):
sentencepiece's EM result depends on the number of threads, so --workers must not change it. At
most INPUT_SENTENCE_SIZE lines are sampled (shuffle_input_sentence), which bounds training time on
big corpora; the books corpus is used whole.
Lines longer than --max-sentence-length bytes (default 16384) are skipped by sentencepiece
training; prepare-summarization.sh, whose lines are whole documents, raises it.
Bad input (a vocabulary too large for the text, sentencepiece missing) is a ConfigError.
Encoding writes one line of space-separated pieces per input line; empty input lines stay
empty (they are the document boundaries).
"""
import os
import re

from fairseq_plugins.lab.common import cli
from fairseq_plugins.errors import ConfigError

SEED = 1234
TRAIN_THREADS = 2
INPUT_SENTENCE_SIZE = 300_000


def _sentencepiece():
    try:
        import sentencepiece
    except ImportError:
        raise ConfigError("the Python package sentencepiece is not importable (pip install sentencepiece)") from None
    return sentencepiece


def train_model(inputs, model_prefix, vocab_size, max_sentence_length=16384):
    """Train the unigram model PREFIX.model / PREFIX.vocab on the text files ``inputs``.

    Raises:
        ConfigError: sentencepiece refused (e.g. a vocabulary too large for the text).
    """
    spm = _sentencepiece()
    spm.set_random_generator_seed(SEED)
    try:
        spm.SentencePieceTrainer.train(
            input=inputs,
            model_prefix=model_prefix,
            model_type="unigram",
            vocab_size=vocab_size,
            # every character seen in training gets a piece (sentencepiece's advice for small
            # alphabets; with 0.9999 the books corpus lost X, [, ], *, /, & ... to <unk>)
            character_coverage=1.0,
            input_sentence_size=INPUT_SENTENCE_SIZE,
            shuffle_input_sentence=True,
            max_sentence_length=max_sentence_length,
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
        raise ConfigError(f"sentencepiece training failed: {msg}{hint}") from None


def load(model):
    """The ``SentencePieceProcessor`` of file ``model``.

    Raises:
        ConfigError: the file is not a sentencepiece model.
    """
    try:
        return _sentencepiece().SentencePieceProcessor(model_file=model)
    except (OSError, RuntimeError):
        raise ConfigError(f"{model} is not a sentencepiece model") from None


def encode_files(model, inputs, outputs, threads=1):
    """Encode each of ``inputs`` into the output of the same position (written atomically)."""
    if len(inputs) != len(outputs):
        raise ConfigError(f"encode needs one --output per --input ({len(inputs)} inputs, {len(outputs)} outputs)")
    sp = load(model)
    for source, output in zip(inputs, outputs):
        _encode_file(sp, source, output, threads)


def _encode_file(sp, source, output, threads):
    """One file: a line of space-separated pieces per input line; empty lines stay empty."""
    with open(source, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    tmp = output + ".tmp"
    batch = 20_000
    with open(tmp, "w", encoding="utf-8", newline="\n") as out:
        for start in range(0, len(lines), batch):
            chunk = lines[start:start + batch]
            pieces = sp.encode(chunk, out_type=str, num_threads=threads)
            for src, toks in zip(chunk, pieces):
                out.write((" ".join(toks) if src.strip() else "") + "\n")
    os.replace(tmp, output)


def main(argv, prog="fairseq-longmem prep spm"):
    """``fairseq-longmem prep spm {train,encode}`` (module docstring)."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train a unigram model: PREFIX.model, PREFIX.vocab")
    t.add_argument("--input", required=True, nargs="+", help="training text file(s), one sentence per line")
    t.add_argument("--model-prefix", required=True)
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--max-sentence-length", type=int, default=16384,
                   help="longer lines (in bytes) are skipped by sentencepiece training")
    e = sub.add_parser("encode", help="text files -> files of space-separated pieces")
    e.add_argument("--model", required=True)
    e.add_argument("--input", required=True, nargs="+")
    e.add_argument("--output", required=True, nargs="+", help="one per --input, in the same order")
    e.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.cmd == "train":
        return train_model(args.input, args.model_prefix, args.vocab_size, args.max_sentence_length)
    return encode_files(args.model, args.input, args.output, args.threads)
