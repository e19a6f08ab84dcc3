"""The sorting task's figures (docs/results/sorting.md, "Sorting task"), from a fairseq_plugins/lab/sorting/sorting.sh run.

RUNS is the output folder of ``fairseq_plugins/lab/sorting/sorting.sh``: ``RUNS/results.json`` (written by
``fairseq-longmem sorting table``) and ``RUNS/[seed<S>/]T<length>/<arm>/train.log`` (fairseq-train's log).

* :func:`plot_accuracy`: answer accuracy against T, one line per arm, with the references as
  lines: exact counting over the whole sequence (1.0, the answer's definition), the
  receptive-field and the window count baselines (:mod:`fairseq_plugins.lab.sorting.score`),
  chance without repeats and chance;
* :func:`plot_curves`: the training loss on the answer tokens (bits per answer token, fairseq's
  ``train_inner`` lines, every ``--log-interval`` updates) against the update, one panel per T, one
  line per arm and seed, with the loss of a uniform guess over the K symbols and over the symbols
  not yet in the answer as lines. When every training example is read once, each point is measured
  on examples the model had not yet seen.

Run as ``fairseq-longmem sorting plot`` (:mod:`fairseq_plugins.lab.sorting.cli`).
"""

import json
import math
import os
import re
from typing import Dict, List, Tuple

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import write_atomically

REFERENCES = (("full count", "full_count", "black", ":"),
              ("receptive-field baseline", "receptive_field_baseline", "tab:purple", "--"),
              ("window count baseline", "window_count_baseline", "tab:red", "--"),
              ("chance (no repeat)", "chance_no_repeat", "tab:gray", "-."),
              ("chance", "chance", "tab:gray", ":"))


def uniform_bits(symbols: int = 20):
    """Bits per answer token of a uniform guess over the K symbols, and over the symbols not yet in
    the answer (log2(K!)/K: every answer holds each symbol once)."""
    return math.log2(symbols), sum(math.log2(k) for k in range(1, symbols + 1)) / symbols

_UPDATE = re.compile(r"\bnum_updates=(\d+)")
_NLL = re.compile(r"\bnll_loss=([0-9.]+)")


def _results_json(runs: str) -> Dict:
    path = os.path.join(runs, "results.json")
    if not os.path.isfile(path):
        raise ConfigError(f"{path} not found; run fairseq_plugins/lab/sorting/sorting.sh (or fairseq-longmem sorting table "
                          f"{runs}) first")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_results(runs: str) -> Dict[int, Dict[str, float]]:
    """``{T: {arm or reference: accuracy}}`` from ``RUNS/results.json``, with ``full_count`` = 1.0."""
    accuracy = _results_json(runs)["accuracy"]
    return {int(t): {**values, "full_count": 1.0} for t, values in accuracy.items()}


def read_symbols(runs: str) -> int:
    """K, the alphabet of the run's data (``RUNS/results.json``; 20 when it does not say)."""
    rows = (_results_json(runs).get("summary") or {}).get("rows") or [{}]
    return int(rows[0].get("symbols", 20))


def training_curve(log_path: str) -> List[Tuple[int, float]]:
    """``[(update, nll_loss in bits), ...]`` of fairseq-train's ``train_inner`` lines in a log."""
    points = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "| train_inner |" not in line:
                continue
            update, nll = _UPDATE.search(line), _NLL.search(line)
            if update and nll:
                points.append((int(update.group(1)), float(nll.group(1))))
    return points


def curves(runs: str) -> Dict[int, Dict[str, List[Tuple[int, float]]]]:
    """``{T: {label: training_curve}}`` for every ``RUNS/T<length>/<arm>/train.log`` (label: the arm)
    and ``RUNS/seed<S>/T<length>/<arm>/train.log`` (label: "arm, seed S")."""
    out: Dict[int, Dict[str, List[Tuple[int, float]]]] = {}
    folders = [(runs, "")] + [(os.path.join(runs, name), f", seed {name[4:]}") for name in sorted(os.listdir(runs))
                              if re.fullmatch(r"seed\d+", name) and os.path.isdir(os.path.join(runs, name))]
    for folder, suffix in folders:
        for name in sorted(os.listdir(folder)):
            if not re.fullmatch(r"T\d+", name) or not os.path.isdir(os.path.join(folder, name)):
                continue
            for arm in sorted(os.listdir(os.path.join(folder, name))):
                log = os.path.join(folder, name, arm, "train.log")
                if os.path.isfile(log):
                    out.setdefault(int(name[1:]), {})[arm + suffix] = training_curve(log)
    return out


def _pyplot():
    import logging

    import matplotlib
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _arms(values: Dict[str, float]) -> List[str]:
    refs = {key for _, key, _, _ in REFERENCES}
    return [k for k in values if k not in refs]


def plot_accuracy(results: Dict[int, Dict[str, float]], path: str) -> None:
    """Answer accuracy against T (log scale), one line per arm, the references as lines; PNG at ``path``."""
    plt = _pyplot()
    lengths = sorted(results)
    fig, ax = plt.subplots(figsize=(8, 4))
    arms = []
    for t in lengths:
        arms += [a for a in _arms(results[t]) if a not in arms]
    for arm in arms:
        ts = [t for t in lengths if arm in results[t]]
        ax.plot(ts, [results[t][arm] for t in ts], marker="o", label=arm)
    for label, key, color, style in REFERENCES:
        ts = [t for t in lengths if results[t].get(key) is not None]  # a reference older results lack
        if ts:
            # a marker too, so that a run of one length still shows its references
            ax.plot(ts, [results[t][key] for t in ts], color=color, linestyle=style, marker="_",
                    markersize=14, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(t) for t in lengths])
    ax.set_xlabel("T (sequence tokens before the answer)")
    ax.set_ylabel("answer accuracy (teacher-forced)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the axes, off the data
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)


def plot_curves(data: Dict[int, Dict[str, List[Tuple[int, float]]]], path: str, symbols: int = 20) -> None:
    """The training loss on the answer (bits per token) against the update, one panel per T, for a
    task of K = ``symbols``; PNG at ``path``."""
    plt = _pyplot()
    uniform, no_repeat = uniform_bits(symbols)
    lengths = sorted(data)
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.5 * len(lengths), 3.6), squeeze=False, sharey=True)
    lowest = min((v for t in lengths for points in data[t].values() for _, v in points), default=uniform)
    # one colour per arm, the same for each of its seeds ("arm, seed S"), in the legend once
    arms = sorted({label.split(", seed ")[0] for t in lengths for label in data[t]})
    colours = {arm: f"C{i % 10}" for i, arm in enumerate(arms)}
    for ax, t in zip(axes[0], lengths):
        shown = set()
        for label, points in data[t].items():
            arm = label.split(", seed ")[0]
            if points:
                ax.plot([u for u, _ in points], [v for _, v in points], color=colours[arm], linewidth=1,
                        label=None if arm in shown else arm)
                shown.add(arm)
        ax.axhline(uniform, color="tab:gray", linestyle=":", label=f"uniform over the {symbols} symbols")
        ax.axhline(no_repeat, color="tab:gray", linestyle="-.", label="uniform over the unused symbols")
        # the first updates (loss far above uniform) would flatten the rest
        ax.set_ylim(min(lowest, no_repeat) - 0.2, uniform + 0.5)
        ax.set_title(f"T = {t}")
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training loss on the answer (bits/token)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: str) -> None:
    """Write the figure whole or not at all (:func:`fairseq_plugins.lab.common.files.write_atomically`)."""
    import matplotlib.pyplot as plt

    try:
        write_atomically({path: lambda tmp: fig.savefig(tmp, dpi=110, format="png")})
    finally:
        plt.close(fig)
