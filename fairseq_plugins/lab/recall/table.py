"""Recall by distance over arms and training seeds: the table and its intervals (docs/results/recall.md).

RUN_DIR is ``fairseq_plugins/lab/recall/recall.sh``'s ``--out``: ``RUN_DIR/ARM/seedS/recall.json`` (``fairseq-longmem
recall score``) and, for the ∞-former arms, ``recall-wiped.json`` (the same with
``--memory-wiped``). :func:`summarize` gives, per arm (and per arm with its memory wiped) and
distance, the mean accuracy over the seeds with a 95% t-interval over the seeds,

    mean ± t(S − 1, 0.975) · s / √S        (s: the standard deviation over the S seeds, ddof 1),

and each seed's value. The interval covers training noise only (every seed is scored on the same
test examples); it is not clipped to [0, 1], and one seed gives none. :func:`table` writes the
Markdown table (arms × distances) to RUN_DIR/results.md and the summary to RUN_DIR/results.json.
Run as ``fairseq-longmem recall table`` (:mod:`fairseq_plugins.lab.recall.cli`).
"""

from typing import Dict, List, Optional

from fairseq_plugins.lab.common.recall_tasks import (arm_rows, collect_results, interval_text, seed_cells,
                                                     seed_interval, write_table)
from fairseq_plugins.lab.common.table import Column, markdown

TASK = "recall"
LEVEL = 0.95
# what every result of one table must share: they were scored on the same data
SHARED = ("window", "keys", "chance", "data")


def collect(run_dir: str) -> List[Dict]:
    """Every ``RUN_DIR/ARM/seedS/recall[-wiped].json`` as ``{"arm", "seed", "memory_wiped", "path", "result"}``.

    Raises:
        ConfigError: none there, or results scored on different data.
    """
    return collect_results(run_dir, TASK, SHARED, "recall data")


def summarize(run_dir: str) -> Dict:
    """``{"window", "keys", "chance", "data", "distances": [{"multiple", "distance"}], "rows": [{"arm",
    "label", "memory_wiped", "seeds", "cells": {multiple: {"mean", "low", "high", "per_seed": {seed:
    accuracy}, "examples"}}}]}``: one row per arm (registry order), its memory-wiped row after it."""
    found = collect(run_dir)
    first = found[0]["result"]
    distances = sorted({(d["multiple"], d["distance"]) for r in found for d in r["result"]["distances"]},
                       key=lambda item: item[1])
    rows = []
    for row, runs in arm_rows(found, TASK):
        cells = {}
        for multiple, _ in distances:
            per_seed = seed_cells(runs, "distances", "multiple", multiple)
            if per_seed:
                examples = sorted({c["examples"] for c in per_seed.values()})
                cells[multiple] = {**seed_interval({s: c["accuracy"] for s, c in per_seed.items()}, LEVEL),
                                   "examples": examples[0] if len(examples) == 1 else examples}
        rows.append({**row, "cells": cells})
    return {**{key: first.get(key) for key in SHARED}, "level": LEVEL,
            "distances": [{"multiple": m, "distance": d} for m, d in distances], "rows": rows}


def markdown_table(summary: Dict) -> str:
    """Arms × distances: each cell the mean accuracy over seeds [95% t-interval over seeds], then a
    line with chance (1/K)."""
    columns = [Column("label", "arm"), Column("seeds", "seeds")] + [
        Column(d["multiple"], f"d = {d['multiple']} W ({d['distance']})", interval_text, missing="–")
        for d in summary["distances"]]
    lines = [{"label": r["label"], "seeds": ",".join(map(str, r["seeds"])), **r["cells"]} for r in summary["rows"]]
    window = summary["window"]
    return (markdown(lines, columns) + "\n\n"
            f"Accuracy of the answer (argmax at the query marker = the key), mean over the training seeds "
            f"[{summary['level']:.0%} t-interval over the seeds, with two or more]; W = {window} tokens; "
            f"chance 1/K = 1/{summary['keys']} = {summary['chance']:.3f}.\n")


def table(run_dir: str, out_md: Optional[str] = None, out_json: Optional[str] = None) -> str:
    """The arms × distances table of RUN_DIR (:func:`markdown_table` of :func:`summarize`), written to
    ``out_md`` (returned) and the summary to ``out_json`` (defaults: results.md, results.json in RUN_DIR;
    :func:`~fairseq_plugins.lab.common.recall_tasks.write_table`).

    Raises:
        ConfigError: no results under RUN_DIR, or results of different data.
    """
    return write_table(run_dir, summarize, markdown_table, out_md, out_json)
