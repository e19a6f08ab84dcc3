#!/usr/bin/env bash
# The main job, end to end on real text (CPU, minutes):
#   1. install into ./.venv if needed (scripts/install.sh);
#   2. fetch and prepare the books corpus (data-prep/prepare-lm.sh: Gutenberg books +
#      State of the Union addresses, sentencepiece, fairseq-preprocess) into data/books;
#   3. train each arm with fairseq-train (scripts/train.sh) on the same budget;
#   4. print each arm's test perplexity from fairseq-eval-lm (scripts/evaluate.sh) in one table,
#      also written to OUT/results.md and OUT/results.json.
#
#   bash scripts/quickstart.sh [--arms "infinite_former memory_off transformer_lm"] [--out runs/quickstart]
#   bash scripts/quickstart.sh --seeds 1,2,3 [--arms ...] [--out DIR]
#   bash scripts/quickstart.sh --corpus txt|wikitext103 --input DIR [--paragraphs line] [--vocab-size N] [...]
#
# --seeds trains and evaluates every arm once per training seed (SEED of scripts/train.sh), each
# in OUT/ARM/seedS/; the table then gives each arm's mean over the seeds with a 95% interval and
# each seed's perplexity, and the position analysis compares the arms over the seeds
# (docs/analysis.md). Without --seeds: one run per arm in OUT/ARM/, with SEED (default 1).
# The three-seed comparison of docs/results/lm.md:
#   bash scripts/quickstart.sh --seeds 1,2,3 --arms "infinite_former memory_off memory_off_matched transformer_lm" --out runs/books-seeds
#
# --corpus/--input run the same comparison on your own text (data-prep/prepare-lm.sh's
# corpora; --paragraphs and --vocab-size are passed on): the data goes to data/NAME (or --data
# DIR) and the runs to runs/quickstart-NAME (NAME: the input folder's name) unless --out is given.
# Arms: infinite_former (∞-former), memory_off (its twin without long-term memory),
# transformer_lm (fairseq's own); not in the default set: memory_off_matched (memory_off with its
# FFN widened to the ∞-former's parameter count), compressive (the Compressive Transformer: the
# short-term memory + NUM_BASIS compressed slots per layer), fastformer_lm (Fastformer). The position
# analysis also scores each ∞-former checkpoint with its long-term memory wiped (--memory-wiped).
# Budget and sizes: the environment variables of scripts/train.sh. Re-running reuses
# prepared data and skips arms already evaluated under OUT (an interrupted arm resumes from
# OUT/ARM/checkpoint_last.pt); delete OUT/ARM to retrain.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ARMS="" ARMS_GIVEN=0   # default: the default arms of the registry (fairseq-longmem arms list lm --default)
OUT="" CORPUS="" INPUT="" DATA_OUT="" PREP_EXTRA=() SEEDS="" SEEDS_GIVEN=0
die() { echo "quickstart.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --arms|--out|--corpus|--input|--data|--paragraphs|--vocab-size|--seeds)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)" ;;&
    --arms) ARMS=$2; ARMS_GIVEN=1; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --seeds) SEEDS=$2; SEEDS_GIVEN=1; shift 2 ;;
    --corpus) CORPUS=$2; shift 2 ;;
    --input) INPUT=$2; shift 2 ;;
    --data) DATA_OUT=$2; shift 2 ;;
    --paragraphs|--vocab-size) PREP_EXTRA+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
# what can be refused without the package is refused here, before anything is installed; --seeds and
# --arms (the arm registry's answer) right after the install, before anything is prepared or created
if [ -n "$CORPUS$INPUT" ]; then
  [ -n "$CORPUS" ] && [ -n "$INPUT" ] || die "--corpus and --input go together (e.g. --corpus txt --input my_docs/)"
  [ -e "$INPUT" ] || die "--input $INPUT not found"
fi
. "$ROOT/scripts/installed.sh"
if ! installed .venv/bin/python fairseq fairseq_plugins; then
  echo "== installing into .venv"; bash scripts/install.sh
fi
export PATH="$ROOT/.venv/bin:$PATH"
if [ "$SEEDS_GIVEN" = 1 ]; then
  SEEDS=$(fairseq-longmem arms seeds --prog quickstart.sh "$SEEDS" | tr '\n' ' ') || exit $?
fi
if [ "$ARMS_GIVEN" = 1 ]; then
  fairseq-longmem arms check lm --prog quickstart.sh --arms="$ARMS" || exit $?
else
  ARMS=$(fairseq-longmem arms list lm --default | tr '\n' ' ')
fi
# the budget (environment or defaults) that train.sh and evaluate.sh run with: STREAMS for the analysis
BUDGET=$(fairseq-longmem arms budget lm --prog quickstart.sh) || exit $?
while IFS= read -r kv; do declare "${kv?}"; done <<< "$BUDGET"
if [ -n "$CORPUS" ]; then
  NAME=$(basename "$(cd "$INPUT" 2>/dev/null && pwd || echo "$INPUT")")
  DATA_OUT=${DATA_OUT:-data/$NAME}
  PREP=(--corpus "$CORPUS" --input "$INPUT" --out "$DATA_OUT" "${PREP_EXTRA[@]}")
  DATA="$DATA_OUT/bin" OUT=${OUT:-runs/quickstart-$NAME} WHAT="$CORPUS corpus $INPUT ($DATA_OUT)"
else
  PREP=(--out data/books "${PREP_EXTRA[@]}")
  DATA=data/books/bin OUT=${OUT:-runs/quickstart} WHAT="books corpus (data/books)"
fi
. "$ROOT/scripts/failed.sh"   # a failed step: the end of its log, the error line last
start=$(date +%s)
echo "== preparing the $WHAT"
bash data-prep/prepare-lm.sh "${PREP[@]}"
mkdir -p "$OUT"
# one run per arm (OUT/ARM) or, with --seeds, per arm and seed (OUT/ARM/seedS, SEED=S)
run_arm() {  # ARM RUN_DIR
  local arm=$1 dir=$2 t0 t1 t2
  mkdir -p "$dir"
  if [ -f "$dir/seconds" ] && grep -q "Perplexity" "$dir/eval.log" 2>/dev/null; then
    echo "== $arm already trained and evaluated in $dir (delete it to retrain)"
    grep -h "Perplexity" "$dir/eval.log" | tail -n 1
    return
  fi
  t0=$(date +%s)
  echo "== training $arm${SEED:+ (seed $SEED)} (log: $dir/train.log)"
  # appended: a rerun resumes (or finds the arm trained) and keeps the log of what ran before
  bash scripts/train.sh "$arm" "$DATA" "$dir" >> "$dir/train.log" 2>&1 || failed quickstart.sh "training $arm" "$dir/train.log"
  t1=$(date +%s)
  echo "== evaluating $arm with fairseq-eval-lm (log: $dir/eval.log)"
  bash scripts/evaluate.sh "$arm" "$DATA" "$dir/checkpoint_last.pt" > "$dir/eval.log" 2>&1 \
    || failed quickstart.sh "evaluating $arm" "$dir/eval.log"
  t2=$(date +%s)
  echo "$((t1 - t0)) $((t2 - t1))" > "$dir/seconds"
  grep -h "Perplexity" "$dir/eval.log" | tail -n 1
}
for arm in $ARMS; do
  if [ -z "$SEEDS" ]; then
    run_arm "$arm" "$OUT/$arm"
  else
    for seed in $SEEDS; do SEED=$seed run_arm "$arm" "$OUT/$arm/seed$seed"; done
  fi
done
# one table with every arm trained so far under OUT (e.g. after a later --arms fastformer_lm)
# (with --seeds: the runs of the seeds given)
ran() { if [ -z "$SEEDS" ]; then echo "$OUT/$1"; else for s in $SEEDS; do echo "$OUT/$1/seed$s"; done; fi; }
DONE=$(for arm in $(fairseq-longmem arms list lm); do
  all=1; for dir in $(ran "$arm"); do [ -f "$dir/eval.log" ] || all=0; done
  if [ $all = 1 ]; then echo "$arm"; fi; done)
fairseq-longmem results lm "$OUT" $DONE ${SEEDS:+--seeds "$SEEDS"}
# where the memory pays off: loss by offset from the start of the document, every arm on the test split,
# with evaluate.sh's STREAMS (so that its totals are fairseq-eval-lm's)
echo "== loss by position on the test split (fairseq-longmem analyze position; log: $OUT/position.log)"
WIPED=""   # the memory-wiped control of the arms with a long-term memory (the ∞-former arms)
for arm in $DONE; do
  if [ "$(fairseq-longmem arms get lm "$arm" has_memory)" = True ]; then WIPED=--memory-wiped; fi
done
fairseq-longmem analyze position $(for arm in $DONE; do for dir in $(ran "$arm"); do
    echo --checkpoint "$arm=$dir/checkpoint_last.pt"; done; done) $WIPED \
  --data "$DATA" --split test --streams "$STREAMS" --out "$OUT/position" --force 2> "$OUT/position.log" \
  || failed quickstart.sh "the position analysis" "$OUT/position.log"
echo "== total $(( $(date +%s) - start ))s"
