"""The sorting task's table over arms, training seeds and the memory-wiped control (docs/results/sorting.md,
"Sorting task").

RUNS is ``fairseq_plugins/lab/sorting/sorting.sh``'s ``--out``: one run in ``RUNS/T<length>/<arm>/``, or one per training
seed in ``RUNS/seed<S>/T<length>/<arm>/`` (``--seeds``); each arm folder holds ``accuracy.json``
(``fairseq-longmem sorting score``) and, for an arm with a long-term memory, ``accuracy-wiped.json``
(the same with ``--memory-wiped``). :func:`summarize` gives, per length, arm and wiped or not, the mean
accuracy over the seeds with a 95% t-interval over the seeds,

    mean ± t(S − 1, 0.975) · s / √S        (s: the standard deviation over the S seeds, ddof 1),

each seed's value, and the references: the window count baseline of *that arm's* window (what
perfect counting reaches with the sequence tokens one layer of the arm attends to without a
long-term memory), the receptive-field baseline (the same over every sequence token the arm's whole
stack reaches without one, through the layers' short-term memories: the ceiling of counting
without a long-term memory; :func:`fairseq_plugins.lab.sorting.score.first_reached`), chance without
repeats and chance. Every seed is scored on the same test examples: the interval
covers training noise only, is not clipped to [0, 1], and one seed gives none. Run as
``fairseq-longmem sorting table`` (:mod:`fairseq_plugins.lab.sorting.cli`).
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

FILES = (("accuracy.json", False), ("accuracy-wiped.json", True))  # (file, memory wiped)
LEVEL = 0.95
BASELINES = ("window_count_baseline", "receptive_field_baseline")  # each with its window, "<name>_window"
REFERENCES = BASELINES + ("chance_no_repeat", "chance")


def collect(runs: str) -> List[Dict]:
    """Every ``RUNS/[seedS/]T<length>/ARM/accuracy[-wiped].json`` as ``{"length", "arm" (the folder's
    name), "seed" (None for a run without seed folders), "memory_wiped", "path", "result"}``, in path order.

    Raises:
        ConfigError: none there, a file that is not JSON, a run without seeds beside seed folders, one
            length scored with two alphabets.
    """
    found = []
    paths = glob.glob(os.path.join(runs, "T*", "*", "accuracy*.json"))
    paths += glob.glob(os.path.join(runs, "seed*", "T*", "*", "accuracy*.json"))
    for path in sorted(paths):
        arm_dir = os.path.dirname(path)
        length_dir = os.path.dirname(arm_dir)
        wiped = dict(FILES).get(os.path.basename(path))
        parent = os.path.dirname(length_dir)
        seed_match = re.fullmatch(r"seed(\d+)", os.path.basename(parent))
        if wiped is None or not re.fullmatch(r"T\d+", os.path.basename(length_dir)):
            continue
        if seed_match is None and os.path.normpath(parent) != os.path.normpath(runs):
            continue  # a folder named seed-something that is not seed<S>
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not JSON ({e}); score that run again (fairseq-longmem sorting score)") \
                from None
        # the arm is the folder's name: a checkpoint's config does not tell memory_off_matched from memory_off
        found.append({"length": int(result["length"]), "arm": os.path.basename(arm_dir), "memory_wiped": wiped,
                      "seed": int(seed_match.group(1)) if seed_match else None, "path": path, "result": result})
    if not found:
        raise ConfigError(f"no {runs}/T*/ARM/accuracy.json (or {runs}/seedS/T*/ARM/accuracy.json) found; "
                          "run fairseq_plugins/lab/sorting/sorting.sh first")
    if any(r["seed"] is None for r in found) and any(r["seed"] is not None for r in found):
        raise ConfigError(f"{runs} holds a run without seeds (T*/) and runs per seed (seedS/T*/): one would be "
                          "counted as another seed; keep them in separate --out folders")
    for length in {r["length"] for r in found}:
        alphabets = {r["result"].get("symbols", 20) for r in found if r["length"] == length}
        if len(alphabets) > 1:
            raise ConfigError(f"T={length} was scored with alphabets of {sorted(alphabets)} symbols in {runs}; "
                              "keep one alphabet per output folder (fairseq_plugins/lab/sorting/sorting.sh --out)")
    return found


def summarize(runs: str) -> Dict:
    """``{"level", "rows": [{"length", "arm", "label", "memory_wiped", "symbols", "seeds", "mean", "low",
    "high", "per_seed": {seed: accuracy}, "window_count_baseline", "window_count_baseline_window",
    "receptive_field_baseline", "receptive_field_baseline_window", "chance_no_repeat", "chance",
    "parameters"}]}``: rows by length, then arm (registry order), the arm's memory-wiped row after it.
    Seeds are strings; a run without seed folders is seed "–"; a reference a file lacks (scored
    before it was recorded) is ``None``."""
    found = collect(runs)
    rows = []
    keys = sorted({(r["length"], r["arm"], r["memory_wiped"]) for r in found},
                  key=lambda k: (k[0], order_key(arm_registry.names("lm"), k[1]), k[2]))
    for length, arm, wiped in keys:
        runs_of = sorted((r for r in found if (r["length"], r["arm"], r["memory_wiped"]) == (length, arm, wiped)),
                         key=lambda r: (r["seed"] is not None, r["seed"] or 0))
        per_seed = {("–" if r["seed"] is None else str(r["seed"])): r["result"]["accuracy"] for r in runs_of}
        mean, low, high = t_interval(list(per_seed.values()), LEVEL)
        first = runs_of[0]["result"]
        rows.append({"length": length, "arm": arm, "label": f"{arm}, memory wiped" if wiped else arm,
                     "memory_wiped": wiped, "symbols": first.get("symbols", 20), "seeds": list(per_seed),
                     "mean": mean, "low": low, "high": high, "per_seed": per_seed,
                     **{key: first.get(key) for key in REFERENCES},
                     **{f"{key}_window": first.get(f"{key}_window") for key in BASELINES},
                     "parameters": first.get("parameters")})
    return {"level": LEVEL, "rows": rows}


def _accuracy(row: Dict) -> str:
    if row["low"] is None:
        return f"{row['mean']:.3f}"
    return f"{row['mean']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"


def _per_seed(row: Dict) -> str:
    return " / ".join(f"{v:.3f}" for v in row["per_seed"].values())


def _seeds(row: Dict) -> str:
    return ",".join(row["seeds"])


def _window(row: Dict, key: str = "window_count_baseline_window") -> str:
    window = row.get(key)
    if isinstance(window, list) and window:
        return str(window[0]) if len(set(window)) == 1 else f"{min(window)}–{max(window)}"
    return "–" if window is None else str(window)


def markdown_table(summary: Dict) -> str:
    """One row per length, arm and wiped or not: seeds, accuracy (mean [95% t-interval over seeds]),
    each seed's accuracy, the arm's window (sequence tokens one layer attends to at the answer) and
    window count baseline, its receptive field (sequence tokens the whole stack reaches) and
    receptive-field baseline, chance without repeats, chance, parameters."""
    columns = [Column("length", "T"), Column("symbols", "K"), Column("label", "arm"),
               Column("seeds", "seeds", _seeds), Column("accuracy", "accuracy", _accuracy),
               Column("per_seed", "per seed", _per_seed), Column("window", "window", _window),
               Column("window_count_baseline", "window count baseline", ".3f"),
               Column("reach", "receptive field", lambda row: _window(row, "receptive_field_baseline_window")),
               Column("receptive_field_baseline", "receptive-field baseline", ".3f", missing="–"),
               Column("chance_no_repeat", "chance (no repeat)", ".3f"), Column("chance", "chance", ".3f"),
               Column("parameters", "parameters", lambda n: f"{n:,}" if isinstance(n, int) else "–")]
    lines = [{**row, "accuracy": row, "per_seed": row, "seeds": row, "window": row, "reach": row}
             for row in summary["rows"]]
    return (markdown(lines, columns) + "\n\n"
            f"Teacher-forced accuracy on the K answer tokens, mean over the training seeds [{summary['level']:.0%} "
            "t-interval over the seeds, with two or more; every seed on the same test examples]. window: the "
            "sequence tokens one layer of the arm attends to at the answer without a long-term memory; window "
            "count baseline: exact counting over that window; receptive field: the sequence tokens the arm's "
            "whole stack reaches there without a long-term memory (through the layers' short-term memories); "
            "receptive-field baseline: exact counting over those, the ceiling of counting without a "
            "long-term memory.\n")


def accuracy_by_length(summary: Dict) -> Dict[str, Dict[str, float]]:
    """``{T: {label: mean accuracy, "window_count_baseline", "receptive_field_baseline", "chance_no_repeat",
    "chance"}}`` for the plot; the references of the first memory arm at that length (else of the first
    arm)."""
    out: Dict[str, Dict[str, float]] = {}
    for length in sorted({r["length"] for r in summary["rows"]}):
        rows = [r for r in summary["rows"] if r["length"] == length]
        ref = next((r for r in rows if r["arm"] != "transformer_lm"), rows[0])
        out[str(length)] = {**{r["label"]: r["mean"] for r in rows}, **{key: ref[key] for key in REFERENCES}}
    return out


def table(runs: str, out_md: Optional[str] = None, out_json: Optional[str] = None) -> str:
    """:func:`markdown_table` of :func:`summarize`, written whole to ``results.md`` (returned) and
    ``results.json`` (``{"accuracy": accuracy_by_length, "summary": summarize}``; default: in RUNS).

    Raises:
        ConfigError: no results under RUNS (see :func:`collect`).
    """
    summary = summarize(runs)
    md = markdown_table(summary)
    write_files(out_md or os.path.join(runs, "results.md"), md, out_json or os.path.join(runs, "results.json"),
                {"accuracy": accuracy_by_length(summary), "summary": summary}, sort_keys=True)
    return md
