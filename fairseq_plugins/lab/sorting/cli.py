"""``fairseq-longmem sorting``: the sorting task's scores, table and figures (docs/results/sorting.md, "Sorting task").

    fairseq-longmem sorting score --checkpoint CKPT [CKPT ...] --data DATA_BIN [--memory-wiped]
                                  [--json OUT.json ...]
    fairseq-longmem sorting signal --checkpoint CKPT --data DATA_BIN [--updates N] [--json OUT.json]
    fairseq-longmem sorting table RUNS [--out-md R.md] [--out-json R.json]
    fairseq-longmem sorting plot RUNS [--accuracy PNG] [--curves PNG]

``score`` prints each checkpoint's teacher-forced answer accuracy with its references and writes
it as JSON with ``--json`` (one path per checkpoint); ``--memory-wiped`` scores the model with its
long-term memory wiped (a model without one is refused). ``signal`` prints where the training
signal goes over the first batches of a split: answer tokens per update, the loss, the gradient
norm of each part of the model and of each long-term-memory parameter
(:mod:`fairseq_plugins.lab.sorting.signal`). ``table`` gathers
RUNS/[seedS/]T<length>/<arm>/accuracy[-wiped].json into RUNS/results.md (printed; mean and interval
over the seeds: :mod:`fairseq_plugins.lab.sorting.table`) and RUNS/results.json; ``plot``
draws RUNS/accuracy.png (accuracy against T) and RUNS/curves.png (the training loss on the answer
against the update, every seed) from RUNS/results.json and RUNS/[seedS/]T*/ARM/train.log. RUNS is
the output folder of fairseq_plugins/lab/sorting/sorting.sh. Every file is written whole or not at all; bad input (a missing
checkpoint, data that is not the sorting task's, a RUNS without results) is one line
``fairseq-longmem sorting VERB: error: ...``, exit status 2. The metric and the references:
:mod:`fairseq_plugins.lab.sorting.score`; the figures: :mod:`fairseq_plugins.lab.sorting.plot`.
"""

import argparse
import logging
import os
import time
from typing import List, Optional

from fairseq_plugins.lab.common.cli import positive_int, topic_parser
from fairseq_plugins.errors import ConfigError


def _verb(sub, name: str, text: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=text, description=text)


def _parser(prog: str) -> argparse.ArgumentParser:
    p, sub = topic_parser(prog, __doc__)
    s = _verb(sub, "score", "answer accuracy of checkpoints (prints it; --json writes it, every file once all "
                            "checkpoints are scored)")
    s.add_argument("--checkpoint", required=True, nargs="+", help="fairseq checkpoint(s) (.pt), scored in turn")
    s.add_argument("--data", required=True, help="bin/ folder of fairseq_plugins/lab/sorting/make-sorting.sh")
    s.add_argument("--split", default="test", help="split to score [test]")
    s.add_argument("--max-examples", type=positive_int, default=None, metavar="N",
                   help="score only the first N examples [all]")
    s.add_argument("--batch-size", type=positive_int, default=16, help="examples per forward call [16]")
    s.add_argument("--json", default=None, nargs="+", help="write each checkpoint's result here as JSON "
                                                           "(one path per checkpoint; with its provenance)")
    s.add_argument("--force", action="store_true", help="replace earlier results at the --json paths")
    s.add_argument("--gpu", action="store_true", help="use CUDA when available")
    s.add_argument("--memory-wiped", action="store_true",
                   help="score with every long-term memory wiped before each read (the memory-wiped control)")
    g = _verb(sub, "signal", "answer tokens, loss and gradient norm per part of the model over the first "
                             "batches of a split, as fairseq-train would compute them (changes nothing)")
    g.add_argument("--checkpoint", required=True, help="fairseq checkpoint (.pt) of a streaming arm")
    g.add_argument("--data", required=True, help="bin/ folder of fairseq_plugins/lab/sorting/make-sorting.sh")
    g.add_argument("--split", default="train", help="split whose first batches are read [train]")
    g.add_argument("--updates", type=positive_int, default=20, help="batches (updates of fairseq-train) to read [20]")
    g.add_argument("--json", default=None, help="write the profile here as JSON")
    g.add_argument("--force", action="store_true", help="replace an earlier result at --json")
    t = _verb(sub, "table", "length × arm (× seed, wiped) table from RUNS/[seedS/]T*/ARM/accuracy*.json "
                            "(writes results.md/.json)")
    t.add_argument("runs", help="output folder of fairseq_plugins/lab/sorting/sorting.sh")
    t.add_argument("--out-md", default=None, help="markdown table [RUNS/results.md]")
    t.add_argument("--out-json", default=None, help="JSON table [RUNS/results.json]")
    f = _verb(sub, "plot", "accuracy-against-T and learning-curve plots (writes two PNGs)")
    f.add_argument("runs", help="output folder of fairseq_plugins/lab/sorting/sorting.sh")
    f.add_argument("--accuracy", default=None, help="accuracy-against-T plot [RUNS/accuracy.png]")
    f.add_argument("--curves", default=None, help="learning-curve plot [RUNS/curves.png]")
    return p


def _score(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.common import arms
    from fairseq_plugins.lab.common.answers import train_seconds
    from fairseq_plugins.lab.sorting import score as sorting
    from fairseq_plugins.lab.common.files import provenance, refuse_existing, text_writer, write_atomically
    from fairseq_plugins.lab.common.table import to_json

    if args.json and len(args.json) != len(args.checkpoint):
        raise ConfigError(f"{len(args.checkpoint)} checkpoints but {len(args.json)} --json paths")
    refuse_existing(args.json or [], args.force, option="--force", where="--json")
    for name in ("fairseq", "fairseq_plugins"):  # loading a checkpoint is not news here
        logging.getLogger(name).setLevel(logging.WARNING)

    def named(checkpoint: str, e: ConfigError) -> ConfigError:
        if len(args.checkpoint) == 1 or checkpoint in str(e):
            return e
        return ConfigError(f"{checkpoint}: {e}")

    for checkpoint in args.checkpoint:  # every checkpoint's pre-load refusal before any is scored
        try:
            sorting.check_checkpoint_for(checkpoint, args.data, args.split)
        except ConfigError as e:
            raise named(checkpoint, e) from None
    sorting_arms = arms.names("sorting")
    results = {}
    for i, checkpoint in enumerate(args.checkpoint):
        t0 = time.time()
        try:
            r = sorting.score(checkpoint, args.data, args.split, args.max_examples, args.batch_size,
                              cpu=not args.gpu, memory_wiped=args.memory_wiped, checked=True)
        except ConfigError as e:
            raise named(checkpoint, e) from None
        r["score_seconds"] = round(time.time() - t0, 1)
        r["train_seconds"] = train_seconds(checkpoint)
        wiped = " (memory wiped)" if r["memory_wiped"] else ""
        # the arm's folder names it where the config cannot (a matched twin's config is memory_off's)
        folder = os.path.basename(os.path.dirname(os.path.abspath(checkpoint)))
        name = folder if folder in sorting_arms and folder != r["arm"] and folder.startswith(r["arm"]) else r["arm"]
        print(f"{name}{wiped} T={r['length']} K={r['symbols']}: accuracy {r['accuracy']:.4f} "
              f"({r['correct']}/{r['answer_tokens']}), "
              f"window count baseline {r['window_count_baseline']:.4f}, receptive-field baseline "
              f"{r['receptive_field_baseline']:.4f}, chance {r['chance']:.3f} "
              f"(no repeat {r['chance_no_repeat']:.3f}); {r['context']}; {r['score_seconds']}s")
        if args.json:
            r["provenance"] = provenance(prog, argv, [checkpoint])
            results[args.json[i]] = text_writer(to_json(r, sort_keys=True))
    write_atomically(results)  # all or nothing: a refused checkpoint leaves no file of the others


def _signal(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.sorting import signal as sorting_signal
    from fairseq_plugins.lab.common.files import provenance, refuse_existing, text_writer, write_atomically
    from fairseq_plugins.lab.common.table import to_json

    refuse_existing([args.json] if args.json else [], args.force, option="--force", where="--json")
    for name in ("fairseq", "fairseq_plugins"):
        logging.getLogger(name).setLevel(logging.WARNING)
    r = sorting_signal.profile(args.checkpoint, args.data, args.updates, args.split)
    print(f"{r['arm']}: {r['answer_tokens_per_update']:.1f} answer tokens per update over the first "
          f"{r['updates']} updates of {args.split}; {r['batches_with_answers']} of the {r['updates']} updates "
          "hold answer tokens")
    if r["batches_with_answers"]:
        print(f"over those: loss {r['loss_bits']:.3f} bits per answer token, gradient norm {r['grad_norm']:.4f} "
              "(mean); per part of the model:")
    else:
        print("no gradient to profile: raise --updates to reach the first answer")
    for group, norm in r["groups"].items():
        print(f"  {group:<28} {norm:.4f}")
    for name, norm in r["long_term_memory"].items():
        print(f"    {name:<50} {norm:.5f}")
    if args.json:
        r["provenance"] = provenance(prog, argv, [args.checkpoint])
        write_atomically({args.json: text_writer(to_json(r, sort_keys=True))})


def _plot(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.sorting import plot as sorting_plot

    if not os.path.isdir(args.runs):
        raise ConfigError(f"{args.runs} is not a folder; pass the output folder of fairseq_plugins/lab/sorting/sorting.sh")
    results = sorting_plot.read_results(args.runs)
    data = sorting_plot.curves(args.runs)
    if not data:
        raise ConfigError(f"no {args.runs}/[seedS/]T*/ARM/train.log found; pass the output folder of "
                          "fairseq_plugins/lab/sorting/sorting.sh")
    accuracy_png = args.accuracy or os.path.join(args.runs, "accuracy.png")
    curves_png = args.curves or os.path.join(args.runs, "curves.png")
    sorting_plot.plot_accuracy(results, accuracy_png)
    sorting_plot.plot_curves(data, curves_png, sorting_plot.read_symbols(args.runs))
    print(f"wrote {accuracy_png} and {curves_png}")


def _table(args: argparse.Namespace, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.sorting.table import table

    print(table(args.runs, args.out_md, args.out_json), end="")


VERBS = {"score": _score, "signal": _signal, "table": _table, "plot": _plot}


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``PROG VERB``."""
    from fairseq_plugins.lab.common.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    return run_command(lambda _argv, _prog: VERBS[args.verb](args, prog, argv), [], f"{prog} {args.verb}")
