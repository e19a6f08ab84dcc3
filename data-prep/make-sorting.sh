#!/usr/bin/env bash
# make-sorting.sh - the ∞-former paper's synthetic sorting task (Martins et al., ACL 2022, §4.1)
# as fairseq binaries.
#
# Usage:
#   bash data-prep/make-sorting.sh [--length T] [--train-examples N] [--valid-examples N]
#                                  [--test-examples N] [--seed S] [--out DIR] [--workers N] [--force]
#
# Each example: T tokens over 20 symbols s00..s19, the separator `sep`, then the 20 symbols sorted
# by decreasing frequency in those T tokens (equal counts: lower symbol index first). Token t of T
# is drawn from (1 - t/(T-1))·p0 + t/(T-1)·p1, p0 and p1 drawn per example from Dirichlet(1,...,1):
# the distribution drifts from p0 to p1, so the answer needs the whole sequence, not its end.
# Example i of a split comes from numpy's default_rng([seed, split, i]) (train 0, valid 1, test 2).
#
# Options (defaults in brackets; the paper: T in 4k/8k/16k, 8000/800/800 examples):
#   --length T            tokens before the separator [4096]
#   --train-examples N    [8000]
#   --valid-examples N    [800]
#   --test-examples N     [800]
#   --seed S              [1]
#   --out DIR             output folder [data/sorting/T<length>]
#   --workers N           fairseq-preprocess workers [1]
#   --force               rebuild even if DIR holds output made with other options or an
#                         unfinished run (only this script's own files in DIR are replaced)
#   -h, --help            print this help
#
# Output in DIR:
#   raw/{train,valid,test}.txt   one example per line, an empty line after each (one document each)
#   dict.txt                     fixed dictionary: s00..s19, sep (fairseq adds <s> <pad> </s> <unk>)
#   bin/                         fairseq-preprocess --only-source output: pass DIR/bin to fairseq-train
#                                (task streaming_lm with --reset-memory-at-document-boundary, or
#                                language_modeling)
#   sorting.json                 manifest (options, counts); written last
#   logs/preprocess.log
# Re-running with the same options on a complete DIR prints "up to date" and changes nothing.
#
# Needs: a Python with numpy (python next to fairseq-preprocess, or $PYTHON), fairseq-preprocess on
# PATH (or $FAIRSEQ_PREPROCESS).
set -euo pipefail

PROG=make-sorting.sh
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed -E 's/^# ?//'; }
die() { echo "$PROG: error: $*" >&2; exit 2; }

LENGTH=4096 TRAIN=8000 VALID=800 TEST=800 SEED=1 OUT="" WORKERS=1 FORCE=0
need_value() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --length) need_value "$1" $#; LENGTH="$2"; shift 2 ;;
        --length=*) LENGTH="${1#*=}"; shift ;;
        --train-examples) need_value "$1" $#; TRAIN="$2"; shift 2 ;;
        --train-examples=*) TRAIN="${1#*=}"; shift ;;
        --valid-examples) need_value "$1" $#; VALID="$2"; shift 2 ;;
        --valid-examples=*) VALID="${1#*=}"; shift ;;
        --test-examples) need_value "$1" $#; TEST="$2"; shift 2 ;;
        --test-examples=*) TEST="${1#*=}"; shift ;;
        --seed) need_value "$1" $#; SEED="$2"; shift 2 ;;
        --seed=*) SEED="${1#*=}"; shift ;;
        --out) need_value "$1" $#; OUT="$2"; shift 2 ;;
        --out=*) OUT="${1#*=}"; shift ;;
        --workers) need_value "$1" $#; WORKERS="$2"; shift 2 ;;
        --workers=*) WORKERS="${1#*=}"; shift ;;
        --force) FORCE=1; shift ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ "$LENGTH" =~ ^[0-9]+$ ]] && [ "$LENGTH" -ge 2 ] || die "--length must be an integer >= 2, not '$LENGTH'"
for pair in "train-examples:$TRAIN" "valid-examples:$VALID" "test-examples:$TEST" "workers:$WORKERS"; do
    v="${pair#*:}"
    [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || die "--${pair%%:*} must be a positive integer, not '$v'"
done
[[ "$SEED" =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer, not '$SEED'"
[ -n "$OUT" ] || OUT="data/sorting/T$LENGTH"
[ -e "$OUT" ] && [ ! -d "$OUT" ] && die "--out $OUT exists and is not a directory"

FAIRSEQ_PREPROCESS="${FAIRSEQ_PREPROCESS:-fairseq-preprocess}"
command -v "$FAIRSEQ_PREPROCESS" >/dev/null 2>&1 \
    || die "fairseq-preprocess not found on PATH (activate the environment with fairseq, or set FAIRSEQ_PREPROCESS)"
if [ -z "${PYTHON:-}" ]; then
    fp_dir="$(dirname "$(command -v "$FAIRSEQ_PREPROCESS")")"
    if [ -x "$fp_dir/python" ]; then PYTHON="$fp_dir/python"; else PYTHON=python3; fi
fi
TASK=("$PYTHON" "$HERE/sorting_task.py")
OPTS=(--out "$OUT" --length "$LENGTH" --train-examples "$TRAIN" --valid-examples "$VALID"
      --test-examples "$TEST" --seed "$SEED")

state_rc=0
if [ "$FORCE" = 1 ]; then "${TASK[@]}" state "${OPTS[@]}" --force || state_rc=$?
else "${TASK[@]}" state "${OPTS[@]}" || state_rc=$?; fi
case "$state_rc" in
    0) ;;
    3) exit 0 ;;                # "up to date" already printed
    *) exit "$state_rc" ;;      # one-line reason already printed
esac

OUT_CREATED=0
if [ ! -d "$OUT" ]; then mkdir -p "$OUT"; OUT_CREATED=1; fi
cleanup() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        rm -rf "$OUT/.raw.tmp"
        # a folder this run created goes, unless it holds a log worth reading
        if [ "$OUT_CREATED" = 1 ] && [ ! -d "$OUT/logs" ]; then rm -rf "$OUT"; fi
    fi
}
trap cleanup EXIT
echo "generating the sorting task -> $OUT (T $LENGTH, $TRAIN/$VALID/$TEST examples, seed $SEED)"
T0=$(date +%s)

rm -rf "$OUT/.raw.tmp"
"${TASK[@]}" generate "${OPTS[@]}" --raw "$OUT/.raw.tmp"
# the new text is good: drop this script's previous output (manifest first) and move it in
rm -f "$OUT/sorting.json" "$OUT/dict.txt"
rm -rf "$OUT/raw" "$OUT/bin" "$OUT/logs"
mv "$OUT/.raw.tmp" "$OUT/raw"
mkdir -p "$OUT/logs"
"${TASK[@]}" write-dict --path "$OUT/dict.txt"
if ! "$FAIRSEQ_PREPROCESS" --only-source --trainpref "$OUT/raw/train.txt" --validpref "$OUT/raw/valid.txt" \
        --testpref "$OUT/raw/test.txt" --srcdict "$OUT/dict.txt" --destdir "$OUT/bin" \
        --workers "$WORKERS" >"$OUT/logs/preprocess.log" 2>&1; then
    echo "$PROG: error: fairseq-preprocess failed; see $OUT/logs/preprocess.log" >&2
    exit 1
fi
"${TASK[@]}" finish "${OPTS[@]}"
echo "total $(( $(date +%s) - T0 ))s"
