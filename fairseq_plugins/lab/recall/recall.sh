#!/usr/bin/env bash
# Recall by distance (docs/results/recall.md): how far and how much a long-term memory carries one key.
#   1. build the data if needed (fairseq_plugins/lab/recall/make-recall.sh: a key written once in real book text, a
#      query d tokens later whose answer is the key, d = m x W for each m of DISTANCES, W = 2 x SEGMENT
#      the attention window: the ∞-former's segment + short-term memory, transformer_lm's block);
#   2. train each arm once per seed (fairseq-longmem arms train recall ARM ...: the loss on the
#      answer only) into OUT/ARM/seedS/;
#   3. score each on the test split (fairseq-longmem recall score: accuracy per distance ->
#      OUT/ARM/seedS/recall.json; each arm with a long-term memory (∞-former, compressive) also wiped ->
#      recall-wiped.json);
#   4. print the table (OUT/results.md and .json: per arm and distance the mean over the seeds with a
#      95% t-interval over the seeds) and write the plot OUT/accuracy.png (accuracy against d/W).
#
#   bash fairseq_plugins/lab/recall/recall.sh [--seeds 1,2,3] [--arms "infinite_former memory_off transformer_lm"]
#                          [--out runs/recall] [--data DIR] [--quick] [-- FAIRSEQ_TRAIN_OPTIONS...]
#
# Options after -- go to every arm's fairseq-train, after the arm's own (e.g. -- --tau 0.75 for the
# long-term memory's contraction).
# Arms (fairseq-longmem arms list recall): infinite_former, memory_off and transformer_lm by default;
# also infinite_former_evicted, infinite_former_no_sticky, memory_off_matched, compressive, fastformer_lm. The
# streaming arms read each example as its own document (--reset-memory-at-document-boundary); every
# arm has --loss-after-symbol @query and validates and saves only at the end.
# --seeds: the training seeds, e.g. 1,2,3 (default: 1); every seed trains on the same data.
# Budget (environment; defaults): LAYERS=2 WIDTH=128 HEADS=4 FFN=512 SEGMENT=64 STREAMS=16
#   MAX_UPDATE=2500 LR=0.002 WARMUP=100 NUM_BASIS=64: 2,500 updates of 16 streams x 64 tokens (1,024
#   tokens per update, 2.56M in all: about one pass over the 6,141 training examples). About 17 minutes
#   of training per arm and seed on one core with one thread (taskset -c 0): infinite_former measured
#   0.41 s per update on this project's 2-core machine with the other core busy (0.23 s of CPU per
#   update), plus about 30 s to start and validate; scoring adds about 1.5 minutes per score
#   (docs/results/recall.md, "Budget"). THREADS: torch CPU threads (default 1 on a CPU).
# Data (environment; defaults): DISTANCES="0.5 1 2 4 8 16 32 64" KEYS=32 REPEAT=1 TRAIN_MIX=tokens
#   TRAIN_TOKENS (default MAX_UPDATE*STREAMS*SEGMENT) VALID_PER_DISTANCE=8 TEST_PER_DISTANCE=64
#   DATA_SEED=1 BOOKS=data/books (bash data-prep/prepare-lm.sh --out data/books makes it); the data
#   goes to --data DIR (default data/recall/W<W>_seed<DATA_SEED>; data made with other options is
#   refused there: give other data options another --data).
# --quick: a 1-layer width-32 model, SEGMENT 8, 3 updates, distances 0.5 1 2, 8 keys, 4 test examples
#   per distance (for tests; about a minute), output in runs/recall_quick and data in
#   data/recall_quick unless --out / --data; it sets the sizes, MAX_UPDATE, WARMUP and NUM_BASIS (LR
#   and SEED stay as the environment sets them).
# Re-running skips runs already scored (OUT/ARM/seedS/recall.json; delete it to redo that run) and
# the training of runs already trained (OUT/ARM/seedS/checkpoint_last.pt with train_seconds); a run
# trained with another budget or other options after -- (OUT/ARM/seedS/trained_with) is refused in
# one line before anything runs: give such a run another --out.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
die() { echo "recall.sh: error: $*" >&2; exit 2; }
. "$ROOT/scripts/experiment-options.sh"
experiment_options recall.sh recall "$@"
if [ "$QUICK" = 1 ]; then
  # --quick sets its own sizes and budget; separate default folders keep it out of the real run's
  export LAYERS=1 WIDTH=32 HEADS=2 FFN=64 SEGMENT=8 STREAMS=4 MAX_UPDATE=3 WARMUP=1 NUM_BASIS=8
  DISTANCES="0.5 1 2" KEYS=8 VALID_PER_DISTANCE=2 TEST_PER_DISTANCE=4 TRAIN_TOKENS=2000
  OUT=${OUT:-runs/recall_quick} DATA=${DATA:-data/recall_quick}
fi
# the budget (environment or the defaults above) and the arms: fairseq-longmem arms, job recall
BUDGET=$(fairseq-longmem arms budget recall --prog recall.sh) || exit $?
while IFS= read -r kv; do declare "${kv?}"; done <<< "$BUDGET"
[[ "$SEGMENT" =~ ^[0-9]+$ ]] && [[ "$STREAMS" =~ ^[0-9]+$ ]] && [[ "$MAX_UPDATE" =~ ^[0-9]+$ ]] \
  || die "SEGMENT, STREAMS and MAX_UPDATE must be integers"
WINDOW=$((2 * SEGMENT))
DISTANCES=${DISTANCES:-0.5 1 2 4 8 16 32 64} KEYS=${KEYS:-32} REPEAT=${REPEAT:-1} TRAIN_MIX=${TRAIN_MIX:-tokens}
TRAIN_TOKENS=${TRAIN_TOKENS:-$((MAX_UPDATE * STREAMS * SEGMENT))}
VALID_PER_DISTANCE=${VALID_PER_DISTANCE:-8} TEST_PER_DISTANCE=${TEST_PER_DISTANCE:-64} DATA_SEED=${DATA_SEED:-1}
BOOKS=${BOOKS:-data/books}
OUT=${OUT:-runs/recall} DATA=${DATA:-data/recall/W${WINDOW}_seed$DATA_SEED}
. "$ROOT/scripts/threads.sh"   # THREADS: see scripts/train.sh --help; scoring runs on the CPU
set_threads recall.sh "$([ -n "${THREADS:-}" ] && echo cpu)"

. "$ROOT/scripts/trained-with.sh"   # an arm trained with another budget or -- options is not reused
# every run's record checked before anything is generated or trained: the budget and -- options it
# was trained with, and the data it was scored on (scripts/trained-with.sh, check_reusable)
declare -A NOW  # seed -> the line its runs are trained with (scripts/trained-with.sh)
for seed in $SEEDS; do NOW[$seed]=$(SEED=$seed trained_with recall.sh recall ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"}); done
for arm in $ARMS; do
  for seed in $SEEDS; do
    check_reusable recall.sh "$OUT/$arm/seed$seed" "${NOW[$seed]}" recall.json "$DATA" \
      "another --data, DATA_SEED, REPEAT, DISTANCES or KEYS"
  done
done
start=$(date +%s)
echo "== data: $DATA (W $WINDOW, distances $DISTANCES x W, $KEYS keys; books $BOOKS)"
bash "$ROOT/fairseq_plugins/lab/recall/make-recall.sh" --window "$WINDOW" --distances "$DISTANCES" --keys "$KEYS" --repeat "$REPEAT" \
  --train-tokens "$TRAIN_TOKENS" --train-mix "$TRAIN_MIX" --valid-per-distance "$VALID_PER_DISTANCE" \
  --test-per-distance "$TEST_PER_DISTANCE" --seed "$DATA_SEED" --books "$BOOKS" --out "$DATA"
mkdir -p "$OUT"
. "$ROOT/scripts/failed.sh"   # a failed step: the end of its log, the error line last
for arm in $ARMS; do
  for seed in $SEEDS; do
    dir="$OUT/$arm/seed$seed"
    mkdir -p "$dir"
    if [ -f "$dir/recall.json" ]; then echo "== $arm seed $seed: already scored ($dir/recall.json)"; continue; fi
    SEED=$seed train_arm recall.sh recall "$arm" "$DATA/bin" "$dir" "${NOW[$seed]}" "$arm seed $seed" \
      "training $arm (seed $seed)"
    if [ "$(fairseq-longmem arms get recall "$arm" has_memory)" = True ]; then   # also scored with it wiped
      fairseq-longmem recall score --checkpoint "$dir/checkpoint_last.pt" --data "$DATA/bin" \
        --memory-wiped --json "$dir/recall-wiped.json" --force
    fi   # --force: a run without recall.json is scored again whole (an interrupted scoring)
    fairseq-longmem recall score --checkpoint "$dir/checkpoint_last.pt" --data "$DATA/bin" --json "$dir/recall.json" \
      --force
  done
done
fairseq-longmem recall table "$OUT"
fairseq-longmem recall plot "$OUT"   # OUT/accuracy.png
echo "== total $(( $(date +%s) - start ))s"
