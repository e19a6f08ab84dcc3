"""``fairseq-longmem results``: one comparison table from the result files of several runs.

    fairseq-longmem results summarization RESULTS.json [RESULTS.json ...] --out DIR [--force]

summarization  reads results.json files of ``fairseq-longmem summarize score`` (one model or
               baseline on one split each); writes DIR/comparison.md (one markdown table, the rows
               in the order given) and DIR/comparison.json (the rows), and prints the table.

Bad input (a missing or malformed file, an existing output without --force) is one line
``PROG: error: ...`` (exit 2) and writes nothing. Details: docs/summarization.md#result-tables.
"""

import argparse
from typing import List, Optional


def _parser(prog: str) -> argparse.ArgumentParser:
    from fairseq_plugins.cli import topic_parser

    p, sub = topic_parser(prog, __doc__)
    s = sub.add_parser("summarization", help="summarization results.json files -> DIR/comparison.{md,json}")
    s.add_argument("results", nargs="+", help="results.json files of fairseq-longmem summarize score")
    s.add_argument("--out", required=True, help="folder for comparison.md and comparison.json")
    s.add_argument("--force", action="store_true", help="overwrite existing comparison files")
    return p


def _summarization(args) -> None:
    from fairseq_plugins.summarization.results import merge

    print(merge(args.results, args.out, args.force))


VERBS = {"summarization": _summarization}


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    from fairseq_plugins.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    return run_command(lambda _argv, _prog: VERBS[args.verb](args), [], f"{prog} {args.verb}")
