"""``fairseq-longmem analyze``: where the long-term memory pays off and where it reads (docs/analysis.md).

    fairseq-longmem analyze position --checkpoint [ARM=]CK [--checkpoint [ARM=]CK ...] [--memory-wiped]
                                     --data BIN --split test --out DIR [--force]
    fairseq-longmem analyze memory-map --checkpoint CK --data BIN --text FILE --out DIR [--query-token N] [--top-k K]
                                       [--force]

``position`` writes DIR/position.json, position.md and position.png and prints the table with
one sentence per pair of arms (several checkpoints of one arm are its seeds; ``--memory-wiped``
adds each ∞-former arm scored with its long-term memory wiped); it replaces an earlier
position.json only with ``--force``; ``memory-map`` writes DIR/memory_map.json and memory_map.png
(and query_token.png with ``--query-token``), replacing an earlier memory map only with ``--force``.
Every JSON records its command line and versions (``provenance``). Every output is written under a temporary name
and renamed when all of them are ready, so a failed run leaves nothing half-written.
"""

import argparse
import json
import logging
import os
from typing import List, Optional

from fairseq_plugins.lab.common import cli
from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.files import (check_out_folder, provenance, refuse_existing, text_writer,
                                         write_atomically)


def _edges(text: str) -> List[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated offsets (e.g. 64,256,1024), got '{text}'")


def position(argv: List[str], prog: str) -> Optional[int]:
    """``analyze position``: loss by offset from the start of the document, per checkpoint."""
    p = cli.ArgumentParser(prog=prog, description="Loss by position in the document: every token of a split "
                                "scored as fairseq-eval-lm scores it, grouped by its offset from its document's start.")
    p.add_argument("--checkpoint", action="append", required=True, metavar="[ARM=]CK",
                   help="a streaming_lm or language_modeling checkpoint, optionally named by its arm (ARM=PATH; "
                        "default: its folder's name, the folder above a seedS folder); repeat to compare several "
                        "arms, and give an arm's checkpoints of several seeds under one name: the arm is then "
                        "their mean, with intervals over seeds and documents")
    p.add_argument("--memory-wiped", action="store_true",
                   help="also score every arm whose checkpoints have a long-term memory with that memory emptied "
                        "before every read (arm 'ARM wiped'): the control of what the memory contributes")
    p.add_argument("--force", action="store_true", help="replace the position.* files of an earlier run in --out")
    p.add_argument("--data", required=True, help="the fairseq-preprocess folder (data-prep's OUT/bin)")
    p.add_argument("--split", default="test", help="split to score (default: test)")
    p.add_argument("--out", required=True, help="folder for position.json, position.md, position.png")
    p.add_argument("--edges", type=_edges, default=None, metavar="E1,E2,...",
                   help="bucket edges in tokens (default: 64,256,1024,4096,16384,65536)")
    p.add_argument("--streams", type=cli.positive_int, default=16,
                   help="streams of a streaming_lm model, its fairseq-eval-lm --batch-size (default: 16, as "
                        "scripts/evaluate.sh)")
    p.add_argument("--context-window", type=cli.non_negative_int, default=None,
                   help="--context-window of a language_modeling model (default: half its --tokens-per-sample)")
    p.add_argument("--batch-size", type=cli.positive_int, default=16,
                   help="blocks per batch of a language_modeling model")
    p.add_argument("--replicates", type=cli.positive_int, default=1000, help="bootstrap replicates (default: 1000)")
    p.add_argument("--seed", type=cli.non_negative_int, default=1, help="bootstrap seed (default: 1)")
    p.add_argument("--cpu", action="store_true", help="score on the CPU even if a GPU is available")
    args = p.parse_args(argv)
    _load()
    from fairseq_plugins.lab.lm import position as analysis
    from fairseq_plugins.lab.lm import position_report as report

    check_out_folder(args.out)
    outputs = [os.path.join(args.out, f"position.{ext}") for ext in ("json", "md", "png")]
    refuse_existing(outputs, args.force)
    result = analysis.run(args.checkpoint, args.data, args.split, edges=args.edges or analysis.DEFAULT_EDGES,
                          streams=args.streams, batch_size=args.batch_size, context_window=args.context_window,
                          cpu=args.cpu, replicates=args.replicates, seed=args.seed, memory_wiped=args.memory_wiped)
    result["provenance"] = provenance(prog, argv)
    table, sentences = report.markdown_table(result), report.summary(result)
    seeds, coverage = report.seed_table(result), report.coverage(result)
    text = table + "\n" + coverage + "\n" + (f"\nPer seed:\n\n{seeds}" if seeds else "")
    text += ("\n" + sentences if sentences else "")
    write_atomically({
        outputs[0]: text_writer(json.dumps(result, indent=1)),
        outputs[1]: text_writer(text),
        outputs[2]: lambda path: report.plot(result, path),
    })
    documents = f"{result['documents']} document{'s' if result['documents'] != 1 else ''}"
    print(f"loss by position on {args.split} ({documents}; written to {args.out}/position.md, .json, .png):")
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


def memory_map(argv: List[str], prog: str) -> Optional[int]:
    """``analyze memory-map``: the long-term memory's attention over the document's tokens."""
    p = cli.ArgumentParser(prog=prog, description="Where the long-term memory looks: the continuous "
                                "attention's Gaussians of every query, layer and head, mapped onto the document "
                                "tokens the memory holds.")
    p.add_argument("--checkpoint", required=True, help="an infinite_former_lm checkpoint with long-term memory")
    p.add_argument("--data", required=True, help="the fairseq-preprocess folder (dict.txt; spm.model beside it)")
    p.add_argument("--text", required=True,
                   help="UTF-8 text, one paragraph per line as data-prep writes it (e.g. a document of OUT/raw/test.txt)")
    p.add_argument("--out", required=True, help="folder for memory_map.json, memory_map.png and, with --query-token, "
                   "query_token.png (without it, a query_token.png of an earlier run there is removed)")
    p.add_argument("--spm-model", default=None, help="sentencepiece model (default: DATA/../spm.model)")
    p.add_argument("--max-tokens", type=cli.positive_int, default=2048,
                   help="read at most the first N tokens (default: 2048)")
    p.add_argument("--query-token", type=cli.non_negative_int, default=None, metavar="N",
                   help="also show the attention of the query at token N (0-based) over the document")
    p.add_argument("--top-k", type=cli.positive_int, default=10, metavar="K",
                   help="tokens printed for --query-token (default: 10)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is available")
    p.add_argument("--force", action="store_true", help="replace the memory_map.* files of an earlier run in --out")
    args = p.parse_args(argv)
    check_out_folder(args.out)
    refuse_existing([os.path.join(args.out, name) for name in ("memory_map.json", "memory_map.png")], args.force)
    _load()
    from fairseq_plugins.lab.lm import memory_map as analysis
    from fairseq_plugins.lab.lm import memory_plot

    result = analysis.run(args.checkpoint, args.data, args.text, spm_model=args.spm_model,
                          max_tokens=args.max_tokens, query_token=args.query_token, top_k=args.top_k, cpu=args.cpu)
    record = {**result.to_json(), "query_token": args.query_token, "provenance": provenance(prog, argv, [args.checkpoint])}
    writers = {os.path.join(args.out, "memory_map.json"): text_writer(json.dumps(record, indent=1)),
               os.path.join(args.out, "memory_map.png"): lambda path: memory_plot.plot_map(result, path)}
    if args.query_token is not None:
        writers[os.path.join(args.out, "query_token.png")] = \
            lambda path: memory_plot.plot_query(result, args.query_token, path, args.top_k)
    write_atomically(writers)
    stale = os.path.join(args.out, "query_token.png")
    if args.query_token is None and os.path.exists(stale):  # the folder describes this run only
        os.remove(stale)
    print(f"memory map of {len(result.tokens)} tokens, {result.num_layers} layers × {result.num_heads} heads, "
          f"segments of {result.segment_length}: {args.out}/memory_map.png, memory_map.json")
    if args.query_token is not None:
        print(analysis.describe_query(result, args.query_token, args.top_k))
    return 0


SUBCOMMANDS = {
    "position": (position, "loss by offset from the start of the document, with bootstrap intervals"),
    "memory-map": (memory_map, "the long-term memory's attention over the document's tokens"),
}


def _load() -> None:
    """Load fairseq and the plugin's components, once the options are parsed.

    fairseq sets the root logger to DEBUG when it is imported; this command keeps warnings
    and errors only (its own output is printed), which also silences matplotlib's font search.
    """
    cli.load_components()  # fairseq's import configures logging: set the level after it
    logging.getLogger().setLevel(logging.WARNING)


def main(argv: List[str], prog: str) -> Optional[int]:
    """Dispatch ``analyze SUBCOMMAND`` (see the module docstring)."""
    if not argv or argv[0] in ("-h", "--help"):
        lines = [f"usage: {prog} SUBCOMMAND [options]   ({prog} SUBCOMMAND --help)", ""]
        lines += [f"  {name:<10}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
        print("\n".join(lines))
        return 0 if argv else 2
    if argv[0] not in SUBCOMMANDS:
        raise ConfigError(f"unknown analysis '{argv[0]}'; choose from {', '.join(SUBCOMMANDS)}")
    sub_prog = f"{prog} {argv[0]}"
    # errors after parsing carry the analysis's name, as argparse's own do
    return cli.run_command(SUBCOMMANDS[argv[0]][0], argv[1:], sub_prog)
