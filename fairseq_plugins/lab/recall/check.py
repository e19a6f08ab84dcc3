"""The recall task's examples checked in the tokens the models read (fairseq_plugins/lab/recall/make-recall.sh's
``finish``): every record of ``raw/{split}.jsonl`` against its line of the binarized split, read
with fairseq's indexed dataset, as fairseq-train reads it.

A record's offsets count from the example's first token in its binarized line (fairseq-preprocess
writes one item per raw line, so example i is item 2i and the empty line after it item 2i + 1);
:func:`check_split` adds the item and the token offset of its start in the split's concatenated
items (the stream ``streaming_lm`` and ``language_modeling`` cut), so that ``start + offset`` is
the token's place in the split.
"""

import os
from typing import Dict, List, Optional

from fairseq_plugins.lab.recall.symbols import KEY_MARKER, QUERY_MARKER, key_symbols
from fairseq_plugins.errors import ConfigError


def split_lines(data: str, split: str):
    """The items of the binarized split ``data/split`` (fairseq's indexed dataset, read as
    fairseq-train reads it, without its log line), or None when there is none."""
    from fairseq.data import indexed_dataset

    prefix = os.path.join(data, split)
    return indexed_dataset.make_dataset(prefix, indexed_dataset.infer_dataset_impl(prefix))


def check_record(line, record: Dict, dictionary, layout) -> Optional[str]:
    """What is wrong with one example's binarized ``line`` (ids ending in ``</s>``) against its
    record and the :class:`~fairseq_plugins.lab.recall.data.Layout`, or None."""
    ids = line.tolist()
    n, key = record["tokens"], dictionary.index(record["key"])
    if record["key"] not in key_symbols(layout.keys):
        return f"its key {record['key']} is not in the closed set of {layout.keys} keys"
    if len(ids) != n + 1 or ids[-1] != dictionary.eos():
        return f"{len(ids) - 1} tokens where the record says {n}"
    if n > layout.length:
        return f"{n} tokens, more than --length {layout.length}"
    if dictionary.unk() in ids:
        return f"an unknown token at offset {ids.index(dictionary.unk())}"
    gap = record["query_offset"] - record["key_offset"]
    if record["distance"] not in layout.distances or gap != record["distance"]:
        return f"the key lies {gap} tokens before the query, not at a requested distance"
    marker, query = dictionary.index(KEY_MARKER), dictionary.index(QUERY_MARKER)
    if ids.count(marker) != layout.repeat or ids.count(query) != 1:
        return f"{ids.count(marker)} key markers and {ids.count(query)} query markers (want {layout.repeat} and 1)"
    for k in record["key_offsets"]:
        if ids[k - 1] != marker or ids[k] != key:
            return f"offset {k} holds {dictionary[ids[k]]}, not the key {record['key']} after {KEY_MARKER}"
    if ids[record["query_offset"]] != query or ids[record["answer_offset"]] != key:
        return f"the query marker and the answer {record['key']} are not at offsets {record['query_offset']}, " \
               f"{record['answer_offset']}"
    return None


def check_split(data: str, split: str, records: List[Dict], layout) -> Dict:
    """The split's part of the manifest: ``{"examples", "tokens" (items' tokens in all), "per_distance"
    ([{"multiple", "distance", "examples"}], ascending), "records" (each with ``item`` and ``start``
    added)}``.

    Raises:
        ConfigError: a split whose lines are not the records' examples (naming the first bad one).
    """
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    lines = split_lines(data, split)
    if lines is None or len(lines) != 2 * len(records):
        raise ConfigError(f"{data}/{split} holds {0 if lines is None else len(lines)} lines, not the "
                          f"{2 * len(records)} of {len(records)} examples; rebuild with --force")
    out, start, counts = [], 0, {d: 0 for d in layout.distances}
    for i, record in enumerate(records):
        line, empty = lines[2 * i].long(), lines[2 * i + 1]
        problem = check_record(line, record, dictionary, layout)
        if problem is None and (empty.numel() != 1 or int(empty[0]) != dictionary.eos()):
            problem = "no empty line after it"
        if problem:
            raise ConfigError(f"{split} example {i} (line {2 * i + 1} of raw/{split}.txt): {problem}; "
                              "rebuild with --force")
        out.append({**record, "item": 2 * i, "start": start})
        counts[record["distance"]] += 1
        start += line.numel() + empty.numel()
    per_distance = [{"multiple": m, "distance": d, "examples": counts[d]}
                    for m, d in zip(layout.multiples, layout.distances)]
    return {"examples": len(out), "tokens": start, "per_distance": per_distance, "records": out}
