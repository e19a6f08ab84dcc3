"""Scores per fact of summaries of the facts corpus (docs/summarization.md, "Facts: scores per
fact"; the corpus: docs/data-preparation.md, "The facts corpus").

Inputs: hypotheses, one line per example (``generate-summaries.sh``'s ``hyp.txt``), and the
corpus' manifest ``OUT/raw/{split}.facts.jsonl`` (line-aligned; each fact's ``value`` and
``token_end``, one past the last sentencepiece piece of its value in the source).

A hypothesis is read as its words (maximal runs of letters), in order. For a document with
facts v_1..v_K (in order of appearance):

- slot exact match: the share of slots i with word i of the hypothesis equal to v_i
  (case-insensitive);
- set recall: the share of the v_i that occur anywhere in the hypothesis;
- set precision: the share of the hypothesis' distinct words that are among the v_i;
- per position bucket: recall and slot exact match over the facts whose value ENDS inside the
  bucket. Bucket edges are in source pieces, by default the windows of the truncated
  summarizers: 1023 (fairseq's ``transformer``, 1024 positions less ``</s>``) and 4095
  (``fastformer``): a fact with ``token_end <= 1023`` is wholly inside the transformer's input.

Every figure is pooled over facts (sum of hits / number of facts) and comes with a 95% percentile
bootstrap interval over documents (:mod:`fairseq_plugins.lab.common.bootstrap`); a model trained
several times (one hypothesis file per training seed) is pooled over its runs, and its interval
resamples the runs as well as the documents (:func:`score_runs`). Chance levels of a
guesser that knows K and the closed set of |V| values: slot exact match 1/|V|, set recall K/|V|;
and per bucket the conditional slot chance (:func:`conditional_slot_chance`): a model that read
every fact before slot i and guesses slot i among the values not used yet is right with
probability 1/(|V| − i), so slots late in the summary (the facts far into the document, which a
truncated model cannot read) have a chance above 1/|V| (1/29 for the fourth of 6 facts of 32).
"""
import json
import re
import warnings
from typing import Dict, List, Optional, Sequence

import numpy as np

from fairseq_plugins.lab.common.bootstrap import percentile_interval, replicate_means, resample_weights
from fairseq_plugins.errors import ConfigError

DEFAULT_EDGES = (1023, 4095)
_WORD = re.compile(r"[^\W\d_]+")
# the per-document counts scored: hits and facts, overall and per bucket
_OVERALL = ("slot", "recall", "precision")


def hypothesis_words(text: str) -> List[str]:
    """The words of a hypothesis, in order, case-folded (runs of letters; digits and punctuation split)."""
    return [w.casefold() for w in _WORD.findall(text)]


def bucket_labels(edges: Sequence[int]) -> List[str]:
    """``["0-1023", "1023-4095", "4095+"]`` for edges (1023, 4095)."""
    bounds = [0, *edges]
    return [f"{lo}-{hi}" for lo, hi in zip(bounds, edges)] + [f"{edges[-1]}+"]


def read_manifest(path: str) -> List[dict]:
    """The entries of a ``raw/{split}.facts.jsonl`` manifest.

    Raises:
        ConfigError: a missing file, a line that is not a manifest entry, or an entry without
            token offsets (the manifest of a run that did not finish).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise ConfigError(f"manifest {path} not found (data-prep/prepare-summarization.sh --corpus facts "
                          f"writes OUT/raw/SPLIT.facts.jsonl)") from None
    if lines and lines[-1] == "":
        lines.pop()
    entries = []
    for i, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
            if not all(isinstance(f["value"], str) and isinstance(f["token_end"], int) for f in entry["facts"]):
                raise TypeError(line)
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{path}:{i}: not a facts manifest entry with each fact's value and token_end "
                              f"(rebuild it with data-prep/prepare-summarization.sh --corpus facts)") from None
        entries.append(entry)
    if not entries:
        raise ConfigError(f"manifest {path} is empty")
    return entries


def document_counts(hypothesis: str, entry: dict, edges: Sequence[int]) -> Dict[str, np.ndarray]:
    """One document's hits and totals: ``{"hits": (3 + 2B,), "totals": (3 + 2B,)}`` in the order
    slot, recall, precision, then recall and slot per bucket (B = len(edges) + 1)."""
    words = hypothesis_words(hypothesis)
    values = [fact["value"].casefold() for fact in entry["facts"]]
    found = set(words)
    slot = [i < len(words) and words[i] == v for i, v in enumerate(values)]
    recall = [v in found for v in values]
    distinct = set(words)
    buckets = [int(np.searchsorted(edges, fact["token_end"], side="left")) for fact in entry["facts"]]
    nb = len(edges) + 1
    hits = [sum(slot), sum(recall), len(distinct & set(values))]
    totals = [len(values), len(values), len(distinct)]
    for b in range(nb):
        members = [i for i, x in enumerate(buckets) if x == b]
        hits += [sum(recall[i] for i in members), sum(slot[i] for i in members)]
        totals += [len(members), len(members)]
    return {"hits": np.asarray(hits, dtype=np.float64), "totals": np.asarray(totals, dtype=np.float64),
            "words": len(words)}


def conditional_slot_chance(entries: Sequence[dict], edges: Sequence[int], closed_set: int) -> List[Optional[float]]:
    """Per position bucket (:func:`bucket_labels` of ``edges``), the slot exact match of a guesser
    that knows the values of every slot before slot i and draws slot i uniformly from the
    ``closed_set − i`` values left: the mean of 1/(|V| − i) over the bucket's facts (i the fact's
    slot, 0-based); ``None`` for a bucket without facts."""
    sums, counts = np.zeros(len(edges) + 1), np.zeros(len(edges) + 1)
    for entry in entries:
        for i, fact in enumerate(entry["facts"]):
            b = int(np.searchsorted(edges, fact["token_end"], side="left"))
            sums[b] += 1.0 / (closed_set - i)
            counts[b] += 1
    return [float(s / c) if c else None for s, c in zip(sums, counts)]


def count_runs(runs: Sequence[Sequence[str]], entries: Sequence[dict], edges: Sequence[int]):
    """Every run's :func:`document_counts`: ``(per_run, hits, totals)``, the last two ``(S, D, M)``
    float64 (M = 3 + 2B, the order of :func:`document_counts`).

    Raises:
        ConfigError: no run, counts that differ, or edges that are not increasing positive integers.
    """
    if not runs:
        raise ConfigError("no hypotheses to score")
    for hypotheses in runs:
        if len(hypotheses) != len(entries):
            raise ConfigError(f"{len(hypotheses)} hypotheses but {len(entries)} manifest entries; "
                              f"they must be line-aligned (one example per line)")
    if not edges or any(e <= 0 for e in edges) or list(edges) != sorted(set(edges)):
        raise ConfigError(f"bucket edges must be increasing positive token offsets, not {list(edges)}")
    per_run = [[document_counts(h, e, edges) for h, e in zip(hypotheses, entries)] for hypotheses in runs]
    hits = np.stack([[d["hits"] for d in docs] for docs in per_run])
    totals = np.stack([[d["totals"] for d in docs] for docs in per_run])
    return per_run, hits, totals


def run_document_draws(num_runs: int, num_documents: int, replicates: int, seed: int) -> np.ndarray:
    """``(R, S·D)`` bootstrap weights: each replicate draws D documents and S runs with replacement
    and counts every drawn run on every drawn document (one run: drawn once, always)."""
    documents = resample_weights(num_documents, replicates, seed)
    runs = resample_weights(num_runs, replicates, seed + 1)
    return (runs[:, :, None] * documents[:, None, :]).reshape(replicates, -1)


def metric_names(edges: Sequence[int]) -> List[str]:
    """The names of :func:`document_counts`' columns: the overall metrics, then ``"recall <bucket>"``
    and ``"slot <bucket>"`` per bucket."""
    return list(_OVERALL) + [f"{kind} {label}" for label in bucket_labels(edges) for kind in ("recall", "slot")]


def score(hypotheses: Sequence[str], entries: Sequence[dict], edges: Sequence[int] = DEFAULT_EDGES,
          replicates: int = 1000, seed: int = 1, closed_set: Optional[int] = None) -> dict:
    """Scores of ``hypotheses`` against the manifest ``entries`` (line-aligned).

    Returns ``{"documents", "facts", "hyp_words", "metrics": {name: {"value", "low", "high",
    "count"}}, "buckets": [{"bucket", "facts", "recall": {...}, "slot": {...}}], "edges",
    "chance": {...}, "runs": 1, "per_run": {...}}`` (:func:`score_runs`); values are fractions in
    [0, 1], ``None`` where no fact counts.

    Raises:
        ConfigError: the counts differ, or the edges are not increasing positive integers.
    """
    return score_runs([hypotheses], entries, edges, replicates, seed, closed_set)


def score_runs(runs: Sequence[Sequence[str]], entries: Sequence[dict], edges: Sequence[int] = DEFAULT_EDGES,
               replicates: int = 1000, seed: int = 1, closed_set: Optional[int] = None) -> dict:
    """:func:`score` of one model trained S times (``runs``: S lists of hypotheses, e.g. one per
    training seed), pooled: every figure is hits / facts over all runs and documents. The 95%
    interval resamples documents and, with S > 1, runs too (each replicate draws S runs and D
    documents with replacement and counts every drawn run on every drawn document); with S > 1
    the result also holds ``"runs"`` (S) and ``"per_run"``: ``{name: [value of each run, in the
    order of runs]}`` for the overall metrics and ``"recall <bucket>"``, ``"slot <bucket>"``. With
    one run, exactly :func:`score`.

    Raises:
        ConfigError: no run, counts that differ, or edges that are not increasing positive integers.
    """
    per_run, hits, totals = count_runs(runs, entries, edges)
    draws = run_document_draws(len(runs), len(entries), replicates, seed)
    flat_hits, flat_totals = hits.reshape(-1, hits.shape[-1]), totals.reshape(-1, totals.shape[-1])
    with warnings.catch_warnings():  # a bucket without facts: all-NaN replicates, reported as None
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = percentile_interval(replicate_means(flat_hits, flat_totals, draws))
    sums, counts = hits.sum((0, 1)), totals.sum((0, 1))

    def metric(j):
        if counts[j] == 0:
            return {"value": None, "low": None, "high": None, "count": 0}
        return {"value": float(sums[j] / counts[j]), "low": float(low[j]), "high": float(high[j]),
                "count": int(counts[j])}

    labels = bucket_labels(edges)
    k = int(totals[0, :, 0].sum())
    result = {
        "documents": len(entries), "facts": k, "edges": list(edges),
        "hyp_words": float(np.mean([d["words"] for docs in per_run for d in docs])),
        "metrics": {name: metric(j) for j, name in enumerate(_OVERALL)},
        "buckets": [{"bucket": label, "facts": int(counts[3 + 2 * b]) // len(runs), "recall": metric(3 + 2 * b),
                     "slot": metric(4 + 2 * b)} for b, label in enumerate(labels)],
        "bootstrap": {"replicates": replicates, "seed": seed, "level": 0.95,
                      "unit": "document" if len(runs) == 1 else "document and run"},
    }
    run_sums, run_counts = hits.sum(1), totals.sum(1)  # (S, M)
    names = metric_names(edges)
    result["runs"] = len(runs)
    result["per_run"] = {name: [float(run_sums[r, j] / run_counts[r, j]) if run_counts[r, j] else None
                                for r in range(len(runs))] for j, name in enumerate(names)}
    if closed_set:
        per_doc_facts = k / len(entries)
        result["chance"] = {"closed_set": closed_set, "slot": 1.0 / closed_set, "recall": per_doc_facts / closed_set,
                            "slot_after_earlier_facts": dict(zip(labels, conditional_slot_chance(entries, edges,
                                                                                                 closed_set)))}
    return result


def resampled_over(rows: Sequence[dict]) -> str:
    """What the intervals of scored ``rows`` resample: ``"documents and runs"`` when a row pools
    several runs, else ``"documents"``."""
    return "documents and runs" if any(r["runs"] > 1 for r in rows) else "documents"


def _cell(m: dict) -> str:
    if m["value"] is None:
        return "-"
    return f"{100 * m['value']:.1f} [{100 * m['low']:.1f}, {100 * m['high']:.1f}]"


def markdown(rows: Sequence[dict]) -> str:
    """The table of several scored models: ``rows`` = ``[{"model": label, **score(...)}]``, and, when
    they were scored with a closed set, a last row of chance levels: a guess of K distinct values
    (slot exact match 1/|V|, set recall K/|V| overall and in every bucket) and, per bucket, the slot
    exact match of a guess that knows every earlier slot (:func:`conditional_slot_chance`)."""
    from fairseq_plugins.lab.common.table import Column
    from fairseq_plugins.lab.common.table import markdown as table

    labels = [b["bucket"] for b in rows[0]["buckets"]]
    flat = []
    for r in rows:
        row = {"model": r["model"], "docs": r["documents"], "runs": r["runs"], "words": f"{r['hyp_words']:.1f}",
               **{name: _cell(r["metrics"][name]) for name in _OVERALL}}
        for b in r["buckets"]:
            row[f"recall {b['bucket']}"] = _cell(b["recall"]) + f" (n={b['facts']})"
            row[f"slot {b['bucket']}"] = _cell(b["slot"])
        flat.append(row)
    chance = rows[0].get("chance")
    if chance:  # a guess of distinct values; its slot EM per bucket knows every earlier slot
        row = {"model": f"chance (a guess from the {chance['closed_set']} values)", "docs": "", "runs": "",
               "words": "", "slot": f"{100 * chance['slot']:.1f}", "recall": f"{100 * chance['recall']:.1f}",
               "precision": ""}
        for label, after in chance["slot_after_earlier_facts"].items():  # None: no fact in the bucket
            row[f"recall {label}"] = "-" if after is None else f"{100 * chance['recall']:.1f}"
            row[f"slot {label}"] = "-" if after is None else f"{100 * after:.2f}"
        flat.append(row)
    columns = [Column("model", "model"), Column("docs", "docs", align="---:")]
    if resampled_over(rows) != "documents":
        columns.append(Column("runs", "runs (seeds)", align="---:"))
    columns += metric_columns(labels) + [Column("words", "hyp words", align="---:")]
    return table(flat, columns, escape=True)


def metric_columns(labels: Sequence[str]) -> list:
    """The table columns of the metrics (keys of :func:`metric_names`) for buckets ``labels``: the
    overall ones, every bucket's recall, then every bucket's slot exact match."""
    from fairseq_plugins.lab.common.table import Column

    columns = [Column("slot", "slot exact match", align="---:"), Column("recall", "set recall", align="---:"),
               Column("precision", "set precision", align="---:")]
    columns += [Column(f"recall {b}", f"recall, facts in {b}", align="---:") for b in labels]
    return columns + [Column(f"slot {b}", f"slot EM, facts in {b}", align="---:") for b in labels]


def plot(rows: Sequence[dict], path: str) -> None:
    """Recall per position bucket, one group of bars per bucket and one bar per model with its 95%
    interval, the chance level of a guessed set dashed; written to ``path`` (PNG)."""
    from matplotlib.figure import Figure  # the Figure's own Agg canvas: no global backend choice

    labels = [b["bucket"] for b in rows[0]["buckets"]]
    fig = Figure(figsize=(6.4, 3.8), dpi=120)
    ax = fig.subplots()
    width = 0.8 / len(rows)
    for m, row in enumerate(rows):
        xs, ys, errs = [], [], [[], []]
        for b, bucket in enumerate(row["buckets"]):
            r = bucket["recall"]
            if r["value"] is None:
                continue
            xs.append(b + (m - (len(rows) - 1) / 2) * width)
            ys.append(100 * r["value"])
            # a percentile interval of very few replicates may leave the pooled value outside it
            errs[0].append(100 * max(r["value"] - r["low"], 0.0))
            errs[1].append(100 * max(r["high"] - r["value"], 0.0))
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=row["model"])
    if rows[0].get("chance"):
        ax.axhline(100 * rows[0]["chance"]["recall"], color="grey", linestyle="--", linewidth=1,
                   label="chance (guessed set)")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([f"facts ending in pieces {label}" for label in labels], fontsize=8)
    ax.set_ylabel("recall of the facts (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"facts recalled by position in the document (95% bootstrap over {resampled_over(rows)})",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")


_UPDATE = re.compile(r"\bnum_updates=(\d+)")
_NLL = re.compile(r"\bnll_loss=([0-9.]+)")
_LOSS = re.compile(r"\bloss=([0-9.]+)")


def training_curve(log_path: str) -> List[tuple]:
    """``[(update, loss in bits), ...]`` of fairseq-train's ``train_inner`` lines: ``nll_loss``
    where the criterion logs it (the ∞-former's loss adds the KL term), else ``loss``.

    Raises:
        ConfigError: the log is missing or holds no ``train_inner`` line.
    """
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if "| train_inner |" in line]
    except FileNotFoundError:
        raise ConfigError(f"training log {log_path} not found") from None
    points = []
    for line in lines:
        update, loss = _UPDATE.search(line), _NLL.search(line) or _LOSS.search(line)
        if update and loss:
            points.append((int(update.group(1)), float(loss.group(1))))
    if not points:
        raise ConfigError(f"{log_path} holds no fairseq-train train_inner line (pass the log of scripts/train-summarizer.sh)")
    return points


def loss_axis_top(curves: Dict[str, Sequence[List[tuple]]], floor: Optional[float] = None) -> float:
    """The top of the loss axis of :func:`plot_curves`: 1.1 × the largest loss after the first fifth
    of each run's points (the first updates' losses, an order of magnitude above the rest, would
    flatten what follows), and above ``floor``; 1.0 without points."""
    settled = [loss for runs in curves.values() for points in runs for _, loss in points[len(points) // 5:]]
    return 1.1 * max(settled + ([floor] if floor is not None else []) + [1.0 / 1.1])


def plot_curves(curves: Dict[str, Sequence[List[tuple]]], path: str, floor: Optional[float] = None) -> None:
    """Training loss (bits per summary token) against the update: per model (the keys) one colour
    and a line per run; ``floor``: a dashed reference line (e.g. the loss of a perfect guesser that
    reads no fact)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8), dpi=120)
    ax = fig.subplots()
    for colour, (label, runs) in enumerate(curves.items()):
        for r, points in enumerate(runs):
            ax.plot([u for u, _ in points], [loss for _, loss in points], color=f"C{colour}", linewidth=1,
                    label=label if r == 0 else None)
    if floor is not None:
        ax.axhline(floor, color="grey", linestyle="--", linewidth=1, label="no fact read (format + uniform guess)")
    ax.set_xlabel("update")
    ax.set_ylabel("training loss (bits per summary piece)")
    ax.set_ylim(0, loss_axis_top(curves, floor))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
