"""Paired differences of the scores per fact: a model against its memory-wiped control.

The ∞-former summarizer decoded twice from the same checkpoints, once with its document memory
wiped (docs/summarization.md, "The memory-wiped control"), gives two sets of hypotheses of the
same documents by the same runs. What the model takes from its memory is the difference of
their scores (:mod:`fairseq_plugins.lab.facts.score`), and its interval must come from
resampling both *together*: each bootstrap replicate draws one set of documents and of runs
(run r of one paired with run r of the other, e.g. the same training seed) and takes the
difference of the two pooled figures on that draw. Two separate intervals that overlap say
much less (they ignore that both sides share the documents).
"""

import re
import warnings
from typing import List, Optional, Sequence, Tuple

from fairseq_plugins.lab.common.bootstrap import percentile_interval, replicate_means
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.facts.score import (DEFAULT_EDGES, bucket_labels, count_runs, metric_columns,
                                                 metric_names, run_document_draws)

WIPED_SUFFIX = " wiped"  # the label of a model's memory-wiped control: "LABEL wiped"


def paired_difference(runs: Sequence[Sequence[str]], control: Sequence[Sequence[str]], entries: Sequence[dict],
                      edges: Sequence[int] = DEFAULT_EDGES, replicates: int = 1000, seed: int = 1) -> dict:
    """Pooled scores of ``runs`` minus those of ``control`` (both S lists of hypotheses, paired run
    by run, line-aligned with the manifest ``entries``), with a 95% paired bootstrap interval.

    Returns:
        ``{"runs": S, "metrics": {name: {"value", "low", "high"}}}`` for every name of
        :func:`~fairseq_plugins.lab.facts.score.metric_names` (fractions: +0.01 is one
        percentage point; ``None`` where no fact counts).
    Raises:
        ConfigError: the two sides have different numbers of runs, or any check of
            :func:`~fairseq_plugins.lab.facts.score.count_runs`.
    """
    if len(runs) != len(control):
        raise ConfigError(f"a paired difference needs as many runs of the model as of its control, not {len(runs)} "
                          f"and {len(control)}: give both the same seeds")
    _, hits_a, totals_a = count_runs(runs, entries, edges)
    _, hits_b, totals_b = count_runs(control, entries, edges)
    draws = run_document_draws(len(runs), len(entries), replicates, seed)
    width = hits_a.shape[-1]
    with warnings.catch_warnings():  # a bucket without facts: all-NaN replicates, reported as None
        warnings.simplefilter("ignore", RuntimeWarning)
        replicate_a = replicate_means(hits_a.reshape(-1, width), totals_a.reshape(-1, width), draws)
        replicate_b = replicate_means(hits_b.reshape(-1, width), totals_b.reshape(-1, width), draws)
        low, high = percentile_interval(replicate_a - replicate_b)
    metrics = {}
    for j, name in enumerate(metric_names(edges)):
        count_a, count_b = totals_a[..., j].sum(), totals_b[..., j].sum()
        if count_a == 0 or count_b == 0:
            metrics[name] = {"value": None, "low": None, "high": None}
            continue
        value = hits_a[..., j].sum() / count_a - hits_b[..., j].sum() / count_b
        metrics[name] = {"value": float(value), "low": float(low[j]), "high": float(high[j])}
    return {"runs": len(runs), "metrics": metrics}


def wiped_pairs(labels: Sequence[str]) -> Tuple[List[tuple], List[str]]:
    """``(pairs, unpaired)``: ``(label, label + " wiped")`` for every label whose memory-wiped
    control is also among ``labels`` (in the order of ``labels``), and the labels that look like a
    control (ending in the word "wiped", any case or spacing) but pair with no label."""
    present = set(labels)
    pairs = [(label, label + WIPED_SUFFIX) for label in labels if label + WIPED_SUFFIX in present]
    paired = {control for _, control in pairs}
    unpaired = [label for label in labels if re.search(r"(^|\s)wiped\s*$", label, re.IGNORECASE) and label not in paired]
    return pairs, unpaired


def _points(m: dict) -> str:
    if m["value"] is None:
        return "-"
    return f"{100 * m['value']:+.1f} [{100 * m['low']:+.1f}, {100 * m['high']:+.1f}]"


def markdown(differences: Sequence[dict], edges: Sequence[int] = DEFAULT_EDGES) -> Optional[str]:
    """The table of paired differences (``[{"model", "control", **paired_difference(...)}]``), in
    percentage points; ``None`` when there is none."""
    from fairseq_plugins.lab.common.table import Column
    from fairseq_plugins.lab.common.table import markdown as table

    if not differences:
        return None
    names = metric_names(edges)
    rows = [{"pair": f"{d['model']} − {d['control']}", "runs": d["runs"],
             **{name: _points(d["metrics"][name]) for name in names}} for d in differences]
    columns = [Column("pair", "paired difference (points)"), Column("runs", "runs (seeds)", align="---:"),
               *metric_columns(bucket_labels(edges))]  # the main table's columns
    return table(rows, columns, escape=True)
