"""Recall by distance, the figure (docs/results/recall.md): accuracy against d/W.

One line per arm (:func:`~fairseq_plugins.lab.recall.table.summarize`: the mean over the
training seeds, its 95% t-interval over the seeds shaded; an arm with its memory wiped dashed in its
arm's colour), x = the distance d in units of the attention window W on a log scale, the window's
edge (d = W) as a vertical line and chance (1/K) as a horizontal one. Run as
``fairseq-longmem recall plot`` (:mod:`fairseq_plugins.lab.recall.cli`).
"""

from typing import Dict

from fairseq_plugins.lab.common.files import write_atomically


def figure(summary: Dict):
    """The figure of a :func:`~fairseq_plugins.lab.recall.table.summarize` result
    (a ``matplotlib.figure.Figure``: its own Agg canvas, no global backend choice)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.4), dpi=120)
    ax = fig.subplots()
    colors: Dict[str, str] = {}
    for row in summary["rows"]:
        points = [(float(d["multiple"]), row["cells"][d["multiple"]]) for d in summary["distances"]
                  if d["multiple"] in row["cells"]]
        xs = [x for x, _ in points]
        line, = ax.plot(xs, [c["mean"] for _, c in points], marker="o", label=row["label"],
                        color=colors.get(row["arm"]), linestyle="--" if row["memory_wiped"] else "-")
        colors.setdefault(row["arm"], line.get_color())
        bounds = [(x, c) for x, c in points if c["low"] is not None]
        if bounds:
            ax.fill_between([x for x, _ in bounds], [c["low"] for _, c in bounds], [c["high"] for _, c in bounds],
                            color=line.get_color(), alpha=0.15, linewidth=0)
    ax.axhline(summary["chance"], color="tab:gray", linestyle=":", label=f"chance 1/K = 1/{summary['keys']}")
    ax.axvline(1.0, color="black", linewidth=0.8, alpha=0.5, label="d = W (the attention window)")
    ax.set_xscale("log", base=2)
    ticks = [float(d["multiple"]) for d in summary["distances"]]
    ax.set_xticks(ticks, [d["multiple"] for d in summary["distances"]])
    ax.set_xlabel(f"distance from the key to the query, d / W (W = {summary['window']} tokens)")
    ax.set_ylabel("recall accuracy (argmax = key)")
    ax.set_ylim(-0.02, 1.02)
    seeds = max(len(r["seeds"]) for r in summary["rows"])
    ax.set_title(f"recall by distance (mean over {seeds} seed{'s' if seeds > 1 else ''}"
                 f"{', 95% t-interval over seeds' if seeds > 1 else ''})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(summary: Dict, path: str) -> None:
    """Write :func:`figure` to ``path`` (PNG), whole or not at all."""
    fig = figure(summary)
    write_atomically({path: lambda tmp: fig.savefig(tmp, format="png")})
