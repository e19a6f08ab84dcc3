"""``fairseq-longmem mqar``: multi-query associative recall — scores, table and figure (docs/results/mqar.md).

    fairseq-longmem mqar score --checkpoint CK --data DIR/bin [--memory-wiped] [--arm ARM] [--json OUT.json]
    fairseq-longmem mqar table RUN_DIR [--out-md R.md] [--out-json R.json]
    fairseq-longmem mqar plot RUN_DIR [--out PNG]

``score`` prints a checkpoint's accuracy at the query positions (argmax at each query marker = the
queried key's value; per example the fraction of its k queries, mean over the examples), per
key–query distance bucket, its state size in bytes and the reference lines 2/V, 1/k and 1.0, on
the test split of scripts/mqar.sh's data DIR, read as the checkpoint was trained (a streaming_lm
checkpoint: each example its own document, the memory starting empty); ``--json`` writes it;
``--memory-wiped`` scores the model with its long-term memory wiped (a model without one is
refused). ``table`` gathers RUN_DIR/ARM/seedS/mqar.json and mqar-wiped.json into RUN_DIR/results.md
(printed: per arm its state size and the mean over seeds with a 95% t-interval over seeds, overall
and per bucket, then the reference lines) and RUN_DIR/results.json; ``plot`` draws accuracy against
distance and against state size into RUN_DIR/accuracy.png. RUN_DIR is the output folder of
scripts/mqar.sh. Every file is written whole or not at all; bad input is one line ``fairseq-longmem
mqar VERB: error: ...``, exit status 2, and writes nothing. The metric and the state count:
:mod:`fairseq_plugins.lab.mqar.score`; the table: :mod:`fairseq_plugins.lab.mqar.table`.
"""

import argparse
import logging
import os
import time
from typing import List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.cli import topic_parser


def _parser(prog: str) -> argparse.ArgumentParser:
    p, sub = topic_parser(prog, __doc__)
    s = sub.add_parser("score", help="accuracy at the query positions of a checkpoint (prints it; --json writes it)")
    s.add_argument("--checkpoint", required=True, help="fairseq checkpoint (.pt)")
    s.add_argument("--data", required=True, help="bin/ folder of scripts/mqar.sh's data")
    s.add_argument("--memory-wiped", action="store_true", help="score with the long-term memory wiped")
    s.add_argument("--arm", default=None, help="the arm's name for the result [read from the checkpoint]")
    s.add_argument("--split", default="test", help="split to score: test or valid [test]")
    s.add_argument("--max-examples", type=int, default=None, help="score only the first N examples")
    s.add_argument("--batch-size", type=int, default=16, help="examples per forward call [16]")
    s.add_argument("--json", default=None, help="write the result here as JSON (with its provenance)")
    s.add_argument("--force", action="store_true", help="replace an earlier result at --json")
    s.add_argument("--gpu", action="store_true", help="use CUDA when available")
    t = sub.add_parser("table", help="arms × buckets table from RUN_DIR/ARM/seedS/mqar*.json "
                                     "(writes results.md/.json)")
    t.add_argument("run_dir", metavar="RUN_DIR", help="output folder of scripts/mqar.sh")
    t.add_argument("--out-md", default=None, help="markdown table [RUN_DIR/results.md]")
    t.add_argument("--out-json", default=None, help="JSON summary [RUN_DIR/results.json]")
    f = sub.add_parser("plot", help="accuracy against distance and state size (writes a PNG)")
    f.add_argument("run_dir", metavar="RUN_DIR", help="output folder of scripts/mqar.sh")
    f.add_argument("--out", default=None, help="the figure [RUN_DIR/accuracy.png]")
    return p


def _score(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.common.answers import train_seconds
    from fairseq_plugins.lab.common.files import (check_out_folder, provenance, refuse_existing, text_writer,
                                                  write_atomically)
    from fairseq_plugins.lab.common.table import to_json
    from fairseq_plugins.lab.mqar import score as mqar

    if args.max_examples is not None and args.max_examples < 1:
        raise ConfigError(f"--max-examples must be a positive integer, not {args.max_examples}")
    if args.json:
        check_out_folder(os.path.dirname(os.path.abspath(args.json)), "--json")
        refuse_existing([args.json], args.force, option="--force", where="--json")
    for name in ("fairseq", "fairseq_plugins"):  # loading a checkpoint is not news here
        logging.getLogger(name).setLevel(logging.WARNING)
    t0 = time.time()
    r = mqar.score(args.checkpoint, args.data, args.split, args.memory_wiped, args.max_examples, args.batch_size,
                   cpu=not args.gpu, arm=args.arm)
    r["score_seconds"] = round(time.time() - t0, 1)
    r["train_seconds"] = train_seconds(args.checkpoint)
    per = ", ".join(f"{b['label']} {b['accuracy']:.3f}" for b in r["buckets"] if b["accuracy"] is not None)
    ref = ", ".join(f"{k} {r['reference'][k]:.4f}" for k in ("2/V", "1/k", "1.0"))
    print(f"{r['arm']}{' (memory wiped)' if r['memory_wiped'] else ''}: accuracy {r['accuracy']:.4f} "
          f"({r['correct']}/{r['queries']} queries of {r['examples']} examples); by distance: {per}; state "
          f"{r['state']['bytes']:.3g} bytes; reference lines {ref}; {r['context']}; {r['score_seconds']}s")
    if args.json:
        r["provenance"] = provenance(prog, argv, [args.checkpoint])
        write_atomically({args.json: text_writer(to_json(r, sort_keys=True))})


def _table(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.mqar.table import table

    print(table(args.run_dir, args.out_md, args.out_json), end="")


def _plot(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.mqar import plot as mqar_plot
    from fairseq_plugins.lab.mqar.table import summarize

    if not os.path.isdir(args.run_dir):
        raise ConfigError(f"{args.run_dir} is not a folder; pass the output folder of scripts/mqar.sh")
    path = args.out or os.path.join(args.run_dir, "accuracy.png")
    mqar_plot.plot(summarize(args.run_dir), path)
    print(f"wrote {path}")


VERBS = {"score": _score, "table": _table, "plot": _plot}


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    from fairseq_plugins.lab.common.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    return run_command(lambda _argv, _prog: VERBS[args.verb](args, prog, argv), [], f"{prog} {args.verb}")
