"""Collect the quick start's logs into one table (markdown + JSON).

    python scripts/lm_results.py RUN_DIR ARM [ARM ...]

Reads RUN_DIR/ARM/{train.log,eval.log,seconds} written by scripts/quickstart.sh
and prints a markdown table of test perplexity (fairseq-eval-lm), parameters,
updates, tokens evaluated and wall time; writes RUN_DIR/results.md and .json.
"""

import json
import re
import sys
from pathlib import Path

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


def main(argv):
    run_dir, arms = Path(argv[1]), argv[2:]
    rows = [collect(run_dir, arm) for arm in arms]
    header = "| arm | test ppl (fairseq-eval-lm) | valid ppl | params | updates | test tokens | train s | eval s |"
    lines = [header, "|" + "---|" * 8]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['test_ppl']:.2f} | {r['valid_ppl']:.2f} | {int(r['params'] or 0):,} | "
                     f"{r['updates']} | {int(r['tokens_evaluated'] or 0):,} | {r.get('train_s', '')} | "
                     f"{r.get('eval_s', '')} |")
    table = "\n".join(lines)
    print(table)
    (run_dir / "results.md").write_text(table + "\n")
    (run_dir / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv)
