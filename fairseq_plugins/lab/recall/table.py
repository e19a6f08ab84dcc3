"""Recall by distance over arms and training seeds: the table and its intervals (docs/results/recall.md).

RUN_DIR is ``scripts/recall.sh``'s ``--out``: ``RUN_DIR/ARM/seedS/recall.json`` (``fairseq-longmem
recall score``) and, for the ∞-former arms, ``recall-wiped.json`` (the same with
``--memory-wiped``). :func:`summarize` gives, per arm (and per arm with its memory wiped) and
distance, the mean accuracy over the seeds with a 95% t-interval over the seeds,

    mean ± t(S − 1, 0.975) · s / √S        (s: the standard deviation over the S seeds, ddof 1),

and each seed's value. The interval covers training noise only (every seed is scored on the same
test examples); it is not clipped to [0, 1], and one seed gives none. :func:`table` writes the
Markdown table (arms × distances) to RUN_DIR/results.md and the summary to RUN_DIR/results.json.
Run as ``fairseq-longmem recall table`` (:mod:`fairseq_plugins.lab.recall.cli`).
"""

import glob
import json
import os
import re
from typing import Dict, List, Optional

from fairseq_plugins.lab.common.intervals import t_interval
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common import arms as arm_registry
from fairseq_plugins.lab.common.table import Column, markdown, order_key, write_files

FILES = (("recall.json", False), ("recall-wiped.json", True))  # (file, memory wiped)
LEVEL = 0.95
# what every result of one table must share: they were scored on the same data
SHARED = ("window", "keys", "chance", "data")


def collect(run_dir: str) -> List[Dict]:
    """Every ``RUN_DIR/ARM/seedS/recall[-wiped].json`` as ``{"arm", "seed", "memory_wiped", "path", "result"}``.

    Raises:
        ConfigError: none there, or results scored on different data.
    """
    found = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*", "seed*", "recall*.json"))):
        seed_dir = os.path.dirname(path)
        match = re.fullmatch(r"seed(\d+)", os.path.basename(seed_dir))
        wiped = dict(FILES).get(os.path.basename(path))
        if match is None or wiped is None:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not JSON ({e}); score that run again (fairseq-longmem recall score)") from None
        found.append({"arm": os.path.basename(os.path.dirname(seed_dir)), "seed": int(match.group(1)),
                      "memory_wiped": wiped, "path": path, "result": result})
    if not found:
        raise ConfigError(f"no {run_dir}/ARM/seedS/recall.json found; run scripts/recall.sh --out {run_dir} first")
    for key in SHARED:
        other = next((r for r in found if r["result"].get(key) != found[0]["result"].get(key)), None)
        if other is not None:
            raise ConfigError(f"{found[0]['path']} and {other['path']} were scored on different data ({key} "
                              f"{found[0]['result'].get(key)!r} and {other['result'].get(key)!r}); score every run "
                              "on the same recall data")
    return found


def summarize(run_dir: str) -> Dict:
    """``{"window", "keys", "chance", "data", "distances": [{"multiple", "distance"}], "rows": [{"arm",
    "label", "memory_wiped", "seeds", "cells": {multiple: {"mean", "low", "high", "per_seed": {seed:
    accuracy}, "examples"}}}]}``: one row per arm (registry order), its memory-wiped row after it."""
    found = collect(run_dir)
    first = found[0]["result"]
    distances = sorted({(d["multiple"], d["distance"]) for r in found for d in r["result"]["distances"]},
                       key=lambda item: item[1])
    rows = []
    for arm, wiped in sorted({(r["arm"], r["memory_wiped"]) for r in found},
                             key=lambda k: (order_key(arm_registry.names("recall"), k[0]), k[1])):
        runs = sorted((r for r in found if r["arm"] == arm and r["memory_wiped"] == wiped), key=lambda r: r["seed"])
        cells = {}
        for multiple, _ in distances:
            per_seed = {}
            examples = set()
            for r in runs:
                cell = next((d for d in r["result"]["distances"] if d["multiple"] == multiple), None)
                if cell is not None and cell["accuracy"] is not None:
                    per_seed[r["seed"]] = cell["accuracy"]
                    examples.add(cell["examples"])
            if per_seed:
                mean, low, high = t_interval(list(per_seed.values()), LEVEL)
                cells[multiple] = {"mean": mean, "low": low, "high": high, "per_seed": per_seed,
                                   "examples": sorted(examples)[0] if len(examples) == 1 else sorted(examples)}
        rows.append({"arm": arm, "label": f"{arm}, memory wiped" if wiped else arm, "memory_wiped": wiped,
                     "seeds": [r["seed"] for r in runs], "cells": cells})
    return {**{key: first.get(key) for key in SHARED}, "level": LEVEL,
            "distances": [{"multiple": m, "distance": d} for m, d in distances], "rows": rows}


def _cell(cell: Dict) -> str:
    if cell["low"] is None:
        return f"{cell['mean']:.3f}"
    return f"{cell['mean']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}]"


def markdown_table(summary: Dict) -> str:
    """Arms × distances: each cell the mean accuracy over seeds [95% t-interval over seeds], then a
    line with chance (1/K)."""
    columns = [Column("label", "arm"), Column("seeds", "seeds")] + [
        Column(d["multiple"], f"d = {d['multiple']} W ({d['distance']})", _cell, missing="–")
        for d in summary["distances"]]
    lines = [{"label": r["label"], "seeds": ",".join(map(str, r["seeds"])), **r["cells"]} for r in summary["rows"]]
    window = summary["window"]
    return (markdown(lines, columns) + "\n\n"
            f"Accuracy of the answer (argmax at the query marker = the key), mean over the training seeds "
            f"[{summary['level']:.0%} t-interval over the seeds, with two or more]; W = {window} tokens; "
            f"chance 1/K = 1/{summary['keys']} = {summary['chance']:.3f}.\n")


def table(run_dir: str, out_md: Optional[str] = None, out_json: Optional[str] = None) -> str:
    """:func:`markdown_table` of :func:`summarize`, written whole to ``results.md`` (returned) and the
    summary to ``results.json`` (default: in RUN_DIR).

    Raises:
        ConfigError: no results under RUN_DIR, or results of different data.
    """
    summary = summarize(run_dir)
    md = markdown_table(summary)
    write_files(out_md or os.path.join(run_dir, "results.md"), md, out_json or os.path.join(run_dir, "results.json"),
                summary, sort_keys=True)
    return md
