"""Recall by distance: a checkpoint's answer accuracy per distance (docs/results/recall.md).

:func:`score` reads the test examples of ``fairseq_plugins/lab/recall/make-recall.sh``'s output (``DIR/bin`` and
``DIR/manifest.json``: per example its key and the token offsets of the key and the query marker,
checked against the binarized split), and predicts the token after each query marker, the
answer, teacher-forced, as the checkpoint was trained (:mod:`~fairseq_plugins.lab.common.answers`):
a ``streaming_lm`` checkpoint reads each example as its own document, its memory starting empty at
the example's first token; a ``language_modeling`` checkpoint reads the last ``--tokens-per-sample``
tokens up to the query marker. ``memory_wiped`` switches every long-term memory of the model to
the memory-wiped control first
(:func:`~fairseq_plugins.modules.memory.contract.set_memory_wiped`).

Per distance: ``accuracy`` (the share of examples whose argmax over the whole dictionary at the
query marker is the key), with its counts, and ``mean_log_prob`` (the mean natural-log
probability of the key there). Chance is 1/K, a uniform guess among the K keys.
Run as ``fairseq-longmem recall score`` (:mod:`fairseq_plugins.lab.recall.cli`).
"""

import os
from typing import Dict, List, Optional

import torch

from fairseq_plugins.lab.recall.data import MANIFEST, Layout
from fairseq_plugins.lab.recall.check import check_record, split_lines
from fairseq_plugins.lab.recall.symbols import QUERY_MARKER
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.answers import (Answers, answer_examples, arm_of, check_dictionary, context_text,
                                                 load_checkpoint, num_updates, read_manifest as read_task_manifest,
                                                 read_state, task_dictionary, TaskExamples, window_of)

MAKE = "fairseq_plugins/lab/recall/make-recall.sh"


# positions, answers (n, 1): the query marker, the key; distances (n,): from the key to the query marker
RecallExamples = TaskExamples


def read_manifest(data: str) -> Dict:
    """``DATA/../manifest.json`` of a make-recall.sh output whose ``bin/`` folder is ``data``.

    Raises:
        ConfigError: no manifest there (not recall data, or an unfinished build).
    """
    return read_task_manifest(data, MANIFEST, lambda path: f"{data} is not the bin/ folder of a finished {MAKE} "
                              f"run (no {path} or dict.txt); pass DIR/bin of: bash {MAKE} --out DIR")


def layout_of(manifest: Dict) -> Layout:
    """The examples' :class:`~fairseq_plugins.lab.recall.data.Layout` a manifest records."""
    options = manifest["options"]
    distances = distances_of(manifest)
    return Layout(manifest["window"], [m for m, _ in distances], [d for _, d in distances], options["keys"],
                  options["repeat"], manifest["length"])


def distances_of(manifest: Dict) -> List[tuple]:
    """``[(multiple as written, distance in tokens)]`` of a manifest, ascending."""
    return sorted(manifest["distances"].items(), key=lambda item: item[1])


def load_examples(data: str, split: str, dictionary, manifest: Dict,
                  max_examples: Optional[int] = None) -> RecallExamples:
    """The examples of a binarized split, each checked against its manifest record.

    Raises:
        ConfigError: a split the manifest does not hold, or lines that differ from its records.
    """
    if split not in manifest["splits"]:
        raise ConfigError(f"split '{split}' is not in {MAKE}'s output ({', '.join(manifest['splits'])})")
    records = manifest["splits"][split]["records"][:max_examples]
    lines = split_lines(data, split)
    lay = layout_of(manifest)
    eos = torch.tensor([dictionary.eos()])
    rows, positions, answers = [], [], []
    for r in records:
        line = lines[r["item"]].long() if lines is not None and r["item"] < len(lines) else torch.zeros(0)
        problem = check_record(line, r, dictionary, lay) if line.numel() else "missing"
        if problem:
            raise ConfigError(f"{data}/{split} line {r['item'] + 1} does not match {MAKE}'s manifest ({problem}); "
                              f"rebuild the data with {MAKE} --force")
        rows.append(torch.cat([eos, line[:r["query_offset"] + 1]]))  # </s> first, as a streamed document
        positions.append(r["query_offset"] + 1)
        answers.append(int(line[r["answer_offset"]]))
    return RecallExamples(rows, torch.tensor(positions).view(-1, 1), torch.tensor(answers).view(-1, 1),
                          torch.tensor([r["distance"] for r in records], dtype=torch.long))


def per_distance(answers: Answers, examples: RecallExamples, manifest: Dict) -> List[Dict]:
    """``[{"multiple", "distance", "examples", "correct", "accuracy", "mean_log_prob"}]`` per distance of
    the manifest (ascending; a distance without examples has None for its accuracy)."""
    hits = (answers.predictions == examples.answers)[:, 0]
    rows = []
    for multiple, distance in distances_of(manifest):
        mine = examples.distances == distance
        n = int(mine.sum())
        rows.append({"multiple": multiple, "distance": distance, "examples": n, "correct": int(hits[mine].sum()),
                     "accuracy": float(hits[mine].double().mean()) if n else None,
                     "mean_log_prob": float(answers.log_probs[mine, 0].mean()) if n else None})
    return rows


def score_examples(model, examples: RecallExamples, manifest: Dict, window: Optional[int] = None,
                   batch_size: int = 16, pad: int = 1) -> Dict:
    """The answers of ``model`` on ``examples`` (``window``: see
    :func:`~fairseq_plugins.lab.common.answers.read_answers`): ``{"examples", "correct", "accuracy",
    "mean_log_prob", "distances": per_distance(...)}``."""
    read, hits = answer_examples(model, examples, window, batch_size, pad)
    n = len(examples.rows)
    return {"examples": n, "correct": int(hits.sum()), "accuracy": float(hits.double().mean()) if n else None,
            "mean_log_prob": float(read.log_probs.mean()) if n else None,
            "distances": per_distance(read, examples, manifest)}


def score(checkpoint: str, data: str, split: str = "test", memory_wiped: bool = False,
          max_examples: Optional[int] = None, batch_size: int = 16, cpu: bool = True) -> Dict:
    """One checkpoint's recall on one split (module docstring): :func:`score_examples`'s result with
    ``{"arm", "checkpoint", "data", "split", "memory_wiped", "window" (the data's W), "keys", "chance",
    "context", "parameters", "num_updates"}``.

    Raises:
        ConfigError: a missing checkpoint or one that is no fairseq checkpoint, data that is not
            make-recall.sh's, a checkpoint trained with another dictionary, ``memory_wiped`` for a
            model without long-term memory.
    """
    if not os.path.isfile(checkpoint):
        raise ConfigError(f"checkpoint {checkpoint} not found; train first (fairseq_plugins/lab/recall/recall.sh)")
    state = read_state(checkpoint)  # a fairseq checkpoint, before the data is read
    manifest = read_manifest(data)
    dictionary = task_dictionary(data, QUERY_MARKER, f"not the data of {MAKE}")
    check_dictionary(state, dictionary, checkpoint, data, "recall data", "fairseq_plugins/lab/recall/recall.sh")
    model, cfg, task = load_checkpoint(checkpoint, data, cpu)
    if memory_wiped:
        from fairseq_plugins.modules.memory.contract import set_memory_wiped

        set_memory_wiped(model)
    examples = load_examples(data, split, task.source_dictionary, manifest, max_examples)
    window = window_of(model, cfg)
    result = score_examples(model, examples, manifest, window, batch_size, task.source_dictionary.pad())
    return {"arm": arm_of(cfg), "checkpoint": os.path.abspath(checkpoint), "data": os.path.abspath(data),
            "split": split, "memory_wiped": memory_wiped, "window": manifest["window"],
            "keys": len(manifest["keys"]), "chance": manifest["chance"], "context": context_text(window, cfg),
            "parameters": sum(p.numel() for p in model.parameters()), "num_updates": num_updates(checkpoint),
            **result}
