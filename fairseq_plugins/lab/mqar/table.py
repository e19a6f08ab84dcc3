"""MQAR over arms and training seeds: the table, with the reference lines and each arm's state size
(docs/results/mqar.md).

RUN_DIR is ``fairseq_plugins/lab/mqar/mqar.sh``'s ``--out``: ``RUN_DIR/ARM/seedS/mqar.json`` (``fairseq-longmem mqar
score``) and, for the arms with a long-term memory, ``mqar-wiped.json`` (the same with
``--memory-wiped``). :func:`summarize` gives, per arm (and per arm with its memory wiped), the mean
accuracy over the seeds — overall and per distance bucket — with a 95% t-interval over the seeds,

    mean ± t(S − 1, 0.975) · s / √S        (s: the standard deviation over the S seeds, ddof 1),

each seed's value and the arm's state size in bytes (:func:`~fairseq_plugins.lab.mqar.score.state_bytes`).
:func:`markdown_table` ends with the three reference lines, 2/V, 1/k and 1.0, as rows. Run as
``fairseq-longmem mqar table`` (:mod:`fairseq_plugins.lab.mqar.cli`).
"""

from typing import Dict, List, Optional

from fairseq_plugins.lab.common.recall_tasks import (arm_rows, collect_results, interval_text, seed_cells,
                                                     seed_interval, write_table)
from fairseq_plugins.lab.common.table import Column, markdown

TASK = "mqar"
LEVEL = 0.95
# what every result of one table must share: they were scored on the same data
SHARED = ("vocab", "pairs", "length", "window", "data")
OVERALL = "all"  # the cells' key of the accuracy over every query


def reference_lines(vocab: int, pairs: int) -> List[Dict]:
    """The three lines every MQAR result is read against: ``[{"name", "value", "meaning", "label"}]``."""
    lines = [("2/V", 2.0 / vocab, f"2/{vocab}: no information, a guess among the {vocab // 2} values"),
             ("1/k", 1.0 / pairs, f"1/{pairs}: the example's values known, not which key each belongs to"),
             ("1.0", 1.0, "every binding recalled")]
    return [{"name": name, "value": value, "meaning": meaning, "label": f"{name} = {value:.4f} ({meaning})"}
            for name, value, meaning in lines]


def collect(run_dir: str) -> List[Dict]:
    """Every ``RUN_DIR/ARM/seedS/mqar[-wiped].json`` as ``{"arm", "seed", "memory_wiped", "path", "result"}``.

    Raises:
        ConfigError: none there, or results scored on different data.
    """
    return collect_results(run_dir, TASK, SHARED, "MQAR data")


def summarize(run_dir: str) -> Dict:
    """``{"vocab", "pairs", "length", "window", "data", "level", "reference", "buckets": [{"label", "low",
    "high"}], "rows": [{"arm", "label", "memory_wiped", "seeds", "state_bytes", "state_count",
    "parameters", "cells": {"all" | bucket label: {"mean", "low", "high", "per_seed"}}}]}``: one row per
    arm (registry order), its memory-wiped row after it."""
    found = collect(run_dir)
    first = found[0]["result"]
    buckets = [{k: b[k] for k in ("label", "low", "high")} for b in first["buckets"]]
    rows = []
    for row, runs in arm_rows(found, TASK):
        cells = {OVERALL: seed_interval({r["seed"]: r["result"]["accuracy"] for r in runs}, LEVEL)}
        for b in buckets:
            per_seed = seed_cells(runs, "buckets", "label", b["label"])
            if per_seed:
                cells[b["label"]] = {**seed_interval({s: c["accuracy"] for s, c in per_seed.items()}, LEVEL),
                                     "queries": sorted({next(c for c in r["result"]["buckets"]
                                                             if c["label"] == b["label"])["queries"] for r in runs})}
        states = sorted({r["result"]["state"]["bytes"] for r in runs})
        rows.append({**row, "state_bytes": states[0] if len(states) == 1 else states,
                     "state_count": runs[0]["result"]["state"]["count"],
                     "parameters": runs[0]["result"].get("parameters"), "cells": cells})
    return {**{key: first.get(key) for key in SHARED}, "level": LEVEL,
            "reference": reference_lines(first["vocab"], first["pairs"]), "buckets": buckets, "rows": rows}


def _bytes(value) -> str:
    return f"{value:.2e}" if isinstance(value, (int, float)) else " / ".join(f"{v:.2e}" for v in value)


def markdown_table(summary: Dict) -> str:
    """Arms × (state, accuracy, distance buckets): each accuracy the mean over the seeds [95% t-interval
    over the seeds], then the three reference lines as rows, then what the numbers are."""
    columns = ([Column("label", "arm"), Column("seeds", "seeds"), Column("state", "state (bytes)"),
                Column(OVERALL, "accuracy", interval_text, missing="–")]
               + [Column(b["label"], f"d {b['label']}", interval_text, missing="–") for b in summary["buckets"]])
    lines = [{"label": r["label"], "seeds": ",".join(map(str, r["seeds"])), "state": _bytes(r["state_bytes"]),
              **r["cells"]} for r in summary["rows"]]
    for ref in summary["reference"]:
        plain = {"mean": ref["value"], "low": None}
        lines.append({"label": f"*reference {ref['name']}*", "seeds": "", "state": "",
                      **{c.key: plain for c in columns[3:]}})
    return (markdown(lines, columns) + "\n\n"
            f"Accuracy at the query positions (argmax at the query marker = the value; per example the fraction "
            f"of its {summary['pairs']} queries, mean over the examples; per bucket of the key–query distance d "
            f"the fraction of its queries), mean over the training seeds [{summary['level']:.0%} t-interval over "
            f"the seeds, with two or more]; V = {summary['vocab']}, k = {summary['pairs']}, length "
            f"{summary['length']}, W = {summary['window']} tokens (the streaming arms' segment + short-term "
            f"memory). State: Σ over layers of the sequence mixer's state × 4 bytes (fairseq_plugins/lab/mqar/"
            f"score.py). Reference lines: " + "; ".join(r["label"] for r in summary["reference"]) + ".\n")


def table(run_dir: str, out_md: Optional[str] = None, out_json: Optional[str] = None) -> str:
    """The MQAR table of RUN_DIR, its reference lines last (:func:`markdown_table` of :func:`summarize`):
    :func:`~fairseq_plugins.lab.common.recall_tasks.write_table` writes it to ``out_md`` (returned) and
    the summary to ``out_json`` (defaults: results.md, results.json in RUN_DIR).

    Raises:
        ConfigError: no results under RUN_DIR, or results of different data.
    """
    return write_table(run_dir, summarize, markdown_table, out_md, out_json)
