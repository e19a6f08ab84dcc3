"""Collect the quick start's logs into one table (markdown + JSON).

    python scripts/lm_results.py RUN_DIR ARM [ARM ...]

Reads RUN_DIR/ARM/{train.log,eval.log,seconds} written by scripts/quickstart.sh
and prints a markdown table of test perplexity (fairseq-eval-lm), parameters,
updates, tokens evaluated and wall time; writes RUN_DIR/results.md and .json.
"""

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fairseq_plugins.report.table import Column, markdown, write_files

PATTERNS = {
    "test_loss_bits": r"Loss \(base 2\): ([0-9.]+)",
    "test_ppl": r"Perplexity: ([0-9.]+)",
    "params": r"num\. model params: ([0-9,]+)",
    "tokens_evaluated": r"Evaluated ([0-9,]+) tokens",
}


def last(pattern, text):
    found = re.findall(pattern, text)
    return found[-1].replace(",", "") if found else None


def collect(run_dir: Path, arm: str) -> dict:
    train_log = (run_dir / arm / "train.log").read_text(errors="replace")
    eval_log = (run_dir / arm / "eval.log").read_text(errors="replace")
    row = {"arm": arm}
    for key, pattern in PATTERNS.items():
        value = last(pattern, eval_log)
        row[key] = float(value) if value is not None else None
    row["updates"] = int(last(r"num_updates[ =]([0-9]+)", train_log) or 0)
    row["valid_ppl"] = float(last(r"valid on 'valid' subset \|.*?\| ppl ([0-9.]+)", train_log) or "nan")
    seconds = (run_dir / arm / "seconds")
    if seconds.exists():
        row["train_s"], row["eval_s"] = (int(x) for x in seconds.read_text().split())
    return row


COLUMNS = [
    Column("arm", "arm"), Column("test_ppl", "test ppl (fairseq-eval-lm)", ".2f"),
    Column("valid_ppl", "valid ppl", ".2f"),
    Column("params", "params", lambda v: f"{int(v or 0):,}", missing="0"), Column("updates", "updates"),
    Column("tokens_evaluated", "test tokens", lambda v: f"{int(v or 0):,}", missing="0"),
    Column("train_s", "train s", missing=""), Column("eval_s", "eval s", missing=""),
]


def main(argv):
    run_dir, arms = Path(argv[1]), argv[2:]
    rows = [collect(run_dir, arm) for arm in arms]
    table = markdown(rows, COLUMNS, pad_empty=True)  # a missing wall time: '|  |', as always
    print(table)
    write_files(str(run_dir / "results.md"), table, str(run_dir / "results.json"), rows)


if __name__ == "__main__":
    main(sys.argv)
