#!/usr/bin/env bash
# make-sorting.sh - the ∞-former paper's synthetic sorting task (Martins et al., ACL 2022, §4.1)
# as fairseq binaries.
#
# Usage:
#   bash fairseq_plugins/lab/sorting/make-sorting.sh [--length T] [--train-examples N] [--valid-examples N]
#                                  [--test-examples N] [--seed S] [--symbols K] [--out DIR]
#                                  [--workers N] [--force]
#
# Each example: T tokens over K symbols s00, s01, ... (--symbols), the separator `sep`, then the K
# symbols sorted by decreasing frequency in those T tokens (equal counts: lower index first). Token t
# of T is drawn from (1 - t/(T-1))·p0 + t/(T-1)·p1, p0 and p1 drawn per example from Dirichlet(1,...,1):
# the distribution drifts from p0 to p1, so the answer needs the whole sequence, not its end.
# Example i of a split comes from numpy's default_rng([seed, split, i]) (train 0, valid 1, test 2).
#
# Options (defaults in brackets; the paper: T in 4k/8k/16k, 8000/800/800 examples):
#   --length T            tokens before the separator [4096]
#   --train-examples N    [8000]
#   --valid-examples N    [800]
#   --test-examples N     [800]
#   --seed S              [1]
#   --symbols K           alphabet size, 2..100; the answer has K tokens [20, the paper's]
#   --out DIR             output folder [data/sorting/T<length>]
#   --workers N           fairseq-preprocess workers [1]
#   --force               rebuild even if DIR holds output made with other options or an
#                         unfinished run (only this script's own files in DIR are replaced)
#   -h, --help            print this help
#
# Output in DIR:
#   raw/{train,valid,test}.txt   one example per line, an empty line after each (one document each)
#   dict.txt                     fixed dictionary: the K symbols, sep (fairseq adds <s> <pad> </s> <unk>)
#   bin/                         fairseq-preprocess --only-source output: pass DIR/bin to fairseq-train
#                                (task streaming_lm with --reset-memory-at-document-boundary, or
#                                language_modeling)
#   sorting.json                 manifest (options, counts); written last
#   logs/preprocess.log
# Re-running with the same options on a complete DIR prints "up to date" and changes nothing.
#
# Needs: a Python with fairseq-longmem and numpy (python next to fairseq-preprocess, or $PYTHON), fairseq-preprocess on
# PATH (or $FAIRSEQ_PREPROCESS).
set -euo pipefail

PROG=make-sorting.sh
PREP="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../data-prep" && pwd)"  # the shared stages

# shellcheck source=data-prep/options.sh
source "$PREP/options.sh"
# shellcheck source=data-prep/stages.sh
source "$PREP/stages.sh"

LENGTH=4096 TRAIN=8000 VALID=800 TEST=800 SEED=1 SYMBOLS=20 OUT="" WORKERS=1 FORCE=0
OPTIONS=(--length=LENGTH --train-examples=TRAIN --valid-examples=VALID --test-examples=TEST --seed=SEED
         --symbols=SYMBOLS --out=OUT --workers=WORKERS --force!FORCE)
parse_options "$@"
need_int --length "$LENGTH" 2
need_int --train-examples "$TRAIN" 1
need_int --valid-examples "$VALID" 1
need_int --test-examples "$TEST" 1
need_int --workers "$WORKERS" 1
need_int --seed "$SEED" 0
[[ "$SYMBOLS" =~ ^[0-9]+$ ]] && [ "$((10#$SYMBOLS))" -ge 2 ] && [ "$((10#$SYMBOLS))" -le 100 ] \
    || die "--symbols must be an integer in 2..100 (the alphabet), not '$SYMBOLS'"
SYMBOLS=$((10#$SYMBOLS))
[ -n "$OUT" ] || OUT="data/sorting/T$LENGTH"
[ -e "$OUT" ] && [ ! -d "$OUT" ] && die "--out $OUT exists and is not a directory"

find_tools
OPTS=(--out "$OUT" --length "$LENGTH" --train-examples "$TRAIN" --valid-examples "$VALID"
      --test-examples "$TEST" --seed "$SEED" --symbols "$SYMBOLS")

WRITE_DICT_OPTS=(--symbols "$SYMBOLS")
build_generated sorting sorting.json \
    "generating the sorting task -> $OUT (T $LENGTH, $SYMBOLS symbols, $TRAIN/$VALID/$TEST examples, seed $SEED)"
