"""MQAR, multi-query associative recall (docs/results/mqar.md; Arora et al., "Zoology", ICLR 2024):
the generator and the binarized data.

One example is one document of ``raw/{split}.txt`` (its lines, then an empty line), in the tokens
the models read (offsets from the example's first token; a line break is the ``</s>`` that
fairseq-preprocess puts at the end of each line)::

    k1 v1 k2 v2 .. kk vk | slot 1 | slot 2 | .. | slot S | [</s>]
    context: 2k tokens     4 tokens each: a query "k @query v </s>" or filler "f f f f"

* the k keys: distinct ids drawn from the key half 1..V/2-1 of the vocabulary (``k1`` ..), the k
  values: distinct ids of the value half V/2..V-1 (``v128`` .. at V = 256), pair i at offsets 2i,
  2i + 1 (:mod:`~fairseq_plugins.lab.mqar.symbols`);
* the query region: S = ⌊(L - 2k - 1) / 4⌋ slots of 4 tokens after the context (``--length`` L).
  Each key is queried once, in a slot of its own: k distinct slots x ∈ 1..S drawn without
  replacement from the power law p(x) ∝ a·x^(a-1) (``--power-a`` a; Zoology's gap: a = 0.01
  favours the first slots, a = 1 is uniform; each draw from the slots left, renormalized), given
  to the keys in a random order. A query slot holds the key, the marker ``@query``, the key's
  value and the end of the line; the value, the target predicted at the marker, is the only
  scored position of its line (``--loss-after-symbol @query`` counts the targets after the
  marker up to the line's end, ``</s>`` excluded: the value alone). Every other slot is filler:
  ``--filler zeros`` (the paper's Figure 2: the id 0) or ``random`` (ids drawn uniformly from
  the V tokens);
* the key–query distance of pair i queried in slot x: d = 2k + 4(x - 1) - 2i tokens, from the
  key in the context to the key of its query (= from the value to the marker that predicts it);
  1 ≤ ... ≤ the longest, 2k + 4(S - 1). ``--window`` W (the streaming arms' attention window:
  segment + short-term memory) and ``--buckets`` (multiples of W) set the distance buckets the
  scorer reports: (0, m1·W], (m1·W, m2·W], ..., beyond the last;
* an example ends with the line end of its last slot (a query's, or one more ``</s>`` after
  filler): at most 2k + 4S + 1 ≤ L tokens, then the empty line that ends the document.

Randomness: example i of a split from ``numpy.random.default_rng([seed, split_id, i])`` (train 0,
valid 1, test 2), so an example never depends on the split's size. Used by scripts/mqar.sh through
data-prep/stages.sh (``build_generated``) as ``fairseq-longmem prep mqar COMMAND`` (``state``,
``generate``, ``write-dict``, ``finish``); bad input is a :class:`~fairseq_plugins.errors.ConfigError`
(one line, exit 2), raised before anything is written.
"""

import functools
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import cli
from fairseq_plugins.lab.mqar.symbols import FILLER, QUERY_MARKER, half, max_pairs, task_symbols
from fairseq_plugins.lab.data.manifest import check_generated, write_json

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "valid", "test")
FILLERS = ("zeros", "random")
SLOT = 4  # tokens of a query slot: key, marker, value, end of line
# the codes of the generator's arrays besides the task ids 0..V-1
MARKER_CODE, LINE_END = -1, -2


# ----------------------------------------------------------------------------- the layout


@dataclass(frozen=True)
class Layout:
    """The validated shape of the examples (every size in tokens)."""

    vocab: int
    pairs: int
    length: int
    power_a: float
    filler: str
    window: int
    multiples: Tuple[str, ...]  # the bucket edges as written, ascending

    @property
    def slots(self) -> int:
        """S, the query slots after the context."""
        return (self.length - 2 * self.pairs - 1) // SLOT

    @property
    def longest(self) -> int:
        """The longest key–query distance: the first pair queried in the last slot."""
        return 2 * self.pairs + SLOT * (self.slots - 1)

    @property
    def edges(self) -> List[float]:
        return [float(m) * self.window for m in self.multiples]

    def query_offset(self, slot: int) -> int:
        """The offset of the key of a query in ``slot`` (1-based)."""
        return 2 * self.pairs + SLOT * (slot - 1)

    def buckets(self) -> List[Dict]:
        """``[{"label", "low", "high"}]``: distances d with low < d <= high (tokens; the last ``high`` None)."""
        edges, out, low = self.edges, [], 0.0
        for m, edge in zip(self.multiples, edges):
            out.append({"label": f"<= {m} W" if low == 0 else f"{self.multiples[len(out) - 1]}-{m} W",
                        "low": low, "high": edge})
            low = edge
        out.append({"label": f"> {self.multiples[-1]} W", "low": low, "high": None})
        return out

    def bucket_of(self, distance: int) -> int:
        return int(np.searchsorted(np.asarray(self.edges), distance, side="left"))


def parse_multiples(text: str) -> Tuple[str, ...]:
    """``--buckets`` (multiples of W, space or comma separated) -> the multiples as written, ascending.

    Raises:
        ConfigError: a value that is not a positive number, or one given twice.
    """
    values = []
    for word in text.replace(",", " ").split():
        try:
            m = float(word)
        except ValueError:
            raise ConfigError(f"--buckets takes multiples of the window (e.g. \"0.5 1 2 4\"), not '{word}'") from None
        if not m > 0 or not np.isfinite(m):
            raise ConfigError(f"--buckets takes positive multiples of the window, not '{word}'")
        values.append((m, format(m, "g")))
    if not values:
        raise ConfigError("--buckets needs at least one multiple of the window (e.g. \"0.5 1 2 4\")")
    ms = [m for m, _ in values]
    twice = sorted({m for m in ms if ms.count(m) > 1})
    if twice:
        raise ConfigError(f"--buckets gives {format(twice[0], 'g')} twice; give each edge once")
    return tuple(text for _, text in sorted(values))


def layout(args) -> Layout:
    """The examples' layout from the stage's options, every bound checked (nothing is read or written).

    Raises:
        ConfigError: an option out of range: an odd or too small vocabulary, more pairs than the key
            half holds, a length without room for the k queries, a window or a bucket edge not
            shorter than the longest key–query distance the length allows.
    """
    v, k, n = args.vocab, args.pairs, args.length
    if v < 4 or v % 2:
        raise ConfigError(f"--vocab must be an even integer >= 4 (keys in its first half, values in its second), "
                          f"not {v}")
    if k < 1:
        raise ConfigError(f"--pairs must be an integer >= 1, not {k}")
    if k > max_pairs(v):
        raise ConfigError(f"--pairs {k} is more than the {max_pairs(v)} keys of the vocabulary's key half "
                          f"(--vocab {v}: keys 1..{half(v) - 1}, id 0 the filler, values {half(v)}..{v - 1}); "
                          f"use --pairs <= {max_pairs(v)} or a larger --vocab")
    need = 2 * k + SLOT * k + 1
    if n < need:
        raise ConfigError(f"--length {n} has no room for {k} pairs and their {k} queries (2k + 4k + 1 = {need} "
                          f"tokens); raise --length to >= {need} or lower --pairs")
    if not args.power_a > 0 or not np.isfinite(args.power_a):
        raise ConfigError(f"--power-a must be a positive number (0.01: short gaps favoured, 1: uniform), "
                          f"not {args.power_a}")
    if args.window < 1:
        raise ConfigError(f"--window must be an integer >= 1, not {args.window}")
    lay = Layout(v, k, n, float(args.power_a), args.filler, args.window, parse_multiples(args.buckets))
    if lay.window >= lay.longest:
        raise ConfigError(f"--window {lay.window} is not shorter than the longest key–query gap of --length {n} "
                          f"({lay.longest} tokens): no query would lie beyond the window; raise --length or "
                          f"lower the window")
    for m, edge in zip(lay.multiples, lay.edges):
        if edge >= lay.longest:
            raise ConfigError(f"--buckets {m} x W = {edge:g} tokens is a gap longer than the sequence allows (the "
                              f"longest key–query gap of --length {n} is {lay.longest} tokens); drop {m} from "
                              f"--buckets or raise --length")
    return lay


# ----------------------------------------------------------------------------- examples


@functools.lru_cache(maxsize=8)
def gap_probabilities(slots: int, power_a: float) -> np.ndarray:
    """p(x) ∝ a·x^(a-1) over the slots x = 1..S (float64, summing to 1; read-only)."""
    x = np.arange(1, slots + 1, dtype=np.float64)
    p = power_a * x ** (power_a - 1.0)
    p = p / p.sum()
    p.flags.writeable = False
    return p


def example_rng(seed: int, split: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, SPLITS.index(split), index])


def make_example(lay: Layout, rng: np.random.Generator):
    """One example: ``(codes, record)``. ``codes`` (int64): task ids 0..V-1, :data:`MARKER_CODE` and
    :data:`LINE_END`; the record holds, per pair in context order, its key and value (symbols), the
    slot of its query, the offsets of the key and of its query's key, and their distance."""
    k, h = lay.pairs, half(lay.vocab)
    keys = rng.choice(np.arange(1, h), size=k, replace=False)
    values = rng.choice(np.arange(h, lay.vocab), size=k, replace=False)
    drawn = rng.choice(np.arange(1, lay.slots + 1), size=k, replace=False, p=gap_probabilities(lay.slots, lay.power_a))
    slots = drawn[rng.permutation(k)]
    region = SLOT * lay.slots
    codes = np.empty(2 * k + region + 1, dtype=np.int64)
    codes[0:2 * k:2], codes[1:2 * k:2] = keys, values
    codes[2 * k:2 * k + region] = 0 if lay.filler == "zeros" else rng.integers(0, lay.vocab, size=region)
    queries = [lay.query_offset(int(x)) for x in slots]
    for i, o in enumerate(queries):
        codes[o:o + SLOT] = (keys[i], MARKER_CODE, values[i], LINE_END)
    last_is_query = int(slots.max()) == lay.slots
    if last_is_query:
        codes = codes[:-1]  # the last query's line end ends the example
    else:
        codes[-1] = LINE_END
    symbols = task_symbols(lay.vocab)
    record = {"keys": [symbols[t] for t in keys.tolist()], "values": [symbols[t] for t in values.tolist()],
              "slots": [int(x) for x in slots], "key_offsets": [2 * i for i in range(k)], "query_offsets": queries,
              "distances": [o - 2 * i for i, o in enumerate(queries)], "tokens": int(codes.size),
              "lines": int((codes == LINE_END).sum())}
    return codes, record


def example_text(codes: np.ndarray, vocab: int) -> str:
    """The raw text of an example: its lines (one per line end), then the empty line."""
    symbols = task_symbols(vocab)
    words, lines = [], []
    for c in codes.tolist():
        if c == LINE_END:
            lines.append(" ".join(words) + "\n")
            words = []
        else:
            words.append(QUERY_MARKER if c == MARKER_CODE else symbols[c])
    return "".join(lines) + "\n"


def write_split(raw: str, split: str, count: int, lay: Layout, seed: int) -> None:
    """``raw/{split}.txt`` and its records ``raw/{split}.jsonl`` (one JSON line per example)."""
    with open(os.path.join(raw, f"{split}.txt"), "w", encoding="utf-8", newline="\n") as text, \
            open(os.path.join(raw, f"{split}.jsonl"), "w", encoding="utf-8", newline="\n") as records:
        for i in range(count):
            codes, record = make_example(lay, example_rng(seed, split, i))
            text.write(example_text(codes, lay.vocab))
            records.write(json.dumps(record, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------- the binarized check


def read_items(data: str, split: str):
    """The items (lines) of the binarized split ``data/split`` as fairseq-train reads them, or None."""
    from fairseq.data import indexed_dataset

    prefix = os.path.join(data, split)
    return indexed_dataset.make_dataset(prefix, indexed_dataset.infer_dataset_impl(prefix))


def check_example(ids: List[int], record: Dict, dictionary, lay: Layout) -> Optional[str]:
    """What is wrong with one example's binarized tokens ``ids`` (its lines joined, each ending in
    ``</s>``; the empty line after it not included) against its record and the layout, or None."""
    k, eos, h = lay.pairs, dictionary.eos(), half(lay.vocab)
    if len(ids) != record["tokens"] or record["tokens"] > lay.length:
        return f"{len(ids)} tokens where the record says {record['tokens']} (at most --length {lay.length})"
    if dictionary.unk() in ids:
        return f"an unknown token at offset {ids.index(dictionary.unk())}"
    task = {dictionary.index(s): i for i, s in enumerate(task_symbols(lay.vocab))}
    marker = dictionary.index(QUERY_MARKER)
    keys = [dictionary.index(s) for s in record["keys"]]
    values = [dictionary.index(s) for s in record["values"]]
    if len(set(keys)) != k or len(set(values)) != k or len(record["slots"]) != k or len(set(record["slots"])) != k:
        return f"not {k} distinct keys, values and slots"
    if not all(1 <= task.get(t, -1) < h for t in keys) or not all(h <= task.get(t, -1) < lay.vocab for t in values):
        return "a key outside the key half or a value outside the value half"
    scored = set()
    for i in range(k):
        if ids[2 * i] != keys[i] or ids[2 * i + 1] != values[i]:
            return f"pair {i} is not {record['keys'][i]} {record['values'][i]} at offsets {2 * i}, {2 * i + 1}"
        o = record["query_offsets"][i]
        if o != lay.query_offset(record["slots"][i]) or record["distances"][i] != o - 2 * i:
            return f"query {i} at offset {o} is not at its slot {record['slots'][i]}"
        if ids[o:o + SLOT] != [keys[i], marker, values[i], eos]:
            return f"offsets {o}..{o + SLOT - 1} do not hold the query '{record['keys'][i]} {QUERY_MARKER} " \
                   f"{record['values'][i]} </s>'"
        scored.update(range(o, o + SLOT))
    filler = [ids[j] for j in range(2 * k, len(ids) - 1) if j not in scored]
    if ids[-1] != eos or ids.count(marker) != k or ids.count(eos) != record["lines"]:
        return f"{ids.count(marker)} markers and {ids.count(eos)} line ends (want {k} and {record['lines']})"
    allowed = {dictionary.index(FILLER)} if lay.filler == "zeros" else set(task)
    if any(t not in allowed for t in filler):
        return "a filler position holds another token than the filler"
    return None


def example_items(items, split: str, records: List[Dict]):
    """``[(first item, stream offset)]`` of each example of a split (its lines, then its empty line).

    Raises:
        ConfigError: a split with other lines than its records say.
    """
    want = sum(r["lines"] + 1 for r in records)
    if items is None or len(items) != want:
        raise ConfigError(f"the binarized {split} split holds {0 if items is None else len(items)} lines, not the "
                          f"{want} of its {len(records)} examples; rebuild with --force")
    out, item, start = [], 0, 0
    for r in records:
        out.append((item, start))
        start += sum(items[item + j].numel() for j in range(r["lines"] + 1))
        item += r["lines"] + 1
    return out


def example_ids(items, item: int, lines: int) -> List[int]:
    """An example's tokens: its ``lines`` items from ``item`` joined (each ends in ``</s>``)."""
    ids: List[int] = []
    for j in range(lines):
        ids += items[item + j].tolist()
    return ids


def check_split(data: str, split: str, records: List[Dict], lay: Layout) -> Dict:
    """Every example of a binarized split against its record: ``{"examples", "tokens", "queries"
    (per bucket), "records" (each with ``item`` and ``start`` added)}``.

    Raises:
        ConfigError: naming the first example that does not match.
    """
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    items = read_items(data, split)
    places = example_items(items, split, records)
    per_bucket = [0] * len(lay.buckets())
    out, tokens = [], 0
    for i, (r, (item, start)) in enumerate(zip(records, places)):
        problem = check_example(example_ids(items, item, r["lines"]), r, dictionary, lay)
        empty = items[item + r["lines"]]
        if problem is None and (empty.numel() != 1 or int(empty[0]) != dictionary.eos()):
            problem = "no empty line after it"
        if problem:
            raise ConfigError(f"{split} example {i}: {problem}; rebuild with --force")
        for d in r["distances"]:
            per_bucket[lay.bucket_of(d)] += 1
        out.append({**r, "item": item, "start": start})
        tokens = start + r["tokens"] + 1
    return {"examples": len(out), "tokens": tokens, "queries": per_bucket, "records": out}


# ----------------------------------------------------------------------------- commands


def requested_options(args, lay: Layout) -> Dict:
    return {"vocab": lay.vocab, "pairs": lay.pairs, "length": lay.length, "power_a": lay.power_a,
            "filler": lay.filler, "window": lay.window, "buckets": list(lay.multiples),
            "examples": {s: getattr(args, f"{s}_examples") for s in SPLITS}, "seed": args.seed,
            "format_version": FORMAT_VERSION}


def expected_outputs() -> List[str]:
    files = ["dict.txt", "bin/dict.txt"]
    for s in SPLITS:
        files += [f"raw/{s}.txt", f"raw/{s}.jsonl", f"bin/{s}.bin", f"bin/{s}.idx"]
    return files


def state(args, lay: Layout) -> int:
    """Exit 0: build; 3: up to date (message on stdout); raise ConfigError: refuse."""
    return check_generated(args.out, args.force, MANIFEST, requested_options(args, lay), expected_outputs(),
                           f"vocabulary {lay.vocab}, {lay.pairs} pairs, length {lay.length}, seed {args.seed}")


def generate(args, lay: Layout) -> int:
    """RAW/{split}.txt and RAW/{split}.jsonl."""
    os.makedirs(args.raw, exist_ok=True)
    for split in SPLITS:
        write_split(args.raw, split, getattr(args, f"{split}_examples"), lay, args.seed)
    return 0


def write_dict(args, lay: Layout) -> int:
    """The fixed fairseq dictionary: the V task symbols in id order, then the marker."""
    from fairseq_plugins.lab.data.writers import write_fairseq_dict

    symbols = task_symbols(lay.vocab) + [QUERY_MARKER]
    write_fairseq_dict(args.path, symbols, {s: 1 for s in symbols})
    return 0


def read_records(raw: str, split: str) -> List[Dict]:
    with open(os.path.join(raw, f"{split}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def finish(args, lay: Layout) -> int:
    """Check every example against the binarized splits, then write OUT/manifest.json (last): the
    options, the reference lines, the buckets and, for valid and test, every record."""
    splits = {}
    for split in SPLITS:
        checked = check_split(os.path.join(args.out, "bin"), split, read_records(os.path.join(args.out, "raw"), split),
                              lay)
        if split == "train":
            checked.pop("records")
        splits[split] = checked
    manifest = {"options": requested_options(args, lay), "vocab": lay.vocab, "pairs": lay.pairs,
                "length": lay.length, "slots": lay.slots, "longest_distance": lay.longest, "window": lay.window,
                "buckets": lay.buckets(), "query_marker": QUERY_MARKER, "filler": lay.filler,
                "reference": {"2/V": 2.0 / lay.vocab, "1/k": 1.0 / lay.pairs, "1.0": 1.0},
                "splits": splits,
                "offsets": "token offsets from the example's first token in its binarized lines (each line ends in "
                           "</s>); item: the example's first line; start: its first token's offset in the split",
                "fairseq_data": os.path.join(os.path.realpath(args.out), "bin")}
    write_json(os.path.join(args.out, MANIFEST), manifest)
    print(f"fairseq-train data: {manifest['fairseq_data']}")
    return 0


def add_layout_options(q) -> None:
    """The options that set the examples (every stage takes them)."""
    q.add_argument("--vocab", type=int, required=True, help="V, the task's vocabulary (even; keys 1..V/2-1, "
                                                            "values V/2..V-1, 0 the filler)")
    q.add_argument("--pairs", type=int, required=True, help="k, key-value pairs (and queries) per example")
    q.add_argument("--length", type=int, required=True, help="L, most tokens of an example")
    q.add_argument("--power-a", type=float, default=0.01, help="a of the gap law p(x) ∝ a·x^(a-1) [0.01]")
    q.add_argument("--filler", choices=FILLERS, default="zeros", help="non-query positions [zeros]")
    q.add_argument("--window", type=int, required=True, help="W, the streaming arms' attention window (tokens)")
    q.add_argument("--buckets", default="0.5 1 2 4", help="distance bucket edges, multiples of W [\"0.5 1 2 4\"]")


def main(argv, prog="fairseq-longmem prep mqar"):
    """``fairseq-longmem prep mqar COMMAND``: the Python stages of scripts/mqar.sh's data build."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    commands = {"state": ("is OUT up to date / may it be rebuilt", state),
                "generate": ("write RAW/{train,valid,test}.txt and .jsonl", generate),
                "write-dict": ("write the fixed fairseq dictionary", write_dict),
                "finish": ("check the binarized splits, write OUT/manifest.json", finish)}
    for name, (help_, _) in commands.items():
        q = sub.add_parser(name, help=help_)
        q.add_argument("--out", required=name != "write-dict", help="output folder")
        add_layout_options(q)
        for split in SPLITS:
            q.add_argument(f"--{split}-examples", type=int, required=True, help=f"examples in {split}")
        q.add_argument("--seed", type=int, required=True, help="random seed")
        if name == "state":
            q.add_argument("--force", action="store_true", help="rebuild whatever OUT holds")
        if name == "generate":
            q.add_argument("--raw", required=True, help="folder for the text files")
        if name == "write-dict":
            q.add_argument("--path", required=True, help="dict.txt to write")
    args = p.parse_args(argv)
    for split in SPLITS:
        value = getattr(args, f"{split}_examples")
        if value < 1:
            raise ConfigError(f"--{split}-examples must be a positive integer, not {value}")
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0, not {args.seed}")
    return commands[args.cmd][1](args, layout(args))
