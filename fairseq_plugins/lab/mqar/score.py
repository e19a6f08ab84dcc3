"""MQAR: a checkpoint's accuracy at the query positions, overall and per key–query distance bucket,
and its state size (docs/results/mqar.md).

:func:`score` reads the test examples of fairseq_plugins/lab/mqar/mqar.sh's data (``DIR/bin`` and ``DIR/manifest.json``:
per example its keys, values and the offsets of its queries, checked against the binarized split)
and predicts, teacher-forced as the checkpoint was trained
(:func:`~fairseq_plugins.lab.common.answers.read_answers`), the token after each query marker: the
queried key's value. A ``streaming_lm`` checkpoint reads each example as its own document, its
memory starting empty at the example's first token; a ``language_modeling`` checkpoint reads the
example from its first token too when its ``--tokens-per-sample`` holds the whole example
(transformer_lm's full attention; for a causal model one call over the row is the same as one per
query), else the last ``--tokens-per-sample`` tokens up to each query. ``memory_wiped`` switches
every long-term memory to the memory-wiped control first.

The metric (Zoology's): ``accuracy`` is the mean over examples of the fraction of its k queries
whose argmax over the whole dictionary is the value; per bucket of the key–query distance the
fraction of the bucket's queries answered (``queries``, ``correct``), and the mean natural-log
probability of the values. The reference lines: 2/V (no information: a guess among the V/2
values), 1/k (the example's values known, not which key each belongs to) and 1.0.

:func:`state_bytes` counts the state the sequence mixer of each layer holds (float32, 4 bytes):
attention as the keys and values over the positions it attends to (Zoology's count: full attention
2·d·length), a memory as the tensor it keeps — Σ over layers of

* ``transformer_lm``: 2·d·L (L: the data's ``--length``, the longest example);
* the streaming arms: 2·e·(segment + mem_len), the keys and values of the attention window at its
  widest (the last token of a segment; the short-term memory keeps the mem_len attention inputs
  they are computed from), plus the ∞-former's long-term memory B, N·e (mqar.md's count), or the
  compressive memory's n_cm compressed slots of width e, n_cm·e.

Run as ``fairseq-longmem mqar score`` (:mod:`fairseq_plugins.lab.mqar.cli`).
"""

import os
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.answers import (answer_examples, check_dictionary, context_text, load_checkpoint,
                                                 num_updates, read_manifest as read_task_manifest, read_state,
                                                 task_dictionary, TaskExamples, window_of)
from fairseq_plugins.lab.mqar.data import MANIFEST, Layout, check_example, example_ids, read_items
from fairseq_plugins.lab.mqar.symbols import QUERY_MARKER

RECIPE = "fairseq_plugins/lab/mqar/mqar.sh"
FLOAT_BYTES = 4


# positions, answers, distances (n, k): the query markers, the values, the key–query distances
MqarExamples = TaskExamples


def read_manifest(data: str) -> Dict:
    """``DATA/../manifest.json`` of an MQAR data folder whose ``bin/`` is ``data``.

    Raises:
        ConfigError: no manifest there (not MQAR data, or an unfinished build).
    """
    manifest = read_task_manifest(data, MANIFEST, lambda path: f"{data} is not the bin/ folder of finished MQAR data "
                                  f"(no {path} or dict.txt); pass DATA/bin of {RECIPE} --data DATA")
    if "pairs" not in manifest or "buckets" not in manifest:
        path = os.path.join(os.path.dirname(os.path.abspath(data)), MANIFEST)
        raise ConfigError(f"{path} is not an MQAR manifest (another task's data); pass DATA/bin of {RECIPE}")
    return manifest


def layout_of(manifest: Dict) -> Layout:
    """The :class:`~fairseq_plugins.lab.mqar.data.Layout` a manifest records."""
    o = manifest["options"]
    return Layout(o["vocab"], o["pairs"], o["length"], o["power_a"], o["filler"], o["window"], tuple(o["buckets"]))


def load_examples(data: str, split: str, dictionary, manifest: Dict,
                  max_examples: Optional[int] = None) -> MqarExamples:
    """The examples of a binarized split, each checked against its manifest record.

    Raises:
        ConfigError: a split the manifest keeps no records of, or lines that differ from them.
    """
    records = (manifest["splits"].get(split) or {}).get("records")
    if records is None:
        raise ConfigError(f"the MQAR manifest keeps the examples of valid and test, not '{split}'")
    records = records[:max_examples]
    items, lay = read_items(data, split), layout_of(manifest)
    eos = torch.tensor([dictionary.eos()])
    rows, positions, answers = [], [], []
    for r in records:
        ok = items is not None and r["item"] + r["lines"] <= len(items)
        ids = example_ids(items, r["item"], r["lines"]) if ok else []
        problem = check_example(ids, r, dictionary, lay) if ok else "missing"
        if problem:
            raise ConfigError(f"{data}/{split} item {r['item'] + 1} does not match the MQAR manifest ({problem}); "
                              f"rebuild the data ({RECIPE} builds it, or its data stage with --force)")
        last = max(r["query_offsets"]) + 1  # the last marker
        rows.append(torch.cat([eos, torch.tensor(ids[:last + 1])]))  # </s> first, as a streamed document
        positions.append([o + 2 for o in r["query_offsets"]])  # the marker, one further for the </s>
        answers.append([dictionary.index(v) for v in r["values"]])
    k = lay.pairs
    return MqarExamples(rows, torch.tensor(positions, dtype=torch.long).view(-1, k),
                        torch.tensor(answers, dtype=torch.long).view(-1, k),
                        torch.tensor([r["distances"] for r in records], dtype=torch.long).view(-1, k))


def per_bucket(hits: Tensor, log_probs: Tensor, distances: Tensor, manifest: Dict) -> List[Dict]:
    """``[{"label", "low", "high", "queries", "correct", "accuracy", "mean_log_prob"}]`` per distance bucket
    of the manifest (an empty bucket has None for its accuracy)."""
    lay = layout_of(manifest)
    which = torch.tensor([[lay.bucket_of(int(d)) for d in row] for row in distances.tolist()],
                         dtype=torch.long).view(distances.shape)
    out = []
    for b, bucket in enumerate(manifest["buckets"]):
        mine = which == b
        n = int(mine.sum())
        out.append({**bucket, "queries": n, "correct": int(hits[mine].sum()),
                    "accuracy": float(hits[mine].double().mean()) if n else None,
                    "mean_log_prob": float(log_probs[mine].mean()) if n else None})
    return out


def score_examples(model, examples: MqarExamples, manifest: Dict, window: Optional[int] = None,
                   batch_size: int = 16, pad: int = 1) -> Dict:
    """The answers of ``model`` on ``examples`` (``window``: see
    :func:`~fairseq_plugins.lab.common.answers.read_answers`): ``{"examples", "queries", "correct",
    "accuracy" (mean over examples of the fraction of their queries answered), "mean_log_prob",
    "per_example" (each example's fraction), "buckets": per_bucket(...)}``."""
    answers, hits = answer_examples(model, examples, window, batch_size, pad)
    n = len(examples.rows)
    fractions = hits.double().mean(1) if n else torch.zeros(0, dtype=torch.float64)
    return {"examples": n, "queries": int(hits.numel()), "correct": int(hits.sum()),
            "accuracy": float(fractions.mean()) if n else None,
            "mean_log_prob": float(answers.log_probs.mean()) if n else None,
            "per_example": [round(float(f), 6) for f in fractions],
            "buckets": per_bucket(hits, answers.log_probs, examples.distances, manifest)}


def state_bytes(arch: str, model_cfg, length: int, segment_lengths: Optional[tuple] = None) -> Dict:
    """The state of the sequence mixers (module docstring): ``{"bytes", "per_layer" (floats), "layers",
    "count" (the formula in words)}``.

    Args:
        arch: the checkpoint's architecture (``cfg.model._name``).
        model_cfg: its model config (``decoder_layers``, ``decoder_embed_dim``; the streaming models'
            ``no_long_term_memory``, ``memory_type``, ``num_basis_functions``, ``compressed_memory_slots``).
        length: L, the data's longest example (full attention's span).
        segment_lengths: a streaming model's ``(segment, mem_len)`` (None: full attention).
    """
    layers, e = int(model_cfg.decoder_layers), int(model_cfg.decoder_embed_dim)
    if segment_lengths is None:
        per_layer, count = 2 * e * length, f"2·d·L = 2·{e}·{length}"
    else:
        segment, mem = (int(s) for s in segment_lengths)
        per_layer, count = 2 * e * (segment + mem), f"2·e·(segment + mem_len) = 2·{e}·({segment} + {mem})"
        if not getattr(model_cfg, "no_long_term_memory", False):
            n = int(model_cfg.num_basis_functions)
            if str(getattr(model_cfg, "memory_type", "continuous")) == "compressive":
                slots = getattr(model_cfg, "compressed_memory_slots", None)
                n = n if slots is None else int(slots)
                count += f" + n_cm·e = {n}·{e} (compressed slots)"
            else:
                count += f" + N·e = {n}·{e} (B)"
            per_layer += n * e
    return {"bytes": FLOAT_BYTES * layers * per_layer, "per_layer": per_layer, "layers": layers,
            "count": f"{FLOAT_BYTES} bytes × {layers} layers × ({count})"}


def arm_of(arch: str, model_cfg) -> str:
    """The MQAR arm a checkpoint's model config belongs to (memory_off and its parameter-matched twin
    differ only in their FFN width: both read ``memory_off``; the recipe passes the arm's name)."""
    if arch == "transformer_lm" or not hasattr(model_cfg, "no_long_term_memory"):
        return arch
    if model_cfg.no_long_term_memory:
        return "memory_off"
    if str(getattr(model_cfg, "memory_type", "continuous")) == "compressive":
        return "compressive"
    read = str(model_cfg.memory_read)
    return f"infinite_former_{read}" if read != "location" else "infinite_former"


def score(checkpoint: str, data: str, split: str = "test", memory_wiped: bool = False,
          max_examples: Optional[int] = None, batch_size: int = 16, cpu: bool = True,
          arm: Optional[str] = None) -> Dict:
    """One checkpoint's MQAR accuracy on one split: :func:`score_examples`'s result with ``{"arm",
    "checkpoint", "data", "split", "memory_wiped", "vocab", "pairs", "length", "window", "reference",
    "state", "context", "parameters", "num_updates"}``.

    Raises:
        ConfigError: a missing checkpoint, data that is not MQAR's, a checkpoint trained with another
            dictionary, ``memory_wiped`` for a model without long-term memory.
    """
    if not os.path.isfile(checkpoint):
        raise ConfigError(f"checkpoint {checkpoint} not found; train first ({RECIPE})")
    manifest = read_manifest(data)
    dictionary = task_dictionary(data, QUERY_MARKER, f"not MQAR data of {RECIPE}")
    check_dictionary(read_state(checkpoint), dictionary, checkpoint, data, "MQAR data", RECIPE)
    model, cfg, task = load_checkpoint(checkpoint, data, cpu)
    if memory_wiped:
        from fairseq_plugins.modules.memory.contract import set_memory_wiped

        set_memory_wiped(model)
    examples = load_examples(data, split, task.source_dictionary, manifest, max_examples)
    window = window_of(model, cfg)
    if window is not None and window >= max((len(r) for r in examples.rows), default=0):
        window = None  # the whole example in view: one call per row is the same for a causal model
    result = score_examples(model, examples, manifest, window, batch_size, task.source_dictionary.pad())
    arch = cfg.model._name
    streaming = model.segment_lengths() if hasattr(model, "segment_lengths") else None
    return {"arm": arm or arm_of(arch, cfg.model), "checkpoint": os.path.abspath(checkpoint),
            "data": os.path.abspath(data), "split": split, "memory_wiped": memory_wiped,
            "vocab": manifest["vocab"], "pairs": manifest["pairs"], "length": manifest["length"],
            "window": manifest["window"], "reference": manifest["reference"],
            "state": state_bytes(arch, cfg.model, manifest["length"], streaming),
            "context": context_text(window, cfg) if window is not None or streaming is not None else
            f"the whole example from its first token (--tokens-per-sample {cfg.task.tokens_per_sample} holds it)",
            "parameters": sum(p.numel() for p in model.parameters()), "num_updates": num_updates(checkpoint),
            **result}
