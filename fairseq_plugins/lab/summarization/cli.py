"""``fairseq-longmem summarize``: score summaries, the Lead-k baseline, decoding lengths, length checks.

    fairseq-longmem summarize score --hyp HYP --ref REF --model NAME --split SPLIT --out DIR
        [--checkpoint CK] [--decoding TEXT] [--force] [--bleu-tokenize auto|13a|zh|char|intl|none]
        [--rouge-tokenizer unicode|rouge-score]
    fairseq-longmem summarize lead --source SRC [--k 3] --out FILE [--force]
    fairseq-longmem summarize decoding-lengths DATA
    fairseq-longmem summarize check-lengths DATA_BIN --max-source N --max-target N [--truncate-source]
        [--splits train,valid,test]
    fairseq-longmem summarize task-args CHECKPOINT
    fairseq-longmem summarize hypotheses GENERATE_OUT --data DATA_BIN --split SPLIT --out HYP [--ref REF]
    fairseq-longmem summarize facts --manifest DATA/raw/SPLIT.facts.jsonl --hyp [LABEL=]HYP ... [--out DIR]
        [--log LABEL=TRAIN_LOG ...] [--edges 1023,4095] [--replicates 1000] [--seed 1] [--force]

What each reads and writes:
  score             reads HYP and REF (one summary per line, line-aligned: a model's hyp.txt or a
                    Lead-k output, and the prepared raw/SPLIT.target); writes DIR/results.json (one
                    row: ROUGE-1/2/L/Lsum F1 and sacreBLEU x100, sacreBLEU's signature, counts,
                    names, decoding, versions of rouge-score, nltk and sacreBLEU) and DIR/results.md
                    (the row as a markdown table), and prints the table; one warning line when fewer
                    than half the hypotheses are distinct. BLEU's tokenizer is chosen from the
                    references (zh for Chinese, char for Japanese and Thai, else 13a) unless forced.
  lead              reads SRC (one document per line, e.g. raw/test.source); writes FILE, the first
                    k sentences of each document, one line per document.
  decoding-lengths  reads DATA/stats.json (or DATA/../stats.json; data-prep/prepare-summarization.sh);
                    prints MIN_LEN=, MAX_LEN_B=, LENPEN= and LENGTHS_FROM= lines for bash (writes nothing).
  check-lengths     reads DATA_BIN/SPLIT.source-target.{source,target}.idx; prints per split the
                    examples, longest source and target and what --truncate-source cuts (writes nothing);
                    exit 2 on what fairseq would drop (a source over --max-source without
                    --truncate-source, a target over --max-target).
  task-args         reads a translation checkpoint; prints its --source-lang, --target-lang,
                    --max-source-positions, --max-target-positions (and --truncate-source), one per
                    line, for fairseq-generate (writes nothing).
  hypotheses        reads fairseq-generate's output (its D- lines) and DATA_BIN's SPLIT; writes HYP,
                    one hypothesis per line in example order (--ref: first checks that REF has one
                    line per example).
  facts             reads the facts corpus' manifest (data-prep/prepare-summarization.sh --corpus facts)
                    and one hypothesis file per model and run; prints a table of scores per fact (slot
                    exact match, set recall and precision, recall and slot exact match per position
                    bucket, 95% bootstrap intervals over documents, and runs where a model has
                    several; for every LABEL given with its memory-wiped control LABEL wiped, a second
                    table of the paired differences LABEL − LABEL wiped, resampling both together) and
                    with --out writes DIR/facts.md, DIR/facts.json, DIR/facts.png (recall per bucket)
                    and, with --log (fairseq-train logs), DIR/facts-curves.png (training loss against
                    the update).

Every verb takes --prog NAME (the recipe that runs it, for its messages). Bad input is one line
``PROG: error: ...`` (exit 2) and writes nothing; outputs are written whole or not at all.
Merge several results.json into one table with ``fairseq-longmem results summarization``.
Details: docs/summarization.md.
"""

import argparse
import os
import sys
from typing import List, Optional

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.facts.score import DEFAULT_EDGES
from fairseq_plugins.lab.summarization.tokenizers import BLEU_TOKENIZERS, ROUGE_TOKENIZERS


def _parser(prog: str) -> argparse.ArgumentParser:
    from fairseq_plugins.lab.common.cli import non_negative_int, positive_int, topic_parser

    p, sub = topic_parser(prog, __doc__)
    s = sub.add_parser("score", help="ROUGE and sacreBLEU of summaries against references: DIR/results.{json,md}")
    s.add_argument("--hyp", required=True, help="system summaries, one per line")
    s.add_argument("--ref", required=True, help="reference summaries, one per line (e.g. OUT/raw/test.target)")
    s.add_argument("--model", required=True, help="name of the system (arm or baseline) for the table")
    s.add_argument("--checkpoint", default="", help="checkpoint file that produced --hyp ('' for baselines)")
    s.add_argument("--split", required=True, help="data split scored (e.g. test)")
    s.add_argument("--decoding", default="", help="decoding options, recorded verbatim")
    s.add_argument("--out", required=True, help="folder for results.md and results.json")
    s.add_argument("--force", action="store_true", help="overwrite existing results files")
    s.add_argument("--bleu-tokenize", choices=BLEU_TOKENIZERS, default="auto",
                   help="sacreBLEU's tokenizer (default auto: zh for Chinese, char for Japanese, Thai, Lao, "
                        "Myanmar and Khmer, else 13a, from the references' letters)")
    s.add_argument("--rouge-tokenizer", choices=ROUGE_TOKENIZERS, default="unicode",
                   help="unicode (default: every script) or rouge-score (its own, [a-z0-9] words only)")
    s = sub.add_parser("lead", help="the Lead-k baseline: the first k sentences of each document, to FILE")
    s.add_argument("--source", required=True, help="documents, one per line (e.g. OUT/raw/test.source)")
    s.add_argument("--k", type=positive_int, default=3, help="sentences to keep per document (default 3)")
    s.add_argument("--out", required=True, help="output file, one summary per line")
    s.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    s = sub.add_parser("decoding-lengths", help="MIN_LEN, MAX_LEN_B, LENPEN from the training targets (for bash)")
    s.add_argument("data", help="the folder of data-prep/prepare-summarization.sh, or its bin/")
    s = sub.add_parser("check-lengths", help="source/target lengths of a summarization binary against a model's limits")
    s.add_argument("data", help="fairseq-preprocess output (--source-lang source --target-lang target)")
    s.add_argument("--max-source", type=positive_int, required=True, help="--max-source-positions of the model")
    s.add_argument("--max-target", type=positive_int, required=True, help="--max-target-positions of the model")
    s.add_argument("--truncate-source", action="store_true", help="sources are cut (fairseq --truncate-source)")
    s.add_argument("--splits", default="train,valid,test", help="comma-separated splits that must exist")
    s = sub.add_parser("task-args", help="a translation checkpoint's task options for fairseq-generate, one per line")
    s.add_argument("checkpoint", help="a checkpoint of scripts/train-summarizer.sh")
    s = sub.add_parser("hypotheses", help="fairseq-generate's D- lines in example order, one per line, to HYP")
    s.add_argument("generate_out", metavar="GENERATE_OUT", help="fairseq-generate's stdout (S-/T-/H-/D-/P- lines)")
    s.add_argument("--data", required=True, help="the binarized data it generated from (OUT/bin)")
    s.add_argument("--split", required=True, help="the split generated (--gen-subset)")
    s.add_argument("--out", required=True, help="output file (hyp.txt)")
    s.add_argument("--ref", help="the split's references (raw/SPLIT.target): must have one line per example")
    s = sub.add_parser("facts", help="scores per fact of the facts corpus' summaries: DIR/facts.{md,json,png}")
    s.add_argument("--manifest", required=True,
                   help="OUT/raw/SPLIT.facts.jsonl of prepare-summarization.sh --corpus facts")
    s.add_argument("--hyp", action="append", required=True, metavar="[LABEL=]FILE",
                   help="hypotheses, one line per example (repeat for several models; LABEL names the row, "
                        "default: the file's folder; the same LABEL= again adds another run of that model, e.g. "
                        "another training seed: its row pools the runs and its interval resamples them; files "
                        "without LABEL= are never pooled)")
    s.add_argument("--edges", type=_edges, default=list(DEFAULT_EDGES), metavar="E1,E2",
                   help="bucket edges in source pieces (default: 1023,4095, the truncated models' windows)")
    s.add_argument("--replicates", type=positive_int, default=1000, help="bootstrap replicates (default: 1000)")
    s.add_argument("--seed", type=non_negative_int, default=1, help="bootstrap seed (default: 1)")
    s.add_argument("--log", action="append", default=[], metavar="LABEL=FILE",
                   help="a fairseq-train log of a model (repeat; the same LABEL again: another run of it); with "
                        "--out, DIR/facts-curves.png plots their training loss against the update")
    s.add_argument("--out", default=None, help="folder for facts.md, facts.json and facts.png (default: print only)")
    s.add_argument("--force", action="store_true", help="overwrite DIR/facts.md, facts.json, facts.png and "
                                                            "facts-curves.png (removed when no --log is given)")
    for s in sub.choices.values():
        s.add_argument("--prog", help="name used in messages (the recipe that runs it)")
    return p


def _edges(text: str) -> List[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token offsets (e.g. 1023,4095), got '{text}'")


def _score(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.summarization.results import checkpoint_parameters, write_outputs
    from fairseq_plugins.lab.summarization.scoring import score_files, warnings

    from fairseq_plugins.lab.common.files import check_out_folder, provenance, refuse_existing

    check_out_folder(args.out)
    refuse_existing([os.path.join(args.out, name) for name in ("results.md", "results.json")], args.force)
    row = {"model": args.model, "checkpoint": args.checkpoint, "split": args.split, "decoding": args.decoding,
           "parameters": checkpoint_parameters(args.checkpoint) if args.checkpoint else None}
    row.update(score_files(args.hyp, args.ref, args.bleu_tokenize, args.rouge_tokenizer))
    row["provenance"] = provenance(prog, argv, [args.checkpoint] if args.checkpoint else [])
    for warning in warnings(row):
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    print(write_outputs([row], args.out, "results", args.force, payload=row))


def _lead(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.summarization.lead import write_lead

    n = write_lead(args.source, args.k, args.out, args.force)
    print(f"{prog}: wrote lead-{args.k} of {n} documents to {args.out}")


def _decoding_lengths(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.summarization.decoding import shell_lines

    print(shell_lines(args.data))


def _check_lengths(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.summarization.lengths import check_lengths

    for line in check_lengths(args.data, args.max_source, args.max_target, args.truncate_source,
                              args.splits.split(",")):
        print(f"{prog}: {line}", flush=True)


def _task_args(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.summarization.generation import task_args

    print("\n".join(task_args(args.checkpoint)))


def _hypotheses(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.summarization.generation import write_hypotheses

    if not os.path.isfile(args.generate_out):
        raise ConfigError(f"{args.generate_out} not found (fairseq-generate's output)")
    if args.ref is not None and not os.path.isfile(args.ref):
        raise ConfigError(f"--ref {args.ref} not found")
    n = write_hypotheses(args.generate_out, args.data, args.split, args.out, args.ref)
    print(f"{prog}: wrote {n} summaries to {args.out}")


def _facts(args, prog: str, argv: List[str]) -> None:
    from fairseq_plugins.lab.facts.reader import VALUES
    from fairseq_plugins.lab.facts import score as facts
    from fairseq_plugins.lab.facts import paired as facts_paired
    from fairseq_plugins.lab.summarization.lines import read_lines

    if args.out:
        from fairseq_plugins.lab.common.files import check_out_folder

        check_out_folder(args.out)
    entries = facts.read_manifest(args.manifest)
    curves = {}
    for spec in args.log:
        label, sep, path = spec.partition("=")
        if not sep:
            raise ConfigError(f"--log takes LABEL=FILE, not '{spec}'")
        curves.setdefault(label, []).append(facts.training_curve(path))
    runs = {}  # key -> (label, its hypothesis files, one per run, labelled): LABEL given again is another seed
    for i, spec in enumerate(args.hyp):
        label, sep, path = spec.partition("=")
        label = label.strip()
        if sep and not label:
            raise ConfigError(f"--hyp {spec}: the LABEL before '=' is empty; give LABEL=FILE, or the file alone")
        key = label
        if not sep:  # an unlabelled file is a row of its own, named after its folder
            label, path = os.path.basename(os.path.dirname(os.path.abspath(spec))) or spec, spec
            key = i
        if key in runs and os.path.abspath(path) in map(os.path.abspath, runs[key][1]):
            raise ConfigError(f"--hyp {path} is given twice for {label}; give each run of a model once")
        runs.setdefault(key, (label, [], bool(sep)))[1].append(path)
    rows, hypotheses = [], {}  # hypotheses: those of the labelled models (the only ones paired)
    for label, files, labelled in runs.values():
        hyps = []
        for path in files:
            hyps.append(read_lines(path, "--hyp"))
            if len(hyps[-1]) != len(entries):
                raise ConfigError(f"{path} has {len(hyps[-1])} lines but {args.manifest} has {len(entries)}; "
                                  f"they must be line-aligned (hypotheses of the same split)")
        row = facts.score_runs(hyps, entries, args.edges, args.replicates, args.seed, closed_set=len(VALUES))
        rows.append({"model": label, "hyp": files, **row})
        if labelled:
            hypotheses[label] = (files, hyps)
    pairs, unpaired = facts_paired.wiped_pairs(list(hypotheses))
    for label in unpaired:
        print(f"{prog}: warning: --hyp label '{label}' looks like a memory-wiped control but is not 'MODEL wiped' "
              f"for a MODEL labelled here: no paired difference for it", file=sys.stderr)
    differences = []
    for model, control in pairs:
        try:
            difference = facts_paired.paired_difference(hypotheses[model][1], hypotheses[control][1], entries,
                                                        args.edges, args.replicates, args.seed)
        except ConfigError as error:
            raise ConfigError(f"{model} and {control}: {error}") from None
        differences.append({"model": model, "control": control, "hyp": hypotheses[model][0],
                            "control_hyp": hypotheses[control][0],
                            "bootstrap": {"replicates": args.replicates, "seed": args.seed, "level": 0.95,
                                          "unit": "document and run, both sides drawn together"},
                            **difference})
    table = facts.markdown(rows)
    paired = facts_paired.markdown(differences, args.edges)
    if paired:
        paired = ("Paired differences, model − its memory-wiped control (percentage points; 95% bootstrap over the "
                  "same documents and runs):\n\n" + paired)
    if args.out:
        from fairseq_plugins.lab.common.files import text_writer, write_atomically
        from fairseq_plugins.lab.common.table import to_json

        names = ("facts.md", "facts.json", "facts.png", "facts-curves.png")
        paths = {name: os.path.join(args.out, name) for name in names}
        if not args.force:  # facts-curves.png too: one of an earlier run would sit beside this table
            for path in paths.values():
                if os.path.exists(path):
                    raise ConfigError(f"{path} exists (use --force to overwrite)")
        write_atomically({paths["facts.md"]: text_writer(table + (f"\n\n{paired}" if paired else "")),
                          paths["facts.json"]: text_writer(to_json({"manifest": args.manifest, "rows": rows,
                                                                         "differences": differences})),
                          paths["facts.png"]: lambda path: facts.plot(rows, path),
                          **({paths["facts-curves.png"]: lambda path: facts.plot_curves(curves, path)}
                             if curves else {})})
        if not curves and os.path.exists(paths["facts-curves.png"]):  # --force without --log: not this run's
            os.remove(paths["facts-curves.png"])
    print(table)
    chance = rows[0]["chance"]
    print(f"chance (a guess from the {chance['closed_set']} values): slot exact match {100 * chance['slot']:.1f}, "
          f"set recall {100 * chance['recall']:.1f}; intervals: 95% bootstrap over {facts.resampled_over(rows)}")
    after = ", ".join(f"{bucket} {'-' if v is None else f'{100 * v:.2f}'}"
                      for bucket, v in chance["slot_after_earlier_facts"].items())
    print(f"slot exact match of a guess that knows the earlier slots (1/(V - i) at slot i), by bucket: {after}")
    if paired:
        print("\n" + paired)


VERBS = {"score": _score, "lead": _lead, "decoding-lengths": _decoding_lengths, "check-lengths": _check_lengths,
         "task-args": _task_args, "hypotheses": _hypotheses, "facts": _facts}


def main(argv: List[str], prog: str) -> Optional[int]:
    """Run one verb (see the module docstring); a ConfigError is one line under ``--prog`` or ``PROG VERB``."""
    from fairseq_plugins.lab.common.cli import parse_verb_args, run_command

    args = parse_verb_args(_parser(prog), argv)
    name = args.prog or f"{prog} {args.verb}"
    options = argv[1:] if argv and argv[0] == args.verb else argv  # the verb is in ``name``
    return run_command(lambda _argv, _prog: VERBS[args.verb](args, name, options), [], name)
