#!/usr/bin/env python3
"""Merge summarization results (written by scripts/score_summaries.py) into one comparison table.

    python scripts/summarization_results.py RESULTS.json [RESULTS.json ...] --out DIR [--force]

Each RESULTS.json holds one row (one model or baseline scored on one split). Prints the
markdown table and writes DIR/comparison.md and DIR/comparison.json (the rows, in the order
given). Columns: model, checkpoint, split, examples, ROUGE-1/2/L/Lsum F1 (x100, rouge-score with
the Porter stemmer), sacreBLEU (corpus BLEU, 13a), mean hypothesis and reference length in
words, decoding options.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from fairseq_plugins.report.table import Column, markdown, write_files
from script_errors import ScriptError, run_main  # noqa: E402

PROG = "summarization_results.py"
FLOAT_KEYS = {"rouge1", "rouge2", "rougeL", "rougeLsum", "bleu", "hyp_words_mean", "ref_words_mean"}
TEXT_KEYS = ("model", "checkpoint", "split", "decoding")
COLUMNS = [
    Column(key, title, (lambda v: f"{float(v):.2f}") if key in FLOAT_KEYS else None,
           align="---" if key in TEXT_KEYS else "---:")
    for key, title in [
        ("model", "model"), ("checkpoint", "checkpoint"), ("split", "split"), ("n", "examples"),
        ("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"), ("rougeLsum", "ROUGE-Lsum"),
        ("bleu", "BLEU"), ("hyp_words_mean", "hyp words"), ("ref_words_mean", "ref words"),
        ("decoding", "decoding")]
]
REQUIRED = ("model", "split", "n", "rouge1", "rouge2", "rougeL", "bleu")


def render_markdown(rows) -> str:
    """A markdown table with one line per result row (dicts as written by score_summaries.py);
    a missing or empty value reads ``-``."""
    return markdown([{k: (None if v == "" else v) for k, v in row.items()} for row in rows], COLUMNS, escape=True)


def load_row(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            row = json.load(f)
    except FileNotFoundError:
        raise ScriptError(f"{path} not found")
    except json.JSONDecodeError as e:
        raise ScriptError(f"{path} is not JSON ({e})")
    if isinstance(row, list) and len(row) == 1:
        row = row[0]
    if not isinstance(row, dict):
        raise ScriptError(f"{path} does not hold one result row (a JSON object)")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ScriptError(f"{path} lacks {', '.join(missing)} (not written by score_summaries.py?)")
    return row


def write_outputs(rows, out_dir: str, stem: str, force: bool, payload=None) -> str:
    """Write OUT_DIR/STEM.md (the table of ``rows``) and OUT_DIR/STEM.json (``payload``, default
    the list of rows); refuses to overwrite either unless ``force``. Returns the table."""
    table = render_markdown(rows)
    write_files(os.path.join(out_dir, f"{stem}.md"), table, os.path.join(out_dir, f"{stem}.json"),
                rows if payload is None else payload, force=force, ensure_ascii=False)
    return table


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="results.json files from score_summaries.py")
    p.add_argument("--out", required=True, help="folder for comparison.md and comparison.json")
    p.add_argument("--force", action="store_true", help="overwrite existing comparison files")
    args = p.parse_args(argv)

    def run():
        rows = [load_row(path) for path in args.results]
        print(write_outputs(rows, args.out, "comparison", args.force))

    sys.exit(run_main(run, PROG, 2))

if __name__ == "__main__":
    main()
