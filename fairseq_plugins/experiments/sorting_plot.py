"""The sorting task's figures (docs/results.md, "Sorting task"), from a scripts/sorting.sh run.

RUNS is the output folder of ``scripts/sorting.sh``: ``RUNS/results.json`` (written by
``fairseq-longmem sorting table``) and ``RUNS/T<length>/<arm>/train.log`` (fairseq-train's log).

* :func:`plot_accuracy`: answer accuracy against T, one line per arm, with the references as
  lines: exact counting over the whole sequence (1.0, the answer's definition), the window count
  baseline, chance without repeats and chance;
* :func:`plot_curves`: the training loss on the answer tokens (bits per answer token, fairseq's
  ``train_inner`` lines, every ``--log-interval`` updates) against the update, one panel per T, one
  line per arm, with the loss of a uniform guess over the 20 symbols and over the symbols not yet
  in the answer as lines. Every training example is read once, so each point is measured on
  examples the model had not yet seen.

Run as ``fairseq-longmem sorting plot`` (:mod:`fairseq_plugins.cli.sorting`).
"""

import json
import math
import os
import re
from typing import Dict, List, Tuple

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.report.files import write_atomically

REFERENCES = (("full count", "full_count", "black", ":"),
              ("window count baseline", "window_count_baseline", "tab:red", "--"),
              ("chance (no repeat)", "chance_no_repeat", "tab:gray", "-."),
              ("chance", "chance", "tab:gray", ":"))
# bits per answer token of a uniform guess over the 20 symbols, and over the symbols not yet in the
# answer (log2(20!)/20: every answer holds each symbol once)
UNIFORM_BITS = math.log2(20)
NO_REPEAT_BITS = sum(math.log2(k) for k in range(1, 21)) / 20
_UPDATE = re.compile(r"\bnum_updates=(\d+)")
_NLL = re.compile(r"\bnll_loss=([0-9.]+)")


def read_results(runs: str) -> Dict[int, Dict[str, float]]:
    """``{T: {arm or reference: accuracy}}`` from ``RUNS/results.json``, with ``full_count`` = 1.0."""
    path = os.path.join(runs, "results.json")
    if not os.path.isfile(path):
        raise ConfigError(f"{path} not found; run scripts/sorting.sh (or fairseq-longmem sorting table "
                          f"{runs}) first")
    with open(path, encoding="utf-8") as f:
        accuracy = json.load(f)["accuracy"]
    return {int(t): {**values, "full_count": 1.0} for t, values in accuracy.items()}


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
    """``{T: {arm: training_curve}}`` for every ``RUNS/T<length>/<arm>/train.log``."""
    out: Dict[int, Dict[str, List[Tuple[int, float]]]] = {}
    for name in sorted(os.listdir(runs)):
        if not re.fullmatch(r"T\d+", name) or not os.path.isdir(os.path.join(runs, name)):
            continue
        for arm in sorted(os.listdir(os.path.join(runs, name))):
            log = os.path.join(runs, name, arm, "train.log")
            if os.path.isfile(log):
                out.setdefault(int(name[1:]), {})[arm] = training_curve(log)
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
    fig, ax = plt.subplots(figsize=(6, 4))
    arms = []
    for t in lengths:
        arms += [a for a in _arms(results[t]) if a not in arms]
    for arm in arms:
        ts = [t for t in lengths if arm in results[t]]
        ax.plot(ts, [results[t][arm] for t in ts], marker="o", label=arm)
    for label, key, color, style in REFERENCES:
        ax.plot(lengths, [results[t][key] for t in lengths], color=color, linestyle=style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(t) for t in lengths])
    ax.set_xlabel("T (sequence tokens before the answer)")
    ax.set_ylabel("answer accuracy (teacher-forced)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="center right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)


def plot_curves(data: Dict[int, Dict[str, List[Tuple[int, float]]]], path: str) -> None:
    """The training loss on the answer (bits per token) against the update, one panel per T; PNG at ``path``."""
    plt = _pyplot()
    lengths = sorted(data)
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.5 * len(lengths), 3.6), squeeze=False, sharey=True)
    lowest = min((v for t in lengths for points in data[t].values() for _, v in points), default=UNIFORM_BITS)
    for ax, t in zip(axes[0], lengths):
        for arm, points in data[t].items():
            if points:
                ax.plot([u for u, _ in points], [v for _, v in points], label=arm)
        ax.axhline(UNIFORM_BITS, color="tab:gray", linestyle=":", label="uniform over the 20 symbols")
        ax.axhline(NO_REPEAT_BITS, color="tab:gray", linestyle="-.", label="uniform over the unused symbols")
        # the first updates (loss far above uniform) would flatten the rest
        ax.set_ylim(min(lowest, NO_REPEAT_BITS) - 0.2, UNIFORM_BITS + 0.5)
        ax.set_title(f"T = {t}")
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training loss on the answer (bits/token)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: str) -> None:
    """Write the figure whole or not at all (:func:`fairseq_plugins.report.files.write_atomically`)."""
    import matplotlib.pyplot as plt

    try:
        write_atomically({path: lambda tmp: fig.savefig(tmp, dpi=110, format="png")})
    finally:
        plt.close(fig)
