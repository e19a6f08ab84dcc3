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

PROG = "summarization_results.py"
COLUMNS = [
    ("model", "model"), ("checkpoint", "checkpoint"), ("split", "split"), ("n", "examples"),
    ("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"), ("rougeLsum", "ROUGE-Lsum"),
    ("bleu", "BLEU"), ("hyp_words_mean", "hyp words"), ("ref_words_mean", "ref words"),
    ("decoding", "decoding"),
]
FLOAT_KEYS = {"rouge1", "rouge2", "rougeL", "rougeLsum", "bleu", "hyp_words_mean", "ref_words_mean"}
REQUIRED = ("model", "split", "n", "rouge1", "rouge2", "rougeL", "bleu")


class ResultsError(Exception):
    """Bad input to the results tools (printed as one ``PROG: error: ...`` line)."""


def _cell(key, value):
    if value is None or value == "":
        return "-"
    if key in FLOAT_KEYS:
        return f"{float(value):.2f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(rows) -> str:
    """A markdown table with one line per result row (dicts as written by score_summaries.py)."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + "|".join("---" if key in ("model", "checkpoint", "split", "decoding") else "---:"
                            for key, _ in COLUMNS) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(key, row.get(key)) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def load_row(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            row = json.load(f)
    except FileNotFoundError:
        raise ResultsError(f"{path} not found")
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path} is not JSON ({e})")
    if isinstance(row, list) and len(row) == 1:
        row = row[0]
    if not isinstance(row, dict):
        raise ResultsError(f"{path} does not hold one result row (a JSON object)")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ResultsError(f"{path} lacks {', '.join(missing)} (not written by score_summaries.py?)")
    return row


def write_outputs(rows, out_dir: str, stem: str, force: bool, payload=None) -> str:
    """Write OUT_DIR/STEM.md (the table of ``rows``) and OUT_DIR/STEM.json (``payload``, default
    the list of rows); refuses to overwrite either unless ``force``. Returns the table."""
    md_path, json_path = (os.path.join(out_dir, f"{stem}.{ext}") for ext in ("md", "json"))
    if not force:
        for path in (md_path, json_path):
            if os.path.exists(path):
                raise ResultsError(f"{path} exists (use --force to overwrite)")
    os.makedirs(out_dir, exist_ok=True)
    table = render_markdown(rows)
    with open(md_path, "w", encoding="utf-8") as f:
        f.write(table + "\n")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(rows if payload is None else payload, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return table


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="results.json files from score_summaries.py")
    p.add_argument("--out", required=True, help="folder for comparison.md and comparison.json")
    p.add_argument("--force", action="store_true", help="overwrite existing comparison files")
    args = p.parse_args(argv)
    try:
        rows = [load_row(path) for path in args.results]
        table = write_outputs(rows, args.out, "comparison", args.force)
    except ResultsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(table)


if __name__ == "__main__":
    main()
