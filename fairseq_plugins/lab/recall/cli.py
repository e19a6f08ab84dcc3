"""``fairseq-longmem recall``: recall by distance — scores, table and figure (docs/results/recall.md).

    fairseq-longmem recall score --checkpoint CK --data DIR/bin [--memory-wiped] [--json OUT.json]
    fairseq-longmem recall table RUN_DIR [--out-md R.md] [--out-json R.json]
    fairseq-longmem recall plot RUN_DIR [--out PNG]

``score`` prints a checkpoint's answer accuracy per distance (argmax at the query marker = the
key; the answer's mean log-probability; the counts) on the test split of data-prep/make-recall.sh's
DIR, read as the checkpoint was trained (a streaming_lm checkpoint: each example its own document,
the memory starting empty), and writes it as JSON with ``--json``; ``--memory-wiped`` scores the
model with its long-term memory wiped (a model without one is refused). ``table`` gathers
RUN_DIR/ARM/seedS/recall.json and recall-wiped.json into RUN_DIR/results.md (printed: per arm and
distance the mean over seeds with a 95% t-interval over seeds) and RUN_DIR/results.json (with
each seed's value); ``plot`` draws accuracy against d/W from the same files into
RUN_DIR/accuracy.png. RUN_DIR is the output folder of scripts/recall.sh. Every file is written
whole or not at all; bad input (a missing checkpoint, data that is not make-recall.sh's, a
checkpoint of another dictionary, a RUN_DIR without results) is one line ``fairseq-longmem recall
VERB: error: ...``, exit status 2, and writes nothing. The metric:
:mod:`fairseq_plugins.lab.recall.score`; the table: :mod:`fairseq_plugins.lab.recall.table`.
"""

import argparse
import logging
import os
import time
from typing import List, Optional

from fairseq_plugins.lab.common.cli import positive_int, topic_parser
from fairseq_plugins.errors import ConfigError


def _parser(prog: str) -> argparse.ArgumentParser:
    p, sub = topic_parser(prog, __doc__)
    s = sub.add_parser("score", help="answer accuracy per distance of a checkpoint (prints it; --json writes it)")
    s.add_argument("--checkpoint", required=True, help="fairseq checkpoint (.pt)")
    s.add_argument("--data", required=True, help="bin/ folder of data-prep/make-recall.sh")
    s.add_argument("--memory-wiped", action="store_true", help="score with the long-term memory wiped")
    s.add_argument("--split", default="test", help="split to score [test]")
    s.add_argument("--max-examples", type=positive_int, default=None, metavar="N",
                   help="score only the first N examples [all]")
    s.add_argument("--batch-size", type=positive_int, default=16, help="examples per forward call [16]")
    s.add_argument("--json", default=None, help="write the result here as JSON (with its provenance: command line, "
                                                "versions, the checkpoint's training seed)")
    s.add_argument("--force", action="store_true", help="replace an earlier result at --json")
    s.add_argument("--gpu", action="store_true", help="use CUDA when available")
    t = sub.add_parser("table", help="arms × distances table from RUN_DIR/ARM/seedS/recall*.json "
                                     "(writes results.md/.json)")
    t.add_argument("run_dir", metavar="RUN_DIR", help="output folder of scripts/recall.sh")
    t.add_argument("--out-md", default=None, help="markdown table [RUN_DIR/results.md]")
    t.add_argument("--out-json", default=None, help="JSON summary [RUN_DIR/results.json]")
    f = sub.add_parser("plot", help="accuracy against d/W from RUN_DIR/ARM/seedS/recall*.json (writes a PNG)")
    f.add_argument("run_dir", metavar="RUN_DIR", help="output folder of scripts/recall.sh")
    f.add_argument("--out", default=None, help="the figure [RUN_DIR/accuracy.png]")
    return p


def _score(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.recall import score as recall
    from fairseq_plugins.lab.common.answers import train_seconds
    from fairseq_plugins.lab.common.files import check_out_folder, provenance, refuse_existing, text_writer, write_atomically
    from fairseq_plugins.lab.common.table import to_json

    if args.json:
        check_out_folder(os.path.dirname(os.path.abspath(args.json)), "--json")
        refuse_existing([args.json], args.force, option="--force", where="--json")
    for name in ("fairseq", "fairseq_plugins"):  # loading a checkpoint is not news here
        logging.getLogger(name).setLevel(logging.WARNING)
    t0 = time.time()
    r = recall.score(args.checkpoint, args.data, args.split, args.memory_wiped, args.max_examples, args.batch_size,
                     cpu=not args.gpu)
    r["score_seconds"] = round(time.time() - t0, 1)
    r["train_seconds"] = train_seconds(args.checkpoint)
    per = ", ".join(f"{d['multiple']}W {d['accuracy']:.3f}" for d in r["distances"] if d["accuracy"] is not None)
    print(f"{r['arm']}{' (memory wiped)' if r['memory_wiped'] else ''}: accuracy {r['accuracy']:.4f} "
          f"({r['correct']}/{r['examples']}), chance {r['chance']:.3f}; by d/W: {per}; {r['context']}; "
          f"{r['score_seconds']}s")
    if args.json:
        r["provenance"] = provenance(prog, argv, [args.checkpoint])
        write_atomically({args.json: text_writer(to_json(r, sort_keys=True))})


def _table(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.recall.table import table

    print(table(args.run_dir, args.out_md, args.out_json), end="")


def _plot(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.recall import plot as recall_plot
    from fairseq_plugins.lab.recall.table import summarize

    if not os.path.isdir(args.run_dir):
        raise ConfigError(f"{args.run_dir} is not a folder; pass the output folder of scripts/recall.sh")
    path = args.out or os.path.join(args.run_dir, "accuracy.png")
    recall_plot.plot(summarize(args.run_dir), path)
    print(f"wrote {path}")


VERBS = {"score": _score, "table": _table, "plot": _plot}


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    from fairseq_plugins.lab.common.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    return run_command(lambda _argv, _prog: VERBS[args.verb](args, prog, argv), [], f"{prog} {args.verb}")
