#!/usr/bin/env python3
"""Check source/target lengths of a fairseq summarization binary against a model's limits.

    python scripts/summarization_lengths.py DATA_BIN --max-source N --max-target N
        [--truncate-source] [--splits train,valid,test] [--prog NAME]

Reads the token counts (including the final </s>) of DATA_BIN/SPLIT.source-target.{source,target}
and prints, per split, how many examples there are, the longest source and target, and how many
sources --truncate-source cuts to N-1 tokens + </s>. Without --truncate-source a source longer
than N, and in every case a target longer than --max-target, is an error (exit 2): fairseq-train
would silently drop such training examples (one warning line) and fairseq-generate would stop.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from fairseq_plugins.report.quiet import quiet_imports
from script_errors import ScriptError, run_main  # noqa: E402


def sizes(prefix: str) -> np.ndarray:
    """Token counts (with </s>) of the fairseq mmap dataset PREFIX.{idx,bin}, copied out of the mmap."""
    quiet_imports()
    from fairseq.data.indexed_dataset import MMapIndexedDataset
    dataset = MMapIndexedDataset(prefix)
    counts = np.array(dataset.sizes, dtype=np.int64, copy=True)
    del dataset
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(prog="summarization_lengths.py", description=__doc__.split("\n")[0])
    p.add_argument("data", help="fairseq-preprocess output (--source-lang source --target-lang target)")
    p.add_argument("--max-source", type=int, required=True, help="--max-source-positions of the model")
    p.add_argument("--max-target", type=int, required=True, help="--max-target-positions of the model")
    p.add_argument("--truncate-source", action="store_true", help="sources are cut (fairseq --truncate-source)")
    p.add_argument("--splits", default="train,valid,test", help="comma-separated splits that must exist")
    p.add_argument("--prog", default="summarization_lengths.py", help="name used in messages")
    args = p.parse_args(argv)
    sys.exit(run_main(lambda: check(args), args.prog, 2))


def check(args):
    problems = []
    for split in args.splits.split(","):
        prefix = os.path.join(args.data, f"{split}.source-target")
        if not os.path.exists(prefix + ".source.idx") or not os.path.exists(prefix + ".target.idx"):
            raise ScriptError(f"{prefix}.{{source,target}}.idx not found (prepare the data with "
                              f"data-prep/prepare-summarization.sh)")
        src, tgt = sizes(prefix + ".source"), sizes(prefix + ".target")
        long_src = int((src > args.max_source).sum())
        long_tgt = int((tgt > args.max_target).sum())
        msg = (f"{args.prog}: {split}: {len(src)} examples, source tokens mean {src.mean():.0f} max {src.max()}, "
               f"target max {tgt.max()} (limits {args.max_source} / {args.max_target}, counting </s>)")
        if long_src:
            if args.truncate_source:
                msg += (f"; --truncate-source cuts {long_src} of {len(src)} sources to {args.max_source - 1} "
                        f"tokens + </s> (keeps {100.0 * np.minimum(src, args.max_source).sum() / src.sum():.1f}% "
                        f"of source tokens)")
            else:
                problems.append(f"{split}: {long_src} sources longer than --max-source-positions "
                                f"{args.max_source} (longest {src.max()})")
        if long_tgt:
            problems.append(f"{split}: {long_tgt} targets longer than --max-target-positions {args.max_target} "
                            f"(longest {tgt.max()}); raise MAX_TARGET")
        print(msg, flush=True)
    if problems:
        raise ScriptError(f"{'; '.join(problems)}; fairseq would drop or reject these examples")


if __name__ == "__main__":
    main()
