"""The MQAR generator (docs/results/mqar.md; Arora et al., "Zoology", ICLR 2024): the layout of an
example and the example itself, drawn from its own seeded generator. What an example holds and
where: :mod:`fairseq_plugins.lab.mqar.data` (its module docstring), which writes the splits."""

import functools
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.recall_tasks import window_multiples
from fairseq_plugins.lab.mqar.symbols import QUERY_MARKER, half, max_pairs, task_symbols

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
    def positive(word: str, m: float):
        if not m > 0 or not np.isfinite(m):
            raise ConfigError(f"--buckets takes positive multiples of the window, not '{word}'")
        return m, format(m, "g")

    values = window_multiples(text, "--buckets", "0.5 1 2 4", positive,
                              lambda m: f"--buckets gives {format(m, 'g')} twice; give each edge once")
    return tuple(text for _, text in values)


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
