"""``fairseq-longmem results``: one comparison table from the result files of several runs.

    fairseq-longmem results lm RUN_DIR ARM [ARM ...] [--seeds LIST]
    fairseq-longmem results summarization RESULTS.json [RESULTS.json ...] --out DIR [--force]

lm             reads RUN_DIR/ARM/{train.log,eval.log,seconds} of the language-modelling comparison
               (scripts/quickstart.sh writes them); prints a Markdown table of test perplexity
               (fairseq-eval-lm), valid perplexity, parameters, updates, tokens evaluated and wall
               time, and writes it to RUN_DIR/results.md, the rows to RUN_DIR/results.json; with
               --seeds, reads RUN_DIR/ARM/seedS/ and gives each arm's mean over the seeds with a
               95% t-interval and each seed's perplexity.
summarization  reads results.json files of ``fairseq-longmem summarize score`` (one model or
               baseline on one split each); writes DIR/comparison.md (one markdown table, the rows
               in the order given) and DIR/comparison.json (the rows), and prints the table.

Bad input (a missing or malformed file, an existing output without --force) is one line
``PROG: error: ...`` (exit 2) and writes nothing. Details: docs/results/lm.md (lm),
docs/summarization.md#result-tables.
"""

import argparse
from pathlib import Path
from typing import List, Optional


def _parser(prog: str) -> argparse.ArgumentParser:
    from fairseq_plugins.lab.common.cli import topic_parser

    p, sub = topic_parser(prog, __doc__)
    s = sub.add_parser("lm", help="the language-modelling table of a quick start -> RUN_DIR/results.{md,json}")
    s.add_argument("run_dir", metavar="RUN_DIR", help="the quick start's output folder (runs/quickstart)")
    s.add_argument("arms", metavar="ARM", nargs="+", help="the arms (folders of RUN_DIR), in table order")
    s.add_argument("--seeds", default=None, metavar="LIST",
                   help="the training seeds (e.g. 1,2,3): read RUN_DIR/ARM/seedS/ for each (scripts/quickstart.sh --seeds)")
    s = sub.add_parser("summarization", help="summarization results.json files -> DIR/comparison.{md,json}")
    s.add_argument("results", nargs="+", help="results.json files of fairseq-longmem summarize score")
    s.add_argument("--out", required=True, help="folder for comparison.md and comparison.json")
    s.add_argument("--force", action="store_true", help="overwrite existing comparison files")
    return p


def _lm(args) -> None:
    from fairseq_plugins.lab.common.seeds import parse_seeds
    from fairseq_plugins.lab.lm.results import write_table

    print(write_table(Path(args.run_dir), args.arms, parse_seeds(args.seeds) if args.seeds is not None else ()))


def _summarization(args) -> None:
    from fairseq_plugins.lab.summarization.results import merge

    print(merge(args.results, args.out, args.force))


VERBS = {"lm": _lm, "summarization": _summarization}


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    from fairseq_plugins.lab.common.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    return run_command(lambda _argv, _prog: VERBS[args.verb](args), [], f"{prog} {args.verb}")
