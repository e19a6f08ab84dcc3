#!/usr/bin/env python3
"""Summary-length decoding defaults from the prepared training targets (scripts/generate-summaries.sh).

    python scripts/decoding_lengths.py DATA_DIR [--prog NAME]

Reads DATA_DIR/stats.json (data-prep/prepare-summarization.sh; DATA_DIR may also be its bin/
folder, then ../stats.json) and prints four lines for the shell, ``MIN_LEN=..``, ``MAX_LEN_B=..``,
``LENPEN=..`` and ``LENGTHS_FROM=..`` (where they come from, one line), from the sentencepiece lengths of the *training* targets (never the split being
decoded):

    MIN_LEN    half the median target length (at least 1)
    MAX_LEN_B  1.1 x the 90th percentile, rounded up (at least MIN_LEN + 1)
    LENPEN     2.0 when the median target has 64 pieces or more (long abstracts, as fairseq's BART
               CNN-DM recipe), else 1.0 (short summaries, as its XSum recipe)

A variable already set in the environment is kept. Without stats.json the fixed defaults of
before (MIN_LEN=80 MAX_LEN_B=300 LENPEN=2.0, chosen for ACLSum) are printed.
"""

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from script_errors import ScriptError, run_main  # noqa: E402

FIXED = {"MIN_LEN": "80", "MAX_LEN_B": "300", "LENPEN": "2.0"}


def find_stats(data_dir: str):
    for path in (os.path.join(data_dir, "stats.json"), os.path.join(data_dir, os.pardir, "stats.json")):
        if os.path.isfile(path):
            return os.path.normpath(path)
    return None


def derive(stats: dict) -> dict:
    """(MIN_LEN, MAX_LEN_B, LENPEN as strings; (median, p90)) from a stats.json document."""
    try:
        lengths = stats["splits"]["train"]["target"]["spm_tokens"]
        median, p90 = float(lengths["median"]), float(lengths["p90"])
    except (KeyError, TypeError, ValueError):
        raise ScriptError("stats.json has no splits.train.target.spm_tokens median/p90 "
                          "(prepare the data again with data-prep/prepare-summarization.sh)") from None
    min_len = max(1, round(median / 2))
    max_len_b = max(min_len + 1, math.ceil(1.1 * p90))
    return {"MIN_LEN": str(min_len), "MAX_LEN_B": str(max_len_b), "LENPEN": "2.0" if median >= 64 else "1.0"}, \
        (median, p90)


def choose(data_dir: str, env=None):
    """(values, one-line explanation); values set in ``env`` are kept."""
    env = os.environ if env is None else env
    path = find_stats(data_dir)
    if path is None:
        values, why = dict(FIXED), "fixed defaults (no stats.json next to the data)"
    else:
        try:
            with open(path, encoding="utf-8") as f:
                stats = json.load(f)
        except json.JSONDecodeError as e:
            raise ScriptError(f"{path} is not JSON ({e})") from None
        values, (median, p90) = derive(stats)
        why = f"from {path} (training targets: median {median:g}, p90 {p90:g} pieces)"
    kept = [k for k in values if env.get(k)]
    for k in kept:
        values[k] = env[k]
    why += f"; {', '.join(kept)} from the environment" if kept else "; set MIN_LEN, MAX_LEN_B, LENPEN to override"
    return values, why


def main(argv=None):
    p = argparse.ArgumentParser(prog="decoding_lengths.py", description=__doc__.split("\n")[0])
    p.add_argument("data", help="the folder of data-prep/prepare-summarization.sh, or its bin/")
    p.add_argument("--prog", default="decoding_lengths.py", help="name used in messages")
    args = p.parse_args(argv)

    def run():
        values, why = choose(args.data)
        summary = " ".join(f"{k}={v}" for k, v in values.items())
        print("\n".join(f"{k}={v}" for k, v in values.items()))
        print(f"LENGTHS_FROM={summary} {why}".replace("\n", " "))

    return run_main(run, args.prog, 2)


if __name__ == "__main__":
    sys.exit(main())
