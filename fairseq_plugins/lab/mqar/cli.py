"""``fairseq-longmem mqar``: multi-query associative recall — scores, table and figure (docs/results/mqar.md).

    fairseq-longmem mqar score --checkpoint CK --data DIR/bin [--memory-wiped] [--arm ARM] [--json OUT.json]
    fairseq-longmem mqar table RUN_DIR [--out-md R.md] [--out-json R.json]
    fairseq-longmem mqar plot RUN_DIR [--out PNG]

``score`` prints a checkpoint's accuracy at the query positions (argmax at each query marker = the
queried key's value; per example the fraction of its k queries, mean over the examples), per
key–query distance bucket, its state size in bytes and the reference lines 2/V, 1/k and 1.0, on
the test split of fairseq_plugins/lab/mqar/mqar.sh's data DIR, read as the checkpoint was trained (a streaming_lm
checkpoint: each example its own document, the memory starting empty); ``--json`` writes it;
``--memory-wiped`` scores the model with its long-term memory wiped (a model without one is
refused). ``table`` gathers RUN_DIR/ARM/seedS/mqar.json and mqar-wiped.json into RUN_DIR/results.md
(printed: per arm its state size and the mean over seeds with a 95% t-interval over seeds, overall
and per bucket, then the reference lines) and RUN_DIR/results.json; ``plot`` draws accuracy against
distance and against state size into RUN_DIR/accuracy.png. RUN_DIR is the output folder of
fairseq_plugins/lab/mqar/mqar.sh. Every file is written whole or not at all; bad input is one line ``fairseq-longmem
mqar VERB: error: ...``, exit status 2, and writes nothing. The metric and the state count:
:mod:`fairseq_plugins.lab.mqar.score`; the table: :mod:`fairseq_plugins.lab.mqar.table`.
"""

import argparse
from typing import Dict, List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.recall_tasks import add_score_verb, run_topic, score_verb


def _add_score(verbs) -> None:
    add_score_verb(verbs, "accuracy at the query positions of a checkpoint (prints it; --json writes it)",
                   data_help="bin/ folder of fairseq_plugins/lab/mqar/mqar.sh's data",
                   split_help="split to score: test or valid [test]", count=int,
                   max_examples={"help": "score only the first N examples"},
                   json_help="write the result here as JSON (with its provenance)",
                   arm_help="the arm's name for the result [read from the checkpoint]")


def _line(r: Dict) -> str:
    """The printed result after ``ARM:``: accuracy with its counts, per bucket, state, reference lines,
    context, time."""
    per = ", ".join(f"{b['label']} {b['accuracy']:.3f}" for b in r["buckets"] if b["accuracy"] is not None)
    ref = ", ".join(f"{k} {r['reference'][k]:.4f}" for k in ("2/V", "1/k", "1.0"))
    return (f"accuracy {r['accuracy']:.4f} ({r['correct']}/{r['queries']} queries of {r['examples']} examples); "
            f"by distance: {per}; state {r['state']['bytes']:.3g} bytes; reference lines {ref}; {r['context']}; "
            f"{r['score_seconds']}s")


def _score(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.mqar import score as mqar

    if args.max_examples is not None and args.max_examples < 1:
        raise ConfigError(f"--max-examples must be a positive integer, not {args.max_examples}")
    score_verb(args, prog, argv, lambda: mqar.score(args.checkpoint, args.data, args.split, args.memory_wiped,
                                                    args.max_examples, args.batch_size, cpu=not args.gpu,
                                                    arm=args.arm), _line)


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    return run_topic(argv, prog, __doc__, "mqar", _add_score, _score,
                     table_help="arms × buckets table from RUN_DIR/ARM/seedS/mqar*.json (writes results.md/.json)",
                     plot_help="accuracy against distance and state size (writes a PNG)")
