#!/usr/bin/env bash
# The ∞-former paper's sorting task (§4.1) at reduced scale: for each length T, generate the data
# (fairseq_plugins/lab/sorting/make-sorting.sh), train three arms with the same width, depth, updates and tokens per
# update (fairseq-longmem arms train sorting ARM ...), and score each on the test split
# (fairseq-longmem sorting score: teacher-forced accuracy on the K answer tokens). One table, length
# × arm, in OUT/results.md and OUT/results.json (fairseq-longmem sorting table); the plots
# OUT/accuracy.png (accuracy against T) and OUT/curves.png (the training loss on the answer against
# the update) from `fairseq-longmem sorting plot OUT`.
#
#   bash fairseq_plugins/lab/sorting/sorting.sh [--lengths "256 512 1024"] [--arms "infinite_former memory_off transformer_lm"]
#                           [--out runs/sorting] [--data-root data/sorting] [--quick] [--seeds 1,2,3]
#                           [--gpu-score] [-- FAIRSEQ_TRAIN_OPTIONS...]
#
# --gpu-score scores on the GPU when torch sees one (default: the CPU). Options after -- go to every arm's fairseq-train
# (e.g. -- --bf16 on a GPU: scripts/gpu-checks.sh --sorting runs the paper's T = 4096 so).
# --seeds trains and scores every arm once per training seed (SEED), each seed's whole run in
# OUT/seedS/ (its own table and plots there); the data is the same for every seed (DATA_SEED). OUT's
# own table then gives each arm's mean over the seeds with a 95% interval and each seed's accuracy,
# and OUT's plots every seed (docs/results/sorting.md, "Sorting task").
# Every arm with a long-term memory (infinite_former, compressive) is also scored with it wiped
# (fairseq-longmem sorting score --memory-wiped -> accuracy-wiped.json): the memory-wiped control.
#
# Arms:
#   infinite_former  infinite_former_lm, task streaming_lm: segments of SEGMENT tokens, short-term
#                    memory SEGMENT, long-term memory with the paper's sorting settings (τ 0.75,
#                    σ² ≥ 1e-6, basis widths 0.01,0.05, λ 1, KL weight 1e-6) but N = M = NUM_BASIS,
#                    memory reset at every example (--reset-memory-at-document-boundary)
#   memory_off       the same with --no-long-term-memory
#   transformer_lm   fairseq's transformer_lm, task language_modeling, blocks of 2*SEGMENT tokens
#                    (its window = the ∞-former's segment + short-term memory)
#   also (--arms): memory_off_matched (memory_off with the FFN widened to the ∞-former's parameter
#                    count), compressive, infinite_former_evicted, infinite_former_no_sticky
#                    (fairseq-longmem arms list sorting)
# Every arm is trained on the answer only (--loss-after-symbol sep: the targets after the separator;
# transformer_lm with the plugin's criterion infinite_former_kl for it, its KL term is 0).
# Budget (environment; the defaults are the paper's alphabet at a first CPU budget, which is not
# learned; docs/results/sorting.md's learned setting is SYMBOLS=8 STREAMS=64 MAX_UPDATE=3000 WARMUP=300):
#   LAYERS=2 WIDTH=64 HEADS=4 FFN=128
#   SEGMENT=32 STREAMS=16 MAX_UPDATE=6000 LR=0.002 WARMUP=500 NUM_BASIS=32 SEED=1; data: SYMBOLS=20 (the
#   alphabet K; the answer has K tokens), TRAIN_EXAMPLES (about one pass over MAX_UPDATE*STREAMS*SEGMENT
#   tokens; fewer examples are read for several epochs), VALID_EXAMPLES=100, TEST_EXAMPLES=200, DATA_SEED=1
#   (data in DATA_ROOT/T<T>[_K<K>]_<train>-<valid>-<test>_seed<DATA_SEED>); THREADS: torch CPU threads
#   (OMP_NUM_THREADS) of training and scoring, default 1 on a CPU.
# --quick: T 64, a 1-layer width-32 model, 6 updates, 4 test examples (for tests; about a minute),
# output in runs/sorting_quick unless --out; it sets the sizes, MAX_UPDATE, WARMUP, NUM_BASIS and the
# example counts (LR and SEED stay as the environment sets them).
# Re-running skips arms whose OUT/T<T>/<arm>/accuracy.json exists (delete it to redo that arm); an
# arm trained with another budget or other options after -- (OUT/T<T>/<arm>/trained_with), or scored
# on other data, is refused in one line before anything runs: give such a run another --out.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
LENGTHS="256 512 1024"
ARMS="infinite_former memory_off transformer_lm"
OUT=""
DATA_ROOT=data/sorting
QUICK=0
LENGTHS_GIVEN=0
SEEDS=""
SCORE_DEVICE=()
TRAIN_EXTRA=()
die() { echo "sorting.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --lengths) [ $# -ge 2 ] || die "--lengths needs a value"; LENGTHS=$2; LENGTHS_GIVEN=1; shift 2 ;;
    --arms) [ $# -ge 2 ] || die "--arms needs a value"; ARMS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --data-root) [ $# -ge 2 ] || die "--data-root needs a value"; DATA_ROOT=$2; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; SEEDS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --gpu-score) SCORE_DEVICE=(--gpu); shift ;;
    --) shift; TRAIN_EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
if [ "$QUICK" = 1 ]; then
  # --quick sets its own sizes and budget; a separate default output keeps it out of runs/sorting
  [ "$LENGTHS_GIVEN" = 0 ] || die "--quick fixes the length (T 64, or QUICK_LENGTHS); drop --lengths"
  OUT=${OUT:-runs/sorting_quick}
  LENGTHS=${QUICK_LENGTHS:-64}
  # 6 updates: every stream reads its first example to the answer (6 segments of 16)
  export LAYERS=1 WIDTH=32 HEADS=2 FFN=64 SEGMENT=16 STREAMS=4 MAX_UPDATE=6 WARMUP=1 NUM_BASIS=16
  TRAIN_EXAMPLES=8 VALID_EXAMPLES=4 TEST_EXAMPLES=4
fi
OUT=${OUT:-runs/sorting}
# the budget (environment or the defaults above) and the arms: fairseq-longmem arms, job sorting
BUDGET=$(fairseq-longmem arms budget sorting --prog sorting.sh) || exit $?
while IFS= read -r kv; do declare "${kv?}"; done <<< "$BUDGET"
VALID_EXAMPLES=${VALID_EXAMPLES:-100} TEST_EXAMPLES=${TEST_EXAMPLES:-200} DATA_SEED=${DATA_SEED:-1}
SYMBOLS=${SYMBOLS:-20}
[[ "$SYMBOLS" =~ ^[0-9]+$ ]] && [ "$((10#$SYMBOLS))" -ge 2 ] && [ "$((10#$SYMBOLS))" -le 100 ] \
  || die "SYMBOLS must be an integer in 2..100 (the alphabet), not '$SYMBOLS'"
SYMBOLS=$((10#$SYMBOLS))   # decimal, also when written with a leading zero
ALPHABET=""; [ "$SYMBOLS" = 20 ] || ALPHABET="_K$SYMBOLS"   # the paper's 20: the folder names of before
for T in $LENGTHS; do [[ "$T" =~ ^[0-9]+$ ]] && [ "$T" -ge 2 ] || die "--lengths must hold integers >= 2, not '$T'"; done
fairseq-longmem arms check sorting --prog sorting.sh --arms="$ARMS" || exit $?
if [ -n "$SEEDS" ]; then SEEDS=$(fairseq-longmem arms seeds --prog sorting.sh "$SEEDS" | tr '\n' ' ') || exit $?; fi
[ $((STREAMS % 2)) = 0 ] || die "STREAMS must be even (transformer_lm gets STREAMS/2 blocks of 2*SEGMENT)"
. "$ROOT/scripts/threads.sh"   # THREADS: see scripts/train.sh --help; scoring runs on the CPU (--gpu-score: the GPU)
. "$ROOT/scripts/failed.sh"
. "$ROOT/scripts/trained-with.sh"   # an arm trained with another budget or -- options is not reused
set_threads sorting.sh "$([ -n "${THREADS:-}" ] && echo cpu)"

start=$(date +%s)
run_seed() {  # OUT: one whole run (every length and arm) with the environment's SEED
local OUT=$1 T per_example train_examples data ckpts jsons wiped wiped_jsons arm dir t0 now
mkdir -p "$OUT"
now=$(trained_with sorting.sh sorting ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"})
for T in $LENGTHS; do
  per_example=$(( (T + SYMBOLS + 1 + 2 + SEGMENT - 1) / SEGMENT * SEGMENT ))   # padded document
  train_examples=${TRAIN_EXAMPLES:-$(( (MAX_UPDATE * STREAMS * SEGMENT + per_example - 1) / per_example + STREAMS ))}
  # one folder per data configuration, so that make-sorting.sh never has to overwrite anything
  data="$DATA_ROOT/T${T}${ALPHABET}_${train_examples}-${VALID_EXAMPLES}-${TEST_EXAMPLES}_seed$DATA_SEED"
  # an arm trained with another budget or scored on other data (another alphabet, DATA_SEED or number
  # of examples) is not reused; refused before anything is generated (scripts/trained-with.sh)
  for arm in $ARMS; do
    check_reusable sorting.sh "$OUT/T$T/$arm" "$now" accuracy.json "$data" \
      "another SYMBOLS, DATA_SEED, number of examples or --data-root"
  done
  echo "== T=$T: data in $data ($train_examples/$VALID_EXAMPLES/$TEST_EXAMPLES examples)"
  bash "$ROOT/fairseq_plugins/lab/sorting/make-sorting.sh" --length "$T" --train-examples "$train_examples" \
    --valid-examples "$VALID_EXAMPLES" --test-examples "$TEST_EXAMPLES" --seed "$DATA_SEED" --symbols "$SYMBOLS" \
    --out "$data"
  ckpts=() jsons=() wiped=() wiped_jsons=()
  for arm in $ARMS; do
    dir="$OUT/T$T/$arm"
    mkdir -p "$dir"
    if [ -f "$dir/accuracy.json" ]; then echo "== T=$T $arm: already scored ($dir/accuracy.json)"; continue; fi
    # the sorting job's arm, budget and settings (fairseq-longmem arms, job sorting)
    train_arm sorting.sh sorting "$arm" "$data/bin" "$dir" "$now" "T=$T $arm" "training $arm at T=$T"
    ckpts+=("$dir/checkpoint_last.pt") jsons+=("$dir/accuracy.json")
    if [ "$(fairseq-longmem arms get sorting "$arm" has_memory)" = True ]; then   # also scored with it wiped
      wiped+=("$dir/checkpoint_last.pt") wiped_jsons+=("$dir/accuracy-wiped.json")
    fi
  done
  if [ ${#wiped[@]} -gt 0 ]; then
    echo "== T=$T: scoring ${#wiped[@]} checkpoint(s) with the long-term memory wiped"
    fairseq-longmem sorting score --data "$data/bin" --checkpoint "${wiped[@]}" --json "${wiped_jsons[@]}" --force \
      --memory-wiped ${SCORE_DEVICE[@]+"${SCORE_DEVICE[@]}"}
  fi
  if [ ${#ckpts[@]} -gt 0 ]; then
    echo "== T=$T: scoring ${#ckpts[@]} checkpoint(s) on the test split"
    fairseq-longmem sorting score --data "$data/bin" --checkpoint "${ckpts[@]}" --json "${jsons[@]}" --force \
      ${SCORE_DEVICE[@]+"${SCORE_DEVICE[@]}"}
  fi
done
fairseq-longmem sorting table "$OUT"
fairseq-longmem sorting plot "$OUT"   # OUT/accuracy.png, OUT/curves.png
}
if [ -z "$SEEDS" ]; then
  run_seed "$OUT"
else
  for seed in $SEEDS; do echo "== seed $seed: $OUT/seed$seed"; SEED=$seed run_seed "$OUT/seed$seed"; done
  echo "== every seed: $OUT/results.md"
  fairseq-longmem sorting table "$OUT"
  fairseq-longmem sorting plot "$OUT"
fi
echo "== total $(( $(date +%s) - start ))s"
