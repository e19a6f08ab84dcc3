"""MQAR, multi-query associative recall (docs/results/mqar.md; Arora et al., "Zoology", ICLR 2024):
the binarized data of the generator (:mod:`~fairseq_plugins.lab.mqar.generator`).

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
valid 1, test 2), so an example never depends on the split's size. Used by fairseq_plugins/lab/mqar/mqar.sh through
data-prep/stages.sh (``build_generated``) as ``fairseq-longmem prep mqar COMMAND`` (``state``,
``generate``, ``write-dict``, ``finish``); bad input is a :class:`~fairseq_plugins.errors.ConfigError`
(one line, exit 2), raised before anything is written.
"""

import json
import os
from typing import Dict, List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.recall_tasks import read_records, run_stages, stage_outputs, write_manifest
from fairseq_plugins.lab.data.manifest import check_generated
from fairseq_plugins.lab.mqar.generator import (FILLERS, FORMAT_VERSION, MANIFEST, SLOT, SPLITS, Layout, example_rng,
                                                example_text, layout, make_example)
from fairseq_plugins.lab.mqar.symbols import FILLER, QUERY_MARKER, half, task_symbols


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
    return stage_outputs(SPLITS)


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
                           "</s>); item: the example's first line; start: its first token's offset in the split"}
    return write_manifest(args.out, MANIFEST, manifest)


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


def add_options(q) -> None:
    """The options every stage takes between ``--out`` and ``--seed``: the layout and the split sizes."""
    add_layout_options(q)
    for split in SPLITS:
        q.add_argument(f"--{split}-examples", type=int, required=True, help=f"examples in {split}")


def check_counts(args) -> None:
    """Raise ConfigError for a split size below 1."""
    for split in SPLITS:
        value = getattr(args, f"{split}_examples")
        if value < 1:
            raise ConfigError(f"--{split}-examples must be a positive integer, not {value}")


def main(argv, prog="fairseq-longmem prep mqar"):
    """``fairseq-longmem prep mqar COMMAND``: the Python stages of fairseq_plugins/lab/mqar/mqar.sh's data build."""
    return run_stages(argv, prog, __doc__, {"state": state, "generate": generate, "write-dict": write_dict,
                                            "finish": finish}, layout, add_options, check_counts,
                      dict_needs_out=False)
