"""``fairseq-longmem recall``: recall by distance — scores, table and figure (docs/results/recall.md).

    fairseq-longmem recall score --checkpoint CK --data DIR/bin [--memory-wiped] [--json OUT.json]
    fairseq-longmem recall table RUN_DIR [--out-md R.md] [--out-json R.json]
    fairseq-longmem recall plot RUN_DIR [--out PNG]

``score`` prints a checkpoint's answer accuracy per distance (argmax at the query marker = the
key; the answer's mean log-probability; the counts) on the test split of fairseq_plugins/lab/recall/make-recall.sh's
DIR, read as the checkpoint was trained (a streaming_lm checkpoint: each example its own document,
the memory starting empty), and writes it as JSON with ``--json``; ``--memory-wiped`` scores the
model with its long-term memory wiped (a model without one is refused). ``table`` gathers
RUN_DIR/ARM/seedS/recall.json and recall-wiped.json into RUN_DIR/results.md (printed: per arm and
distance the mean over seeds with a 95% t-interval over seeds) and RUN_DIR/results.json (with
each seed's value); ``plot`` draws accuracy against d/W from the same files into
RUN_DIR/accuracy.png. RUN_DIR is the output folder of fairseq_plugins/lab/recall/recall.sh. Every file is written
whole or not at all; bad input (a missing checkpoint, data that is not make-recall.sh's, a
checkpoint of another dictionary, a RUN_DIR without results) is one line ``fairseq-longmem recall
VERB: error: ...``, exit status 2, and writes nothing. The metric:
:mod:`fairseq_plugins.lab.recall.score`; the table: :mod:`fairseq_plugins.lab.recall.table`.
"""

import argparse
from typing import Dict, List, Optional

from fairseq_plugins.lab.common.cli import positive_int
from fairseq_plugins.lab.common.recall_tasks import add_score_verb, run_topic, score_verb


def _add_score(verbs) -> None:
    add_score_verb(verbs, "answer accuracy per distance of a checkpoint (prints it; --json writes it)",
                   data_help="bin/ folder of fairseq_plugins/lab/recall/make-recall.sh", split_help="split to score [test]",
                   count=positive_int, max_examples={"metavar": "N", "help": "score only the first N examples [all]"},
                   json_help="write the result here as JSON (with its provenance: command line, versions, the "
                             "checkpoint's training seed)")


def _line(r: Dict) -> str:
    """The printed result after ``ARM:``: accuracy with its counts, chance, per distance, context, time."""
    per = ", ".join(f"{d['multiple']}W {d['accuracy']:.3f}" for d in r["distances"] if d["accuracy"] is not None)
    return (f"accuracy {r['accuracy']:.4f} ({r['correct']}/{r['examples']}), chance {r['chance']:.3f}; by d/W: "
            f"{per}; {r['context']}; {r['score_seconds']}s")


def _score(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.recall import score as recall

    score_verb(args, prog, argv, lambda: recall.score(args.checkpoint, args.data, args.split, args.memory_wiped,
                                                      args.max_examples, args.batch_size, cpu=not args.gpu), _line)


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    return run_topic(argv, prog, __doc__, "recall", _add_score, _score,
                     table_help="arms × distances table from RUN_DIR/ARM/seedS/recall*.json (writes results.md/.json)",
                     plot_help="accuracy against d/W from RUN_DIR/ARM/seedS/recall*.json (writes a PNG)")
