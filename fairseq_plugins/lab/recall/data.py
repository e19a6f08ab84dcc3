"""Recall by distance (docs/results/recall.md): one key, real filler text, and a query at a known distance.

One example is one line of ``raw/{split}.txt`` with an empty line after it (one document), in
the tokens the models read (offsets from the line's first token; the binarized line ends with
``</s>`` after them)::

    f f .. f  @key K [@key K ..]  f f .. f  @query K
    (p pieces)       k: the last K   (d - 1)  q = k + d, answer at q + 1

* ``K``: a key drawn uniformly from the closed set of ``--keys`` names
  (:func:`~fairseq_plugins.lab.recall.symbols.key_symbols`), each one dictionary symbol,
  written after the key marker ``--repeat`` ℓ times;
* ``d``, the distance, is tokens from the last key to the query marker: ``m × W`` for each m of
  ``--distances`` and the attention window W (``--window``: segment + short-term memory of the
  ∞-former, the block of transformer_lm), so m < 1 lies inside the window and m ≥ 1 beyond it;
* the filler ``f``: consecutive sentencepiece pieces of real text (the split of the same name of
  a books folder prepared by data-prep/prepare-lm.sh, encoded with its ``spm.model``; pieces the
  model does not know are left out), from a random paragraph start: p of them before the key (p
  uniform in 0..min(W - 1, room), so that the key falls anywhere in a segment) and d - 1 between
  the key and the query marker.

An example holds p + 2ℓ + d + 1 tokens, never more than ``--length`` L (default: the longest
distance + 2ℓ + W, room for any p). Splits: ``train`` mixes the distances in a random order
(``--train-mix tokens``: about equal tokens per distance, so more examples at short distances;
``examples``: equal examples per distance); ``valid`` and ``test`` hold ``--valid-per-distance`` /
``--test-per-distance`` examples of every distance. The filler of a split comes from the books
split of the same name, so no text is shared between splits. Randomness: a split's order from
``numpy.random.default_rng([seed, split_id, 0])``, example i from ``default_rng([seed, split_id,
1, i])`` (train 0, valid 1, test 2).

Used by ``fairseq_plugins/lab/recall/make-recall.sh`` as ``fairseq-longmem prep recall COMMAND`` (``state``,
``generate``, ``write-dict``, ``finish``); bad input is a
:class:`~fairseq_plugins.errors.ConfigError` (one line, exit 2).
"""

import json
import os
from dataclasses import dataclass
from typing import Dict, List

import numpy as np

from fairseq_plugins.lab.common.recall_tasks import (read_records, run_stages, stage_outputs, window_multiples,
                                                     write_manifest)
from fairseq_plugins.lab.data.manifest import check_generated, files_identity
from fairseq_plugins.lab.recall.symbols import KEY_MARKER, MAX_KEYS, QUERY_MARKER, key_symbols
from fairseq_plugins.lab.data.text import SPLITS, read_lines
from fairseq_plugins.lab.data.writers import write_fairseq_dict
from fairseq_plugins.errors import ConfigError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_BOOKS = "data/books"
MIXES = ("tokens", "examples")
ENCODE_BATCH = 5000  # paragraphs per sentencepiece call


# ----------------------------------------------------------------------------- the layout


@dataclass(frozen=True)
class Layout:
    """The validated shape of the examples (tokens; ``multiples[i] × window = distances[i]``)."""

    window: int
    multiples: List[str]
    distances: List[int]
    keys: int
    repeat: int
    length: int

    def room(self, distance: int) -> int:
        """The largest filler prefix p of an example at ``distance`` (tokens)."""
        return min(self.window - 1, self.length - (2 * self.repeat + distance + 1))

    def mean_tokens(self, distance: int) -> float:
        """Mean tokens an example at ``distance`` adds to its split's stream: its own, its
        end-of-line ``</s>`` and the empty line's."""
        return self.room(distance) / 2 + 2 * self.repeat + distance + 3


def parse_multiples(text: str, window: int):
    """``--distances`` (multiples of W, space or comma separated) -> (labels, distances in tokens),
    ascending.

    Raises:
        ConfigError: a value that is not a positive number, is not a whole number of tokens
            times W, or repeats a distance.
    """
    def tokens(word: str, m: float):
        d = m * window
        if not m > 0 or abs(d - round(d)) > 1e-9 or round(d) < 1:
            raise ConfigError(f"distance {word} x W (W = {window}) is not a whole number >= 1 of tokens; "
                              f"give multiples m with m x {window} a positive integer")
        return int(round(d)), format(m, "g")

    pairs = window_multiples(text, "--distances", "0.5 1 2", tokens,
                             lambda d: f"--distances gives {d} tokens twice; give each distance once")
    return [m for _, m in pairs], [d for d, _ in pairs]


def layout(args) -> Layout:
    """The examples' layout from the stage's options, every bound checked (nothing is read).

    Raises:
        ConfigError: an option out of range, or a distance longer than ``--length`` allows.
    """
    for name, low in (("window", 1), ("keys", 1), ("repeat", 1)):
        if getattr(args, name) < low:
            raise ConfigError(f"--{name} must be an integer >= {low}, not {getattr(args, name)}")
    if args.keys > MAX_KEYS:
        raise ConfigError(f"--keys {args.keys} is more than the {MAX_KEYS} names of the closed set; "
                          f"use --keys <= {MAX_KEYS}")
    multiples, distances = parse_multiples(args.distances, args.window)
    length = args.length if args.length else distances[-1] + 2 * args.repeat + args.window
    for m, d in zip(multiples, distances):
        need = d + 2 * args.repeat + 1
        if need > length:
            raise ConfigError(f"distance {m} x W = {d} tokens does not fit in examples of --length {length} "
                              f"(the key phrase, the distance and the answer need {need}); raise --length or "
                              f"drop {m} from --distances")
    return Layout(args.window, multiples, distances, args.keys, args.repeat, length)


def allocate(total: int, weights) -> List[int]:
    """``total`` split in proportion to ``weights`` by largest remainder (ties: the earlier first)."""
    w = np.asarray(weights, dtype=np.float64)
    share = total * w / w.sum()
    base = np.floor(share).astype(np.int64)
    order = np.argsort(-(share - base), kind="stable")
    base[order[:total - int(base.sum())]] += 1
    return [int(c) for c in base]


def split_counts(args, lay: Layout) -> Dict[str, List[int]]:
    """Examples per distance of each split (lists in the order of ``lay.distances``)."""
    per_token = [1.0 / lay.mean_tokens(d) for d in lay.distances]
    weights = per_token if args.train_mix == "tokens" else [1.0] * len(lay.distances)
    if args.train_tokens is not None:
        # the train examples whose mean stream tokens add up to about --train-tokens
        total = round(args.train_tokens / sum(w * lay.mean_tokens(d) for w, d in zip(weights, lay.distances))
                      * sum(weights))
    else:
        total = args.train_examples
    return {"train": allocate(max(total, 1), weights),
            "valid": [args.valid_per_distance] * len(lay.distances),
            "test": [args.test_per_distance] * len(lay.distances)}


# ----------------------------------------------------------------------------- filler text


def books_files(books: str) -> List[str]:
    """The prepared books folder's files this task reads, or a ConfigError naming how to make them."""
    files = [os.path.join(books, "raw", f"{s}.txt") for s in SPLITS] + [os.path.join(books, "spm.model")]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ConfigError(f"{books} holds no prepared books corpus ({os.path.relpath(missing[0], books)} missing); "
                          f"prepare it with: bash data-prep/prepare-lm.sh --out {books}")
    return files


def load_spm(books: str):
    from fairseq_plugins.lab.data.spm import load

    return load(os.path.join(books, "spm.model"))


def dictionary_pieces(sp) -> List[str]:
    """The sentencepiece pieces the task's dictionary holds: all but ``<unk>`` and the control pieces."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


@dataclass
class Filler:
    """A split's text as piece ids (``pieces`` (N,) int32) and the offsets where its paragraphs start."""

    pieces: np.ndarray
    starts: np.ndarray

    def run(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """``length`` consecutive pieces from a random paragraph start with that many pieces after it."""
        last = np.searchsorted(self.starts, self.pieces.size - length, side="right")
        begin = int(self.starts[rng.integers(last)])
        return self.pieces[begin:begin + length]


def read_filler(path: str, sp) -> Filler:
    """The paragraphs of ``path`` (one per line, empty lines skipped) encoded with ``sp``."""
    known = np.array([not (sp.is_control(i) or sp.is_unknown(i)) for i in range(sp.get_piece_size())])
    lines = [line for line in read_lines(path) if line.strip()]
    runs, starts, offset = [], [], 0
    for b in range(0, len(lines), ENCODE_BATCH):
        for ids in sp.encode(lines[b:b + ENCODE_BATCH], out_type=int):
            ids = np.asarray(ids, dtype=np.int32)
            ids = ids[known[ids]]
            if ids.size:
                starts.append(offset)
                runs.append(ids)
                offset += ids.size
    pieces = np.concatenate(runs) if runs else np.zeros(0, dtype=np.int32)
    return Filler(pieces, np.asarray(starts, dtype=np.int64))


def check_filler(filler: Filler, split: str, books: str, lay: Layout, counts: List[int]) -> None:
    """Raise ConfigError unless the split's text holds the longest filler run each used distance may need."""
    for m, d, n in zip(lay.multiples, lay.distances, counts):
        need = lay.room(d) + d - 1
        if n and need > filler.pieces.size:
            raise ConfigError(f"distance {m} x W = {d} tokens needs up to {need} pieces of filler text, but the "
                              f"{split} split of {books} holds {filler.pieces.size}; use a larger corpus (--books) "
                              f"or drop {m} from --distances")


# ----------------------------------------------------------------------------- examples


def make_example(filler: Filler, distance: int, lay: Layout, keys: List[str], rng: np.random.Generator):
    """One example at ``distance``: ``(filler ids before the key, filler ids after it, key, record)``;
    the record holds the offsets of the layout (module docstring) from the line's first token."""
    key = keys[int(rng.integers(len(keys)))]
    prefix = int(rng.integers(lay.room(distance) + 1))
    run = filler.run(prefix + distance - 1, rng)
    key_offsets = [prefix + 2 * r + 1 for r in range(lay.repeat)]
    query = key_offsets[-1] + distance
    record = {"distance": distance, "key": key, "key_offsets": key_offsets, "key_offset": key_offsets[-1],
              "query_offset": query, "answer_offset": query + 1, "tokens": query + 2, "prefix": prefix}
    return run[:prefix], run[prefix:], key, record


def example_order(seed: int, split: str, counts: List[int], lay: Layout) -> List[int]:
    """The distance of each example of a split, in a random order (module docstring)."""
    order = np.repeat(np.asarray(lay.distances), counts)
    return [int(d) for d in np.random.default_rng([seed, SPLITS.index(split), 0]).permutation(order)]


def write_split(path: str, records_path: str, filler: Filler, order: List[int], lay: Layout, sp, seed: int,
                split: str) -> None:
    """``raw/{split}.txt`` (an example per line, an empty line after each) and its records (JSON lines)."""
    keys = key_symbols(lay.keys)
    multiple = dict(zip(lay.distances, lay.multiples))
    vocab = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    with open(path, "w", encoding="utf-8", newline="\n") as text, \
            open(records_path, "w", encoding="utf-8", newline="\n") as records:
        for i, distance in enumerate(order):
            rng = np.random.default_rng([seed, SPLITS.index(split), 1, i])
            before, after, key, record = make_example(filler, distance, lay, keys, rng)
            words = ([vocab[t] for t in before] + [KEY_MARKER, key] * lay.repeat + [vocab[t] for t in after]
                     + [QUERY_MARKER, key])
            text.write(" ".join(words) + "\n\n")
            records.write(json.dumps({**record, "multiple": multiple[distance]}, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------- commands


def requested_options(args, lay: Layout) -> Dict:
    counts = split_counts(args, lay)
    return {"window": lay.window, "distances": lay.multiples, "keys": lay.keys, "repeat": lay.repeat,
            "length": lay.length, "train_mix": args.train_mix, "train_tokens": args.train_tokens,
            "examples_per_distance": counts, "seed": args.seed, "format_version": FORMAT_VERSION,
            "books": files_identity(args.books, books_files(args.books))}


def expected_outputs() -> List[str]:
    return stage_outputs(SPLITS)


def state(args, lay: Layout) -> int:
    """Exit 0: build; 3: up to date (message on stdout); raise ConfigError: refuse (the books folder
    is checked first, whatever OUT holds)."""
    return check_generated(args.out, args.force, MANIFEST, requested_options(args, lay), expected_outputs(),
                           f"window {lay.window}, distances {' '.join(lay.multiples)}, seed {args.seed}")


def generate(args, lay: Layout) -> int:
    """RAW/{split}.txt and RAW/{split}.jsonl; every split's filler is checked before anything is written."""
    books_files(args.books)
    sp = load_spm(args.books)
    counts = split_counts(args, lay)
    fillers = {}
    for split in SPLITS:
        fillers[split] = read_filler(os.path.join(args.books, "raw", f"{split}.txt"), sp)
        check_filler(fillers[split], split, args.books, lay, counts[split])
    os.makedirs(args.raw, exist_ok=True)
    for split in SPLITS:
        write_split(os.path.join(args.raw, f"{split}.txt"), os.path.join(args.raw, f"{split}.jsonl"), fillers[split],
                    example_order(args.seed, split, counts[split], lay), lay, sp, args.seed, split)
    return 0


def write_dict(args, lay: Layout) -> int:
    """The fixed fairseq dictionary: the sentencepiece pieces, the two markers, the keys."""
    pieces = dictionary_pieces(load_spm(args.books))
    ours = [KEY_MARKER, QUERY_MARKER] + key_symbols(lay.keys)
    taken = sorted(set(pieces) & set(ours))
    if taken:
        raise ConfigError(f"{args.books}/spm.model has a piece '{taken[0]}', one of the task's own symbols; "
                          "use another sentencepiece model")
    write_fairseq_dict(args.path, pieces + ours, {s: 1 for s in pieces + ours})
    return 0


def finish(args, lay: Layout) -> int:
    """Check every example against the binarized splits, then write OUT/manifest.json (last)."""
    from fairseq_plugins.lab.recall.check import check_split

    splits = {}
    for split in SPLITS:
        records = read_records(os.path.join(args.out, "raw"), split)
        splits[split] = check_split(os.path.join(args.out, "bin"), split, records, lay)
    keys = key_symbols(lay.keys)
    manifest = {"options": requested_options(args, lay), "window": lay.window, "length": lay.length,
                "distances": dict(zip(lay.multiples, lay.distances)), "keys": keys, "chance": 1.0 / len(keys),
                "key_marker": KEY_MARKER, "query_marker": QUERY_MARKER, "splits": splits,
                "offsets": "token offsets from the example's first token in its binarized line (item); start: "
                           "that token's offset in the split's concatenated lines"}
    return write_manifest(args.out, MANIFEST, manifest)


def add_options(q) -> None:
    """The options every stage takes between ``--out`` and ``--seed``: the books, the layout, the split sizes."""
    q.add_argument("--books", default=DEFAULT_BOOKS, help="prepared books folder (raw/, spm.model) [%(default)s]")
    q.add_argument("--window", type=int, required=True, help="attention window W (tokens)")
    q.add_argument("--distances", required=True, help="distances as multiples of W, e.g. \"0.5 1 2\"")
    q.add_argument("--keys", type=int, required=True, help="size K of the closed set of keys")
    q.add_argument("--repeat", type=int, default=1, help="key phrases before the filler [1]")
    q.add_argument("--length", type=int, default=None,
                   help="most tokens of an example [longest distance + 2ℓ + W]")
    train = q.add_mutually_exclusive_group(required=True)
    train.add_argument("--train-examples", type=int, help="examples in train")
    train.add_argument("--train-tokens", type=int, help="train examples: as many as make about this many tokens")
    q.add_argument("--train-mix", choices=MIXES, default="tokens", help="distances in train [tokens]")
    q.add_argument("--valid-per-distance", type=int, required=True, help="valid examples per distance")
    q.add_argument("--test-per-distance", type=int, required=True, help="test examples per distance")


def check_counts(args) -> None:
    """Raise ConfigError for a split size below 1."""
    for name in ("train_examples", "train_tokens", "valid_per_distance", "test_per_distance"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, not {value}")


def main(argv, prog="fairseq-longmem prep recall"):
    """``fairseq-longmem prep recall COMMAND``: the Python stages of fairseq_plugins/lab/recall/make-recall.sh."""
    return run_stages(argv, prog, __doc__, {"state": state, "generate": generate, "write-dict": write_dict,
                                            "finish": finish}, layout, add_options, check_counts)
