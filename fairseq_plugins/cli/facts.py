"""``fairseq-longmem facts-score``: scores per fact of summaries of the facts corpus.

    fairseq-longmem facts-score --manifest DATA/raw/test.facts.jsonl \\
        --hyp infinite_former=runs/facts/infinite_former/test/hyp.txt --hyp transformer=... [--out DIR]

Reads the manifest written by ``data-prep/prepare-summarization.sh --corpus facts`` and one
hypothesis file per model (one line per example, line-aligned); prints a Markdown table (slot
exact match, set recall and precision, recall and slot exact match per position bucket, each
with a 95% bootstrap interval over documents) and, with ``--out``, writes DIR/facts.md,
DIR/facts.json and DIR/facts.png (recall per bucket), and with ``--log LABEL=FILE`` (fairseq-train
logs) DIR/facts-curves.png (training loss against the update); written whole or not at all. The metrics: fairseq_plugins/summarization/facts.py
and docs/summarization.md.
"""
import argparse
import os
from typing import List, Optional

from fairseq_plugins.errors import ConfigError


def _edges(text: str) -> List[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token offsets (e.g. 1023,4095), got '{text}'")


def _read_hypotheses(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise ConfigError(f"hypothesis file {path} not found (generate-summaries.sh writes OUT/hyp.txt)")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def main(argv: List[str], prog: str) -> Optional[int]:
    """``facts-score``: see the module docstring."""
    from fairseq_plugins.data_prep.readers.facts import VALUES
    from fairseq_plugins.summarization import facts

    p = argparse.ArgumentParser(
        prog=prog, description="Scores per fact of summaries of the facts corpus: reads the manifest "
        "(raw/SPLIT.facts.jsonl) and hypothesis files; prints the table and, with --out, WRITES "
        "DIR/facts.md, DIR/facts.json and DIR/facts.png (recall per position bucket).")
    p.add_argument("--manifest", required=True, help="OUT/raw/SPLIT.facts.jsonl of prepare-summarization.sh --corpus facts")
    p.add_argument("--hyp", action="append", required=True, metavar="[LABEL=]FILE",
                   help="hypotheses, one line per example (repeat for several models; LABEL names the row)")
    p.add_argument("--edges", type=_edges, default=list(facts.DEFAULT_EDGES), metavar="E1,E2",
                   help="bucket edges in source pieces (default: 1023,4095, the truncated models' windows)")
    p.add_argument("--replicates", type=int, default=1000, help="bootstrap replicates (default: 1000)")
    p.add_argument("--seed", type=int, default=1, help="bootstrap seed (default: 1)")
    p.add_argument("--log", action="append", default=[], metavar="LABEL=FILE",
                   help="a fairseq-train log of a model (repeat); with --out, DIR/facts-curves.png plots their "
                        "training loss against the update")
    p.add_argument("--out", default=None, help="folder for facts.md, facts.json and facts.png (default: print only)")
    p.add_argument("--force", action="store_true", help="overwrite DIR/facts.md, facts.json and facts.png")
    args = p.parse_args(argv)
    if args.replicates <= 0:
        raise ConfigError(f"--replicates must be positive, not {args.replicates}")
    entries = facts.read_manifest(args.manifest)
    curves = {}
    for spec in args.log:
        label, sep, path = spec.partition("=")
        if not sep:
            raise ConfigError(f"--log takes LABEL=FILE, not '{spec}'")
        curves[label] = facts.training_curve(path)
    rows = []
    for spec in args.hyp:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = os.path.basename(os.path.dirname(os.path.abspath(spec))) or spec, spec
        hyps = _read_hypotheses(path)
        if len(hyps) != len(entries):
            raise ConfigError(f"{path} has {len(hyps)} lines but {args.manifest} has {len(entries)}; "
                              f"they must be line-aligned (hypotheses of the same split)")
        rows.append({"model": label, "hyp": path, **facts.score(hyps, entries, args.edges, args.replicates,
                                                                 args.seed, closed_set=len(VALUES))})
    table = facts.markdown(rows)
    if args.out:
        from fairseq_plugins.report.files import text_writer, write_atomically
        from fairseq_plugins.report.table import to_json

        names = ("facts.md", "facts.json", "facts.png") + (("facts-curves.png",) if args.log else ())
        paths = {name: os.path.join(args.out, name) for name in names}
        if not args.force:
            for path in paths.values():
                if os.path.exists(path):
                    raise ConfigError(f"{path} exists (use --force to overwrite)")
        write_atomically({paths["facts.md"]: text_writer(table),
                          paths["facts.json"]: text_writer(to_json({"manifest": args.manifest, "rows": rows})),
                          paths["facts.png"]: lambda path: facts.plot(rows, path),
                          **({paths["facts-curves.png"]: lambda path: facts.plot_curves(curves, path)} if curves else {})})
    print(table)
    chance = rows[0]["chance"]
    print(f"chance (a guess from the {chance['closed_set']} values): slot exact match {100 * chance['slot']:.1f}, "
          f"set recall {100 * chance['recall']:.1f}; intervals: 95% bootstrap over documents")
    return 0
