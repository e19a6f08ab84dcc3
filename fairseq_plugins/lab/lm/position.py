"""Loss by position in the document (``fairseq-longmem analyze position``; docs/analysis.md).

Every token a checkpoint scores on a split (:mod:`~fairseq_plugins.lab.lm.scoring`, exactly
as ``fairseq-eval-lm`` scores it) gets its offset from the start of its document: documents are
separated by an empty line in the prepared text, i.e. a line holding only the end-of-sentence
token in the binarized split (docs/data-preparation.md; the same rule as ``streaming_lm``'s
``document_starts``). The separating line's token counts as the last token of the document it
ends. Offsets are grouped in buckets on a log scale (0–64, 64–256, 256–1k, 1k–4k, 4k–16k, 16k+
by default; empty buckets are left out), and each bucket's loss is the token-weighted mean, so
that the mean over all buckets is eval-lm's loss. Intervals: a 95% bootstrap over documents
(:mod:`~fairseq_plugins.lab.common.bootstrap`), per model and for the difference of every pair.
"""

import math
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from fairseq_plugins.lab.common.bootstrap import replicate_means, resample_weights
from fairseq_plugins.lab.lm.scoring import ScoredSplit
from fairseq_plugins.lab.common.intervals import Interval, combine
from fairseq_plugins.errors import ConfigError

DEFAULT_EDGES = (64, 256, 1024, 4096, 16384, 65536)
SEED_FOLDER = re.compile(r"seed[0-9]+")  # OUT/ARM/seedS/, as the recipes' --seeds write them
LN2 = math.log(2.0)


def document_offsets(positions: torch.Tensor, starts: Sequence[int]):
    """``(document index, offset)`` of split positions, each ``(n,)`` int64.

    Args:
        positions: indices in the split.
        starts: sorted token offsets where documents start (``document_starts``); tokens before
            the first start (leading empty lines) belong to the first document.
    """
    bounds = torch.tensor(sorted(set([0] + list(starts))), dtype=torch.long)
    doc = torch.searchsorted(bounds, positions, right=True) - 1
    return doc, positions - bounds[doc]


def bucket_index(offsets: torch.Tensor, edges: Sequence[int]) -> torch.Tensor:
    """Bucket of each offset: 0 for ``[0, edges[0])``, k for ``[edges[k-1], edges[k])``,
    ``len(edges)`` for ``[edges[-1], ∞)``."""
    return torch.bucketize(offsets, torch.tensor(list(edges), dtype=torch.long), right=True)


def check_edges(edges: Sequence[int]) -> List[int]:
    """``edges`` as a list, or ConfigError unless positive and strictly increasing."""
    edges = [int(e) for e in edges]
    if not edges or edges[0] <= 0 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ConfigError(f"--edges must be positive, strictly increasing offsets (e.g. 64,256,1024), got {edges}")
    return edges


def model_label(checkpoint: str, others: Sequence[str]) -> str:
    """The name of a checkpoint's folder (the arm in runs/quickstart/ARM/; in OUT/ARM/seedS/, the
    folder above ``seedS``), or its path where two checkpoints share a folder name and a seed folder."""
    def name(path: str) -> str:
        folder = os.path.dirname(os.path.abspath(path))
        if SEED_FOLDER.fullmatch(os.path.basename(folder)):
            folder = os.path.dirname(folder)
        return os.path.basename(folder) or path

    def seed_folder(path: str) -> str:
        return os.path.basename(os.path.dirname(os.path.abspath(path)))

    same = [o for o in others if name(o) == name(checkpoint) and seed_folder(o) == seed_folder(checkpoint)]
    return name(checkpoint) if len(same) <= 1 else checkpoint


@dataclass
class Run:
    """One scored checkpoint of an arm: ``arm`` (its label; ``ARM (wiped)`` for the memory-wiped
    control), the training ``seed`` the checkpoint records, and its scores."""

    arm: str
    seed: int
    scored: ScoredSplit
    wiped: bool = False


def _cells(s: ScoredSplit, starts: Sequence[int], edges: Sequence[int], num_docs: int):
    """``(loss (D, K+1), count (D, K+1), offsets (K,))``: bits and tokens per document and bucket, the
    last column all buckets together, and the buckets' offset sums."""
    num_buckets = len(edges) + 1
    order = torch.argsort(s.positions)
    positions, bits = s.positions[order], (-s.log_probs[order] / LN2)
    doc, offset = document_offsets(positions, starts)
    cell = (doc * num_buckets + bucket_index(offset, edges)).numpy()
    loss = np.bincount(cell, weights=bits.numpy(), minlength=num_docs * num_buckets).reshape(num_docs, -1)
    count = np.bincount(cell, minlength=num_docs * num_buckets).reshape(num_docs, -1).astype(np.float64)
    offsets = np.bincount(cell, weights=offset.double().numpy(), minlength=num_docs * num_buckets)
    return (np.concatenate([loss, loss.sum(1, keepdims=True)], 1),
            np.concatenate([count, count.sum(1, keepdims=True)], 1),
            offsets.reshape(num_docs, -1).sum(0))


def group_seeds(runs: Sequence[Tuple[str, int, str]]) -> Dict[str, List[int]]:
    """Indices of ``(arm, seed, checkpoint)`` items per arm, in the order given.

    Raises:
        ConfigError: a seed given twice for one arm.
    """
    arms: Dict[str, List[int]] = {}
    for i, (arm, seed, checkpoint) in enumerate(runs):
        for j in arms.get(arm, []):
            if runs[j][1] == seed:
                raise ConfigError(f"seed {seed} given twice for {arm} ({runs[j][2]} and {checkpoint}); give each "
                                  "seed's checkpoint once, or name the arms apart with --checkpoint ARM=PATH")
        arms.setdefault(arm, []).append(i)
    return arms


def analyze(runs: Sequence[Run], starts: Sequence[int], edges: Sequence[int] = DEFAULT_EDGES,
            replicates: int = 1000, seed: int = 1, level: float = 0.95) -> Dict:
    """The position analysis of one or more arms, each of one or more seeds, on the same split
    (position.json).

    Args:
        runs: the scored checkpoints (:class:`Run`), all of the same split; runs with the same
            ``arm`` are its seeds.
        starts: document start offsets in the split.
        edges: bucket edges (offsets).
        replicates, seed, level: the bootstrap over documents (one draw for every run).
    Returns:
        ``{"documents", "edges", "bootstrap", "models": [...], "differences": [...]}`` as
        docs/analysis.md describes: per arm ``label``, ``seeds``, ``runs`` (per seed
        ``seed``, ``checkpoint``, ``eval_args``, ``loss_bits``, ``ppl``), ``interval`` (what its
        intervals cover, :mod:`~fairseq_plugins.lab.common.intervals`), ``tokens``, ``loss_bits`` and
        ``ppl`` (means over the seeds) and ``buckets`` (``start``, ``end`` (None: open),
        ``tokens``, ``documents``, ``mean_offset``, ``loss_bits``, ``ppl``, ``ppl_low``,
        ``ppl_high``, ``seeds_loss_bits``); per pair ``a``, ``b``, ``paired`` (the same seeds,
        compared seed by seed), ``interval``, ``buckets`` and ``all`` (``loss_bits_diff`` = a − b,
        negative: a is better, ``low``, ``high``, ``dof``) and ``seeds`` (per seed both arms
        have: ``seed`` and ``buckets``, ``all`` with the documents-only interval).
    Raises:
        ConfigError: bad edges, checkpoints that scored different tokens, a seed given twice.
    """
    edges = check_edges(edges)
    num_docs = len(set([0] + list(starts)))
    weights = resample_weights(num_docs, replicates, seed)
    arms = group_seeds([(r.arm, r.seed, r.scored.checkpoint) for r in runs])
    sums, counts, offset_sums = [], None, None
    for r in runs:
        loss, count, offsets = _cells(r.scored, starts, edges, num_docs)
        if counts is not None and not np.array_equal(count, counts):
            raise ConfigError(f"{r.scored.checkpoint} scored other tokens of the split than "
                              f"{runs[0].scored.checkpoint}; compare checkpoints on the same data and split")
        counts, offset_sums = count, offsets
        sums.append(loss)
    kept = [k for k in range(len(edges) + 1) if counts[:, k].sum() > 0]
    columns = kept + [len(edges) + 1]  # the kept buckets, then all tokens
    spans = [(0 if k == 0 else edges[k - 1], edges[k] if k < len(edges) else None) for k in kept]
    totals = counts[:, columns].sum(0)
    point = [loss[:, columns].sum(0) / totals for loss in sums]  # (C,) bits per run
    for i, r in enumerate(runs):  # all tokens: eval-lm's own sum, so that both print one perplexity
        point[i][-1] = r.scored.loss_bits
    replicas = [replicate_means(loss, counts, weights)[:, columns] for loss in sums]

    def arm_values(label):
        idx = arms[label]
        return np.stack([point[i] for i in idx]), np.mean([replicas[i] for i in idx], axis=0)

    models = []
    for label, idx in arms.items():
        values, reps = arm_values(label)
        iv = combine([values], [1.0], reps, level)
        buckets = []
        for j, k in enumerate(kept):
            buckets.append({"start": spans[j][0], "end": spans[j][1], "tokens": int(totals[j]),
                            "documents": int((counts[:, k] > 0).sum()),
                            "mean_offset": float(offset_sums[k] / totals[j]), "loss_bits": float(iv.estimate[j]),
                            "ppl": float(2.0 ** iv.estimate[j]), "ppl_low": float(2.0 ** iv.low[j]),
                            "ppl_high": float(2.0 ** iv.high[j]),
                            "seeds_loss_bits": [float(v) for v in values[:, j]]})
        first = runs[idx[0]]
        models.append({"label": label, "wiped": first.wiped, "seeds": [runs[i].seed for i in idx],
                       "runs": [{"seed": runs[i].seed, "checkpoint": runs[i].scored.checkpoint,
                                 "eval_args": runs[i].scored.eval_args, "loss_bits": float(point[i][-1]),
                                 "ppl": float(2.0 ** point[i][-1])} for i in idx],
                       "checkpoint": first.scored.checkpoint, "task": first.scored.task,
                       "eval_args": first.scored.eval_args, "interval": iv.kind, "tokens": int(totals[-1]),
                       "loss_bits": float(iv.estimate[-1]), "ppl": float(2.0 ** iv.estimate[-1]),
                       "buckets": buckets})
    labels = list(arms)
    differences = []
    for a in range(len(labels)):
        for b in range(a + 1, len(labels)):
            differences.append(_difference(labels[a], labels[b], arms, runs, point, replicas, spans, level))
    return {"documents": num_docs, "edges": edges,
            "bootstrap": {"unit": "document", "replicates": replicates, "seed": seed, "level": level},
            "models": models, "differences": differences}


def _rows(spans, iv: Interval, j_all: int) -> Dict:
    def row(j):
        dof = float(iv.dof[j])
        return {"loss_bits_diff": float(iv.estimate[j]), "low": float(iv.low[j]), "high": float(iv.high[j]),
                "dof": dof if math.isfinite(dof) else None}  # None: infinite (standard JSON has no Infinity)
    return {"buckets": [{"start": spans[j][0], "end": spans[j][1], **row(j)} for j in range(len(spans))],
            "all": row(j_all)}


def _difference(a: str, b: str, arms, runs, point, replicas, spans, level) -> Dict:
    """One pair's differences a − b (see :func:`analyze`): seed by seed where both arms have the
    same seeds (``paired``), else the difference of the arms' means."""
    seeds_a = {runs[i].seed: i for i in arms[a]}
    seeds_b = {runs[i].seed: i for i in arms[b]}
    paired = sorted(seeds_a) == sorted(seeds_b)
    common = [s for s in seeds_a if s in seeds_b]
    reps = (np.mean([replicas[i] for i in arms[a]], axis=0) - np.mean([replicas[i] for i in arms[b]], axis=0))
    if paired:
        iv = combine([np.stack([point[seeds_a[s]] - point[seeds_b[s]] for s in common])], [1.0], reps, level)
    else:
        iv = combine([np.stack([point[i] for i in arms[a]]), np.stack([point[i] for i in arms[b]])],
                     [1.0, -1.0], reps, level)
    per_seed = []
    for s in common:
        one = combine([point[seeds_a[s]][None] - point[seeds_b[s]][None]], [1.0],
                      replicas[seeds_a[s]] - replicas[seeds_b[s]], level)
        per_seed.append({"seed": s, **_rows(spans, one, len(spans))})
    return {"a": a, "b": b, "paired": paired, "interval": iv.kind, **_rows(spans, iv, len(spans)),
            "seeds": per_seed}


def parse_checkpoint(spec: str):
    """``ARM=PATH`` → ``("ARM", "PATH")``; a bare ``PATH`` → ``(None, "PATH")`` (labelled by its folder,
    :func:`model_label`)."""
    arm, sep, path = spec.partition("=")
    if sep and arm and "/" not in arm and os.sep not in arm:
        return arm, path
    return None, spec


def run(checkpoints: Sequence[str], data: str, split: str, edges: Sequence[int] = DEFAULT_EDGES,
        streams: int = 16, batch_size: int = 16, context_window: Optional[int] = None, cpu: bool = True,
        replicates: int = 1000, seed: int = 1, memory_wiped: bool = False) -> Dict:
    """Score ``split`` with every checkpoint and :func:`analyze` it (what the command computes).

    Args:
        checkpoints: ``ARM=PATH`` or ``PATH`` (:func:`parse_checkpoint`); the checkpoints of an arm
            are its seeds (the seed each checkpoint's config records).
        memory_wiped: also score each arm whose checkpoints have a long-term memory with it wiped,
            as the arm ``ARM wiped`` (after the others).
        The rest: see :func:`analyze` and :func:`~fairseq_plugins.lab.lm.scoring.score_split`.
    Raises:
        ConfigError: see :func:`~fairseq_plugins.lab.lm.scoring.score_split` and :func:`analyze`;
            ``memory_wiped`` without a checkpoint that has a long-term memory. Every check on the
            checkpoints' configs runs before the first is scored.
    """
    from fairseq.data import Dictionary

    from fairseq_plugins.lab.lm.scoring import checkpoint_info, score_split, split_lines
    from fairseq_plugins.tasks.streaming_language_modeling import document_starts

    check_edges(edges)
    if not checkpoints:
        raise ConfigError("no --checkpoint given; pass one or more checkpoint_*.pt")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise ConfigError(f"{os.path.join(data, 'dict.txt')} is missing; --data is the fairseq-preprocess folder "
                          "(data-prep's OUT/bin)")
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    starts = document_starts(split_lines(data, split, dictionary), dictionary.eos())
    specs = [parse_checkpoint(c) for c in checkpoints]
    bare = [path for arm, path in specs if arm is None]
    specs = [(arm or model_label(path, bare), path) for arm, path in specs]
    reserved = [arm for arm, _ in specs if arm.endswith(" wiped")]
    if reserved:
        raise ConfigError(f"the arm name '{reserved[0]}' ends in ' wiped', the name --memory-wiped gives an arm's "
                          "control; name the arm otherwise (--checkpoint ARM=PATH)")
    infos = [checkpoint_info(path) for _, path in specs]
    arms = group_seeds([(arm, info.seed, path) for (arm, path), info in zip(specs, infos)])
    for arm, idx in arms.items():
        kinds = {(infos[i].task["_name"], infos[i].arch, infos[i].long_term_memory) for i in idx}
        if len(kinds) > 1:
            raise ConfigError(f"the checkpoints of {arm} are of different models ({', '.join(specs[i][1] for i in idx)}: "
                              "task, architecture or long-term memory differ); give each model its own arm name "
                              "(--checkpoint ARM=PATH)")
    wiped = []
    if memory_wiped:
        with_memory = {arm for (arm, _), info in zip(specs, infos) if info.long_term_memory}
        wiped = [(arm, path, info) for (arm, path), info in zip(specs, infos) if arm in with_memory]
        if not wiped:
            raise ConfigError("--memory-wiped needs a checkpoint with a long-term memory (an ∞-former); none of "
                              f"{', '.join(sorted({a for a, _ in specs}))} has one: drop --memory-wiped")

    def score(path, info, wipe):  # the config read above, not read again
        return score_split(path, data, split, streams=streams, batch_size=batch_size, context_window=context_window,
                           cpu=cpu, memory_wiped=wipe, task_cfg=info.task)

    runs = [Run(arm, info.seed, score(path, info, False)) for (arm, path), info in zip(specs, infos)]
    runs += [Run(f"{arm} wiped", info.seed, score(path, info, True), wiped=True) for arm, path, info in wiped]
    result = analyze(runs, starts, edges, replicates=replicates, seed=seed)
    result.update({"data": data, "split": split})
    return result
