"""What every benchmark measurement writes: OUT/VERB.md, OUT/VERB.json and OUT/VERB.png.

Each measurement (``fairseq-longmem bench VERB``; docs/benchmark.md) owns its three files and
no other: a run of one verb never changes another verb's files in the same folder. The files
are written whole or not at all (:func:`fairseq_plugins.lab.common.files.write_atomically`); the
plot has one panel per quantity that has points and is not drawn when none has (a stale
OUT/VERB.png of an earlier run of the same verb is then removed, so the three files always
describe one run).
"""

import os
import platform
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from fairseq_plugins.lab.common.files import text_writer, write_atomically
from fairseq_plugins.lab.common.table import to_json

Points = List[Tuple[float, float]]

# the options every table's header and every JSON's meta record, where the verb has them
SIZE_KEYS = ("layers", "width", "heads", "ffn", "vocab", "num_basis", "segment", "paired_segments", "repeats",
             "warmup", "memory_limit_mb", "threads", "clock", "allocator", "tokens_per_step")


@dataclass
class Panel:
    """One plot panel: a line per series (label → (x, y) points; x on a log-2 axis)."""
    series: Dict[str, Points]
    xlabel: str
    ylabel: str
    legend: bool = True
    ylim_zero: bool = False


@dataclass
class Result:
    """A measurement's outputs: the Markdown table, the JSON payload and the plot's panels
    (``title``: the figure's title; ``dpi``: its resolution)."""
    table: str
    payload: Mapping
    panels: List[Panel] = field(default_factory=list)
    title: Optional[str] = None
    dpi: int = 110


def machine(args) -> str:
    """The GPU's name, or the CPU's, its core count and torch's version."""
    import torch

    if args.device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


def meta(args, batching: str) -> Dict:
    """The run's description: device, precision, machine, the sizes and settings it ran with."""
    precision = "fp16" if getattr(args, "fp16", False) else "bf16" if getattr(args, "bf16", False) else "fp32"
    return {"device": args.device, "precision": precision, "machine": machine(args),
            "sizes": {k: getattr(args, k) for k in SIZE_KEYS if hasattr(args, k)}, "batching": batching}


def header(info: Mapping) -> str:
    """The first line of every table: where and how it was measured."""
    return f"Machine: {info['machine']}; precision {info['precision']}; {info['batching']}; sizes {info['sizes']}"


def shown(rows: Iterable[Mapping], column: str, keep: Sequence[str] = ("mode", "context", "arm")) -> List[Mapping]:
    """Rows for a table: a failed measurement shows its error in ``column``."""
    return [{**{k: r[k] for k in keep if k in r}, column: r["error"]} if "error" in r else r for r in rows]


def series(rows: Iterable[Mapping], key: str, label: str = "arm", order: Sequence[str] = ()) -> Dict[str, Points]:
    """(context, ``key``) points of the measured rows, one series per ``label`` value (the
    labels of ``order`` first); rows with an error are left out."""
    out: Dict[str, Points] = {name: [] for name in order}
    for row in rows:
        if "error" not in row:
            out.setdefault(row[label], []).append((row["context"], row[key]))
    return out


def _plotted(panels: Sequence[Panel]) -> List[Panel]:
    kept = []
    for panel in panels:
        lines = {label: pts for label, pts in panel.series.items() if pts}
        if lines:
            kept.append(Panel(lines, panel.xlabel, panel.ylabel, panel.legend, panel.ylim_zero))
    return kept


def plot_writer(panels: Sequence[Panel], title: Optional[str] = None,
                dpi: int = 110) -> Optional[Callable[[str], None]]:
    """A writer of the panels that have points (``None`` when none has: no empty axes)."""
    panels = _plotted(panels)
    if not panels:
        return None

    def write(path: str) -> None:
        import logging

        import matplotlib
        logging.getLogger("matplotlib").setLevel(logging.WARNING)
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * max(len(panels), 2), 4), squeeze=False)
        for ax, panel in zip(axes[0], panels):
            for label, pts in panel.series.items():
                ax.plot(*zip(*pts), marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_xlabel(panel.xlabel)
            ax.set_ylabel(panel.ylabel)
            if panel.ylim_zero:
                ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            if panel.legend:
                ax.legend(fontsize=7)
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=dpi, format="png")
        plt.close(fig)
    return write


def write(out: str, verb: str, result: Result, provenance: Optional[dict] = None) -> List[str]:
    """Write OUT/VERB.md, OUT/VERB.json (with ``provenance``: the run's command line and versions,
    :func:`fairseq_plugins.lab.common.files.provenance`) and (when it has points) OUT/VERB.png, all or none.

    Returns the paths written; a stale OUT/VERB.png is removed when this run has nothing to plot.
    """
    stem = os.path.join(out, verb)
    payload = {**result.payload, "provenance": provenance} if provenance is not None else result.payload
    writers = {f"{stem}.md": text_writer(result.table), f"{stem}.json": text_writer(to_json(payload))}
    plot = plot_writer(result.panels, result.title, result.dpi)
    if plot is not None:
        writers[f"{stem}.png"] = plot
    written = write_atomically(writers)
    if plot is None and os.path.exists(f"{stem}.png"):
        os.remove(f"{stem}.png")
    return written
