"""The copy probe's table and curves (docs/results/copy.md): one row per rung of the ladder.

Reads ``OUT/RUNG/seedS.json`` (:mod:`fairseq_plugins.lab.copy.probe`), and per rung gives the
final accuracy of the first value (mean over the seeds with a 95% t-interval over seeds, and each
seed's), the same with the memory wiped, the first update at which the accuracy reached 0.9
(per seed; ``-`` where it never did) and the parameter count; chance is 1/V. The plot draws every
seed's curve of accuracy against updates, one panel per rung, the wiped control dashed.
"""

import glob
import json
import os
import re
from typing import Dict, List, Optional, Sequence

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import write_atomically
from fairseq_plugins.lab.common.intervals import t_interval
from fairseq_plugins.lab.common.table import Column, markdown, write_files

LEARNED = 0.9  # the accuracy at which a rung counts as having learned the copy


def load(out: str, rungs: Optional[Sequence[str]] = None) -> Dict[str, Dict[int, dict]]:
    """``{rung: {seed: probe result}}`` of the runs under ``out`` (only ``rungs`` when given, in
    that order; else every rung found, by name).

    Raises:
        ConfigError: no run found, a named rung without runs, or a file that is not a probe result.
    """
    found: Dict[str, Dict[int, dict]] = {}
    for path in sorted(glob.glob(os.path.join(out, "*", "seed*.json"))):
        match = re.fullmatch(r"seed(\d+)\.json", os.path.basename(path))
        if not match:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
            result["curve"], result["options"]
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{path} is not a copy-probe result (fairseq-longmem copy train writes one); "
                              "delete it or write it again") from None
        found.setdefault(os.path.basename(os.path.dirname(path)), {})[int(match.group(1))] = result
    if rungs:
        missing = [r for r in rungs if r not in found]
        if missing:
            raise ConfigError(f"no runs of {', '.join(missing)} under {out} (expected {out}/RUNG/seedS.json)")
        return {r: found[r] for r in rungs}
    if not found:
        raise ConfigError(f"no copy-probe runs under {out} (expected {out}/RUNG/seedS.json)")
    return found


def first_learned(curve: List[dict]) -> Optional[int]:
    """The first evaluated update whose accuracy is ≥ :data:`LEARNED`, or ``None``."""
    return next((row["update"] for row in curve if row["accuracy"] >= LEARNED), None)


def _cell(values: List[float]) -> str:
    mean, low, high = t_interval(values)
    text = f"{mean:.3f}" if low is None else f"{mean:.3f} [{low:.3f}, {high:.3f}]"
    return text + " (" + ", ".join(f"{v:.3f}" for v in values) + ")"


def summarize(runs: Dict[str, Dict[int, dict]]) -> List[dict]:
    """One row per rung (module docstring)."""
    rows = []
    for rung, seeds in runs.items():
        results = [seeds[s] for s in sorted(seeds)]
        final = [r["curve"][-1]["accuracy"] for r in results]
        wiped = [r["curve"][-1]["wiped_accuracy"] for r in results if "wiped_accuracy" in r["curve"][-1]]
        options = results[0]["options"]
        rows.append({
            "rung": rung, "seeds": ", ".join(str(s) for s in sorted(seeds)), "arch": options["arch"],
            "settings": " ".join(options.get("set", [])) or "-", "length": options["length"],
            "where": options["where"], "updates": results[0]["curve"][-1]["update"],
            "accuracy": _cell(final), "wiped": _cell(wiped) if len(wiped) == len(final) else None,
            "learned_at": ", ".join(str(first_learned(r["curve"]) or "-") for r in results),
            "parameters": results[0]["parameters"], "chance": results[0]["chance"],
            "final": final, "final_wiped": wiped})
    return rows


COLUMNS = [Column("rung", "rung"), Column("settings", "model options"), Column("length", "length", align="---:"),
           Column("where", "value"), Column("updates", "updates", align="---:"), Column("seeds", "seeds"),
           Column("accuracy", "accuracy (mean [95% t], per seed)"), Column("wiped", "memory wiped"),
           Column("learned_at", f"first update ≥ {LEARNED}"), Column("parameters", "parameters", align="---:")]


def plot(runs: Dict[str, Dict[int, dict]], path: str) -> None:
    """Every seed's curve, one panel per rung (module docstring), written whole or not at all."""
    from matplotlib.figure import Figure

    count = len(runs)
    cols = min(count, 4)
    rows = -(-count // cols)
    fig = Figure(figsize=(3.2 * cols, 2.6 * rows), dpi=110)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (rung, seeds) in zip(axes.flat, runs.items()):
        for seed in sorted(seeds):
            curve = seeds[seed]["curve"]
            xs = [row["update"] for row in curve]
            line, = ax.plot(xs, [row["accuracy"] for row in curve], label=f"seed {seed}")
            if all("wiped_accuracy" in row for row in curve):
                ax.plot(xs, [row["wiped_accuracy"] for row in curve], linestyle="--", color=line.get_color())
        ax.axhline(next(iter(seeds.values()))["chance"], color="tab:gray", linestyle=":")
        ax.set_title(rung, fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    axes[0][0].legend(fontsize=6)
    fig.supxlabel("updates", fontsize=8)
    fig.supylabel("accuracy, first value", fontsize=8)
    fig.suptitle("solid: the model; dashed: its memory wiped; dotted: chance", fontsize=8)
    fig.tight_layout()
    write_atomically({path: lambda tmp: fig.savefig(tmp, format="png")})


def write(out: str, rungs: Optional[Sequence[str]], dest: str, force: bool) -> str:
    """``dest``/copy.md, copy.json and copy.png of the runs under ``out``; returns the table."""
    runs = load(out, rungs)
    rows = summarize(runs)
    table = markdown(rows, COLUMNS, escape=True)
    write_files(os.path.join(dest, "copy.md"), table, os.path.join(dest, "copy.json"), rows, force=force)
    plot(runs, os.path.join(dest, "copy.png"))
    return table
