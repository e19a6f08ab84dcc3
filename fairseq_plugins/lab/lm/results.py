"""The language-modelling comparison's table, from the logs of a quick start (docs/results/lm.md).

A run folder RUN_DIR holds one folder per arm with ``train.log`` (fairseq-train's log, as
scripts/train.sh prints it), ``eval.log`` (fairseq-eval-lm's, scripts/evaluate.sh) and
``seconds`` (training and evaluation wall seconds), as scripts/quickstart.sh writes them; with
``--seeds``, one such folder per seed, RUN_DIR/ARM/seedS. :func:`collect` reads one run's row,
:func:`over_seeds` an arm's row over its seeds (the mean test loss in bits with a 95% t-interval
over the seeds, shown as perplexities); :func:`write_table` writes RUN_DIR/results.md and
results.json. Run as ``fairseq-longmem results lm`` (:mod:`fairseq_plugins.cli.results`).
"""

import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.table import Column, markdown, write_files

# fairseq-eval-lm's lines: the last match of each in eval.log
PATTERNS = {
    "test_loss_bits": r"Loss \(base 2\): ([0-9.]+)",
    "test_ppl": r"Perplexity: ([0-9.]+)",
    "params": r"num\. model params: ([0-9,]+)",
    "tokens_evaluated": r"Evaluated ([0-9,]+) tokens",
}

COLUMNS = [
    Column("arm", "arm"), Column("test_ppl", "test ppl (fairseq-eval-lm)", ".2f"),
    Column("valid_ppl", "valid ppl", ".2f"),
    Column("params", "params", lambda v: f"{int(v or 0):,}", missing="0"), Column("updates", "updates"),
    Column("tokens_evaluated", "test tokens", lambda v: f"{int(v or 0):,}", missing="0"),
    Column("train_s", "train s", missing=""), Column("eval_s", "eval s", missing=""),
]


def last(pattern: str, text: str) -> Optional[str]:
    """The last match of ``pattern``'s group in ``text``, without thousands separators."""
    found = re.findall(pattern, text)
    return found[-1].replace(",", "") if found else None


def collect(run_dir: Path, arm: str) -> Dict:
    """One arm's row: ``arm``, ``test_loss_bits``, ``test_ppl``, ``params``, ``tokens_evaluated``
    (None where eval.log lacks the line), ``updates`` (0 if none logged), ``valid_ppl`` (nan),
    ``train_s`` and ``eval_s`` (absent without a ``seconds`` file).

    Raises:
        ConfigError: RUN_DIR/ARM/train.log or eval.log missing.
    """
    logs = {}
    for name in ("train.log", "eval.log"):
        path = run_dir / arm / name
        if not path.is_file():
            raise ConfigError(f"{path} not found; train and evaluate {arm} first (scripts/quickstart.sh --arms {arm})")
        logs[name] = path.read_text(errors="replace")
    row = {"arm": arm}
    for key, pattern in PATTERNS.items():
        value = last(pattern, logs["eval.log"])
        row[key] = float(value) if value is not None else None
    row["updates"] = int(last(r"num_updates[ =]([0-9]+)", logs["train.log"]) or 0)
    row["valid_ppl"] = float(last(r"valid on 'valid' subset \|.*?\| ppl ([0-9.]+)", logs["train.log"]) or "nan")
    seconds = run_dir / arm / "seconds"
    if seconds.exists():
        row["train_s"], row["eval_s"] = (int(x) for x in seconds.read_text().split())
    return row


SEED_COLUMNS = [
    Column("arm", "arm"), Column("seeds", "seeds"),
    Column("test_ppl", "test ppl, mean over seeds [95%]", lambda v: v),
    Column("seed_ppl", "test ppl per seed"), Column("valid_ppl", "valid ppl, mean", ".2f"),
    Column("params", "params", lambda v: f"{int(v or 0):,}", missing="0"), Column("updates", "updates"),
    Column("tokens_evaluated", "test tokens", lambda v: f"{int(v or 0):,}", missing="0"),
]


def over_seeds(run_dir: Path, arm: str, seeds: Sequence[str]) -> Dict:
    """An arm's row over its seeds (RUN_DIR/ARM/seedS): ``test_loss_bits`` the mean over seeds,
    ``test_ppl_value`` 2 to that power, ``test_ppl_low``/``high`` the 95% t-interval of the mean
    loss over seeds as perplexities (None with one seed), ``seed_ppl`` each seed's, ``valid_ppl``
    the perplexity of the mean valid loss, and the first seed's ``params``, ``updates`` and
    ``tokens_evaluated``; ``runs`` holds each seed's own row (:func:`collect`).

    Raises:
        ConfigError: a seed's train.log or eval.log missing, or a seed whose log has no perplexity.
    """
    from fairseq_plugins.lab.common.intervals import t_interval

    runs = []
    for seed in seeds:
        for name in ("train.log", "eval.log"):
            if not (run_dir / arm / f"seed{seed}" / name).is_file():
                raise ConfigError(f"{run_dir / arm / f'seed{seed}' / name} not found; train and evaluate {arm} with "
                                  f"seed {seed} first (scripts/quickstart.sh --arms {arm} --seeds {seed} --out {run_dir})")
        row = collect(run_dir / arm, f"seed{seed}")
        if row["test_loss_bits"] is None:
            raise ConfigError(f"{run_dir / arm / f'seed{seed}' / 'eval.log'} has no perplexity; evaluate it again")
        runs.append({**row, "arm": arm, "seed": int(seed)})
    # log2 of the printed perplexity: 2 decimals of a perplexity in the hundreds are finer than the
    # printed loss's 4 decimals of bits, so that one seed's mean prints as its own perplexity
    mean, low, high = t_interval([math.log2(r["test_ppl"]) for r in runs])
    if low is not None:
        low, high = 2.0 ** low, 2.0 ** high
    valid = [math.log2(r["valid_ppl"]) for r in runs]
    interval = f" [{low:.2f}, {high:.2f}]" if low is not None else ""
    return {"arm": arm, "seeds": ",".join(seeds), "test_loss_bits": mean, "test_ppl_value": 2.0 ** mean,
            "test_ppl": f"{2.0 ** mean:.2f}{interval}", "test_ppl_low": low, "test_ppl_high": high,
            "seed_ppl": " / ".join(f"{r['test_ppl']:.2f}" for r in runs), "valid_ppl": 2.0 ** (sum(valid) / len(valid)),
            "params": runs[0]["params"], "updates": runs[0]["updates"], "tokens_evaluated": runs[0]["tokens_evaluated"],
            "runs": runs}


def write_table(run_dir: Path, arms: Sequence[str], seeds: Sequence[str] = ()) -> str:
    """The arms' rows as a Markdown table (returned), written with the rows to RUN_DIR/results.md
    and results.json (whole or not at all); with ``seeds``, one row per arm over those seeds
    (:func:`over_seeds`)."""
    if seeds:
        rows: List[Dict] = [over_seeds(run_dir, arm, seeds) for arm in arms]
        table = markdown(rows, SEED_COLUMNS)
    else:
        rows = [collect(run_dir, arm) for arm in arms]
        table = markdown(rows, COLUMNS, pad_empty=True)  # a missing wall time: '|  |'
    write_files(str(run_dir / "results.md"), table, str(run_dir / "results.json"), rows)
    return table
