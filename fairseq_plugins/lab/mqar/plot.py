"""MQAR, the figure (docs/results/mqar.md): accuracy against the key–query distance, and against the
state size.

Left: one line per arm (:func:`~fairseq_plugins.lab.mqar.table.summarize`: the mean over the training
seeds, its 95% t-interval over the seeds shaded; an arm with its memory wiped dashed in its arm's
colour), x = the distance buckets (the attention window W between the buckets ≤ 1 W and beyond).
Right: each arm's accuracy over all queries against its state size in bytes (log scale), Zoology's
recall–memory plot. Both panels draw the three reference lines 2/V, 1/k and 1.0. Run as
``fairseq-longmem mqar plot`` (:mod:`fairseq_plugins.lab.mqar.cli`).
"""

from typing import Dict

from fairseq_plugins.lab.common.files import write_atomically
from fairseq_plugins.lab.mqar.table import OVERALL

REFERENCE_STYLE = {"2/V": ":", "1/k": "--", "1.0": "-."}


def _references(ax, summary: Dict) -> None:
    for ref in summary["reference"]:
        ax.axhline(ref["value"], color="tab:gray", linewidth=0.9, linestyle=REFERENCE_STYLE[ref["name"]],
                   label=f"{ref['name']} = {ref['value']:.3g}")


def figure(summary: Dict):
    """The figure of a :func:`~fairseq_plugins.lab.mqar.table.summarize` result (a
    ``matplotlib.figure.Figure`` with its own Agg canvas: no global backend choice)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.4), dpi=120)
    by_distance, by_state = fig.subplots(1, 2)
    colors: Dict[str, str] = {}
    labels = [b["label"] for b in summary["buckets"]]
    for row in summary["rows"]:
        points = [(i, row["cells"][label]) for i, label in enumerate(labels) if label in row["cells"]]
        line, = by_distance.plot([x for x, _ in points], [c["mean"] for _, c in points], marker="o",
                                 label=row["label"], color=colors.get(row["arm"]),
                                 linestyle="--" if row["memory_wiped"] else "-")
        colors.setdefault(row["arm"], line.get_color())
        bounds = [(x, c) for x, c in points if c["low"] is not None]
        if bounds:
            by_distance.fill_between([x for x, _ in bounds], [c["low"] for _, c in bounds],
                                     [c["high"] for _, c in bounds], color=line.get_color(), alpha=0.15, linewidth=0)
        state = row["state_bytes"] if isinstance(row["state_bytes"], (int, float)) else row["state_bytes"][0]
        overall = row["cells"][OVERALL]
        by_state.plot([state], [overall["mean"]], marker="o" if not row["memory_wiped"] else "x",
                      color=line.get_color(), linestyle="none", label=row["label"])
        if overall["low"] is not None:
            by_state.vlines(state, overall["low"], overall["high"], color=line.get_color(), linewidth=1)
    window_edge = sum(1 for b in summary["buckets"] if b["high"] is not None and b["high"] <= summary["window"])
    by_distance.axvline(window_edge - 0.5, color="black", linewidth=0.8, alpha=0.5, label="d = W (the window)")
    by_distance.set_xticks(range(len(labels)), labels)
    by_distance.set_xlabel(f"key–query distance d (W = {summary['window']} tokens)")
    by_state.set_xscale("log")
    by_state.set_xlabel("state size (bytes: Σ layers of the sequence mixer's state × 4)")
    for ax in (by_distance, by_state):
        _references(ax, summary)
        ax.set_ylabel("accuracy at the query positions")
        ax.set_ylim(-0.02, 1.05)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    seeds = max(len(r["seeds"]) for r in summary["rows"])
    fig.suptitle(f"MQAR: V = {summary['vocab']}, k = {summary['pairs']}, length {summary['length']} (mean over "
                 f"{seeds} seed{'s' if seeds > 1 else ''}{', 95% t-interval over seeds' if seeds > 1 else ''})",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot(summary: Dict, path: str) -> None:
    """Write :func:`figure` to ``path`` (PNG), whole or not at all."""
    fig = figure(summary)
    write_atomically({path: lambda tmp: fig.savefig(tmp, format="png")})
