"""Loss by position in the document (``fairseq-longmem analyze position``; docs/analysis.md).

Every token a checkpoint scores on a split (:mod:`~fairseq_plugins.analysis.scoring`, exactly
as ``fairseq-eval-lm`` scores it) gets its offset from the start of its document: documents are
separated by an empty line in the prepared text, i.e. a line holding only the end-of-sentence
token in the binarized split (docs/data-preparation.md; the same rule as ``streaming_lm``'s
``document_starts``). The separating line's token counts as the last token of the document it
ends. Offsets are grouped in buckets on a log scale (0–64, 64–256, 256–1k, 1k–4k, 4k–16k, 16k+
by default; empty buckets are left out), and each bucket's loss is the token-weighted mean, so
that the mean over all buckets is eval-lm's loss. Intervals: a 95% bootstrap over documents
(:mod:`~fairseq_plugins.analysis.bootstrap`), per model and for the difference of every pair.
"""

import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from fairseq_plugins.analysis.bootstrap import percentile_interval, replicate_means, resample_weights
from fairseq_plugins.analysis.scoring import ScoredSplit
from fairseq_plugins.errors import ConfigError

DEFAULT_EDGES = (64, 256, 1024, 4096, 16384)
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
    """The name of a checkpoint's folder (the arm in runs/quickstart/ARM/), or its path where
    two checkpoints share a folder name."""
    name = os.path.basename(os.path.dirname(os.path.abspath(checkpoint))) or checkpoint
    same = [o for o in others if os.path.basename(os.path.dirname(os.path.abspath(o))) == name]
    return name if len(same) <= 1 else checkpoint


def analyze(scored: Sequence[ScoredSplit], starts: Sequence[int], edges: Sequence[int] = DEFAULT_EDGES,
            replicates: int = 1000, seed: int = 1, level: float = 0.95) -> Dict:
    """The position analysis of one or more checkpoints on the same split (position.json).

    Args:
        scored: one :class:`ScoredSplit` per checkpoint, all of the same split.
        starts: document start offsets in the split.
        edges: bucket edges (offsets).
        replicates, seed, level: the bootstrap.
    Returns:
        ``{"documents", "edges", "bootstrap", "models": [...], "differences": [...]}`` as
        docs/analysis.md describes: per model ``checkpoint``, ``label``, ``tokens``,
        ``loss_bits``, ``ppl`` and ``buckets`` (``start``, ``end`` (None: open), ``tokens``,
        ``documents``, ``mean_offset``, ``loss_bits``, ``ppl``, ``ppl_low``, ``ppl_high``); per pair ``a``, ``b``
        and per bucket ``loss_bits_diff`` = a − b (negative: a is better) with ``low``, ``high``.
    Raises:
        ConfigError: bad edges, or checkpoints that scored different tokens.
    """
    edges = check_edges(edges)
    num_docs = len(set([0] + list(starts)))
    num_buckets = len(edges) + 1
    weights = resample_weights(num_docs, replicates, seed)
    names = [s.checkpoint for s in scored]
    per_model, sums = [], []
    counts = None
    for s in scored:
        order = torch.argsort(s.positions)
        positions, bits = s.positions[order], (-s.log_probs[order] / LN2)
        doc, offset = document_offsets(positions, starts)
        cell = (doc * num_buckets + bucket_index(offset, edges)).numpy()
        loss = np.bincount(cell, weights=bits.numpy(), minlength=num_docs * num_buckets).reshape(num_docs, -1)
        count = np.bincount(cell, minlength=num_docs * num_buckets).reshape(num_docs, -1).astype(np.float64)
        offsets = np.bincount(cell, weights=offset.double().numpy(), minlength=num_docs * num_buckets)
        if counts is not None and not np.array_equal(count, counts):
            raise ConfigError(f"{s.checkpoint} scored other tokens of the split than {scored[0].checkpoint}; "
                              "compare checkpoints on the same data and split")
        counts, offset_sums = count, offsets.reshape(num_docs, -1).sum(0)
        sums.append(loss)
        per_model.append((s, positions.numel(), float(bits.sum() / positions.numel())))
    kept = [k for k in range(num_buckets) if counts[:, k].sum() > 0]
    spans = [(0 if k == 0 else edges[k - 1], edges[k] if k < len(edges) else None) for k in kept]
    replicas = [replicate_means(loss, counts, weights)[:, kept] for loss in sums]
    models = []
    for (s, tokens, loss_bits), loss, rep in zip(per_model, sums, replicas):
        low, high = percentile_interval(rep, level)
        buckets = []
        for j, k in enumerate(kept):
            n = counts[:, k].sum()
            mean = loss[:, k].sum() / n
            buckets.append({"start": spans[j][0], "end": spans[j][1], "tokens": int(n),
                            "documents": int((counts[:, k] > 0).sum()), "mean_offset": float(offset_sums[k] / n),
                            "loss_bits": float(mean),
                            "ppl": float(2.0 ** mean), "ppl_low": float(2.0 ** low[j]),
                            "ppl_high": float(2.0 ** high[j])})
        models.append({"checkpoint": s.checkpoint, "label": model_label(s.checkpoint, names), "task": s.task,
                       "eval_args": s.eval_args, "tokens": tokens, "loss_bits": loss_bits,
                       "ppl": float(2.0 ** loss_bits), "buckets": buckets})
    differences = []
    for a in range(len(scored)):
        for b in range(a + 1, len(scored)):
            low, high = percentile_interval(replicas[a] - replicas[b], level)
            rows = []
            for j, k in enumerate(kept):
                n = counts[:, k].sum()
                rows.append({"start": spans[j][0], "end": spans[j][1],
                             "loss_bits_diff": float((sums[a][:, k].sum() - sums[b][:, k].sum()) / n),
                             "low": float(low[j]), "high": float(high[j])})
            differences.append({"a": models[a]["label"], "b": models[b]["label"], "buckets": rows})
    return {"documents": num_docs, "edges": edges,
            "bootstrap": {"unit": "document", "replicates": replicates, "seed": seed, "level": level},
            "models": models, "differences": differences}


def run(checkpoints: Sequence[str], data: str, split: str, edges: Sequence[int] = DEFAULT_EDGES,
        streams: int = 16, batch_size: int = 16, context_window: Optional[int] = None, cpu: bool = True,
        replicates: int = 1000, seed: int = 1) -> Dict:
    """Score ``split`` with every checkpoint and :func:`analyze` it (what the command computes).

    Raises:
        ConfigError: see :func:`~fairseq_plugins.analysis.scoring.score_split` and :func:`analyze`.
    """
    from fairseq.data import Dictionary

    from fairseq_plugins.analysis.scoring import score_split, split_lines
    from fairseq_plugins.tasks.streaming_language_modeling import document_starts

    check_edges(edges)
    if not checkpoints:
        raise ConfigError("no --checkpoint given; pass one or more checkpoint_*.pt")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise ConfigError(f"{os.path.join(data, 'dict.txt')} is missing; --data is the fairseq-preprocess folder "
                          "(data-prep's OUT/bin)")
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    starts = document_starts(split_lines(data, split, dictionary), dictionary.eos())
    scored = [score_split(c, data, split, streams=streams, batch_size=batch_size, context_window=context_window,
                          cpu=cpu) for c in checkpoints]
    result = analyze(scored, starts, edges, replicates=replicates, seed=seed)
    result.update({"data": data, "split": split})
    return result
