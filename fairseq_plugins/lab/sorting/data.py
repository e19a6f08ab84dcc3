"""The ∞-former paper's synthetic sorting task (Martins et al., ACL 2022, §4.1).

One example = a sequence of T tokens over K symbols (the paper: K = 20; ``--symbols``), a
separator, then the K symbols sorted by decreasing frequency in the sequence::

    s07 s13 s07 ... s02  sep  s07 s13 ... s11      (T + 1 + 20 tokens)

Token t (t = 0..T-1) is drawn from the mixture (1 - α_t)·p0 + α_t·p1 with
α_t = t / (T - 1): the distribution drifts linearly from p0 (start) to p1 (end).
p0 and p1 are drawn per example from the flat Dirichlet(1, ..., 1) over the K
symbols (uniform on the simplex). The answer sorts the symbols by their count in
the sequence, decreasing; ties are broken by the symbol's index (s00 before s01).
A symbol that does not occur has count 0 and is still listed (the answer always
holds all K symbols exactly once). A smaller alphabet keeps the task (the answer is still the
sort by frequency over the whole sequence) with fewer answer tokens to learn: docs/results/sorting.md,
"Sorting task".

Randomness: example i of a split is drawn from
``numpy.random.default_rng([seed, split_id, i])`` (train 0, valid 1, test 2), so
an example does not depend on how many examples are generated, and the splits
never share a stream.

Text layout (``raw/{split}.txt``): one example per line, an empty line after each
(one example = one document for ``--reset-memory-at-document-boundary`` of the
``streaming_lm`` task; fairseq's ``language_modeling`` reads the same binaries).

Used by ``fairseq_plugins/lab/sorting/make-sorting.sh`` as ``fairseq-longmem prep sorting COMMAND``; commands:
``state``, ``generate``, ``write-dict``, ``finish``; bad input is a
:class:`~fairseq_plugins.errors.ConfigError` (one line, exit 2).
"""

import os

import numpy as np

from fairseq_plugins.lab.common import cli
from fairseq_plugins.lab.common.files import write_json
from fairseq_plugins.lab.data.manifest import check_generated
from fairseq_plugins.errors import ConfigError

NUM_SYMBOLS = 20  # the paper's alphabet, the default of --symbols
MAX_SYMBOLS = 100  # symbol names have two digits
SEPARATOR = "sep"
SPLITS = ("train", "valid", "test")
FORMAT_VERSION = 1


def symbol_names(num_symbols: int = NUM_SYMBOLS):
    """``["s00", "s01", ...]``, one name per symbol of a ``num_symbols`` alphabet."""
    return [f"s{i:02d}" for i in range(num_symbols)]


# ----------------------------------------------------------------------------- the task


def drift_weights(length: int) -> np.ndarray:
    """α_t = t / (T - 1), t = 0..T-1: weight of p1 at each position, shape (T,)."""
    if length == 1:
        return np.zeros(1)
    return np.arange(length, dtype=np.float64) / (length - 1)


def sort_by_frequency(sequence, num_symbols: int = NUM_SYMBOLS) -> np.ndarray:
    """Symbol indices by decreasing count in ``sequence`` (ties: lower index first), shape (num_symbols,)."""
    counts = np.bincount(np.asarray(sequence, dtype=np.int64), minlength=num_symbols)
    # lexsort sorts by the last key first: primary key −count, secondary key the index
    return np.lexsort((np.arange(num_symbols), -counts))


def make_example(length: int, rng: np.random.Generator, num_symbols: int = NUM_SYMBOLS):
    """Draw one example.

    Returns:
        ``(sequence (T,), target (num_symbols,), p0 (num_symbols,), p1 (num_symbols,))``,
        symbol indices in 0..num_symbols-1.
    """
    p0 = rng.dirichlet(np.ones(num_symbols))
    p1 = rng.dirichlet(np.ones(num_symbols))
    alpha = drift_weights(length)[:, None]
    probs = (1.0 - alpha) * p0[None, :] + alpha * p1[None, :]  # (T, num_symbols)
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random((length, 1))
    sequence = (u >= cdf).sum(axis=1)  # inverse-CDF sampling, one draw per row
    return sequence, sort_by_frequency(sequence, num_symbols), p0, p1


def example_rng(seed: int, split: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, SPLITS.index(split), index])


def example_line(sequence, target) -> str:
    names = symbol_names(MAX_SYMBOLS)
    return " ".join([names[s] for s in sequence] + [SEPARATOR] + [names[s] for s in target])


def parse_line(line: str):
    """Inverse of the text layout: ``(sequence, target)`` as int arrays."""
    words = line.split()
    k = words.index(SEPARATOR)
    index = {s: i for i, s in enumerate(symbol_names(MAX_SYMBOLS))}
    return np.array([index[w] for w in words[:k]]), np.array([index[w] for w in words[k + 1:]])


# ----------------------------------------------------------------------------- commands


def requested_options(args):
    return {"length": args.length, "train_examples": args.train_examples, "valid_examples": args.valid_examples,
            "test_examples": args.test_examples, "seed": args.seed, "num_symbols": args.symbols,
            "format_version": FORMAT_VERSION}


def expected_outputs():
    files = ["dict.txt", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def state(args):
    """Exit 0: build; 3: up to date (message on stdout); raise ConfigError: refuse."""
    return check_generated(args.out, args.force, "sorting.json", requested_options(args), expected_outputs(),
                           f"length {args.length}, {args.symbols} symbols, seed {args.seed}")


def generate(args):
    os.makedirs(args.raw, exist_ok=True)
    for split in SPLITS:
        n = getattr(args, f"{split}_examples")
        with open(os.path.join(args.raw, f"{split}.txt"), "w", encoding="utf-8") as f:
            for i in range(n):
                sequence, target, _, _ = make_example(args.length, example_rng(args.seed, split, i), args.symbols)
                f.write(example_line(sequence, target) + "\n\n")
    return 0


def write_dict(args):
    """Fixed fairseq dictionary: the K symbols then the separator (fairseq adds <s> <pad> </s> <unk>)."""
    with open(args.path, "w", encoding="utf-8") as f:
        for word in symbol_names(args.symbols) + [SEPARATOR]:
            f.write(f"{word} 1\n")
    return 0


def finish(args):
    manifest = {"options": requested_options(args),
                "examples": {s: getattr(args, f"{s}_examples") for s in SPLITS},
                "tokens_per_example": args.length + 1 + args.symbols,
                "drift": "token t ~ (1 - t/(T-1)) p0 + t/(T-1) p1, p0, p1 ~ Dirichlet(1)",
                "ties": "equal counts: lower symbol index first",
                "fairseq_data": os.path.join(os.path.realpath(args.out), "bin")}
    write_json(os.path.join(args.out, "sorting.json"), manifest)
    print(f"fairseq-train data: {manifest['fairseq_data']}")
    return 0


def main(argv, prog="fairseq-longmem prep sorting"):
    """``fairseq-longmem prep sorting COMMAND``: the Python stages of fairseq_plugins/lab/sorting/make-sorting.sh."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add_options(q):
        q.add_argument("--out", required=True, help="output folder")
        q.add_argument("--length", type=int, required=True, help="sequence length T (tokens before the separator)")
        q.add_argument("--train-examples", type=int, required=True, help="examples in train")
        q.add_argument("--valid-examples", type=int, required=True, help="examples in valid")
        q.add_argument("--test-examples", type=int, required=True, help="examples in test")
        q.add_argument("--seed", type=int, required=True, help="random seed")
        add_symbols(q)

    def add_symbols(q):
        q.add_argument("--symbols", type=int, default=NUM_SYMBOLS,
                       help=f"alphabet size K, 2..{MAX_SYMBOLS} (the answer has K tokens) [{NUM_SYMBOLS}]")

    s = sub.add_parser("state", help="is OUT up to date / may it be rebuilt")
    add_options(s)
    s.add_argument("--force", action="store_true", help="rebuild whatever OUT holds")
    g = sub.add_parser("generate", help="write RAW/{train,valid,test}.txt")
    add_options(g)
    g.add_argument("--raw", required=True, help="folder for the text files")
    d = sub.add_parser("write-dict", help="write the fixed fairseq dictionary")
    d.add_argument("--path", required=True, help="dict.txt to write")
    add_symbols(d)
    f = sub.add_parser("finish", help="write OUT/sorting.json")
    add_options(f)

    args = p.parse_args(argv)

    if not 2 <= args.symbols <= MAX_SYMBOLS:
        raise ConfigError(f"--symbols must be an integer in 2..{MAX_SYMBOLS}, not {args.symbols}")
    if args.cmd != "write-dict":
        if args.length < 2:
            raise ConfigError(f"--length must be an integer >= 2, not {args.length}")
        for s in SPLITS:
            if getattr(args, f"{s}_examples") < 1:
                raise ConfigError(f"--{s}-examples must be a positive integer")
        if args.seed < 0:
            raise ConfigError(f"--seed must be >= 0, not {args.seed}")
    return {"state": state, "generate": generate, "write-dict": write_dict, "finish": finish}[args.cmd](args)
