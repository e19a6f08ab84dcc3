#!/usr/bin/env bash
# MQAR, multi-query associative recall (docs/results/mqar.md; Arora et al., "Zoology", ICLR 2024): does a
# memory store bindings, at key–query distances beyond the attention window?
#   1. build the data if needed (fairseq_plugins/lab/mqar/data.py through data-prep/stages.sh: k key–value
#      pairs, keys from the first half of a vocabulary of V tokens, values from the second, then each key
#      queried once, "k @query v", at a power-law gap; the loss and the accuracy count the values of the
#      queries only);
#   2. train each arm once per seed (fairseq-longmem arms train mqar ARM ...) into OUT/ARM/seedS/;
#   3. score each on the test split (fairseq-longmem mqar score: accuracy at the query positions, per
#      key–query distance bucket, and the arm's state size in bytes -> OUT/ARM/seedS/mqar.json; each arm
#      the registry says has a long-term memory also wiped -> mqar-wiped.json);
#   4. print the table (OUT/results.md and .json: per arm its state size and the mean over the seeds with
#      a 95% t-interval over the seeds, then the reference lines 2/V, 1/k and 1.0) and write the plot
#      OUT/accuracy.png (accuracy against the distance and against the state size).
#
#   bash fairseq_plugins/lab/mqar/mqar.sh [--seeds 1,2,3] [--arms "transformer_lm memory_off ..."] [--out runs/mqar]
#                        [--data DIR] [--quick] [-- FAIRSEQ_TRAIN_OPTIONS...]
#
# Options after -- go to every arm's fairseq-train, after the arm's own.
# Arms (fairseq-longmem arms list mqar): transformer_lm (full attention over the whole example),
# memory_off, infinite_former, infinite_former_mixture, compressive, memory_off_matched (by default), and
# infinite_former_content.
# --seeds: the training seeds, e.g. 1,2,3 (default: 1); every seed trains on the same data.
# Budget (environment; defaults): LAYERS=2 WIDTH=64 HEADS=1 FFN=128 SEGMENT=16 STREAMS=64 MAX_UPDATE=2500
#   LR=0.003 WARMUP=200 NUM_BASIS=32 LENGTH=127: 2,500 updates of 64 streams x 16 tokens (1,024 tokens, 8
#   examples of 128 tokens per update: one pass over the 20,000 training examples). The streaming arms'
#   attention window is W = 2 x SEGMENT = 32 tokens; the key–query distances reach 120 (3.75 W). The
#   CPU-size configuration (vocabulary 256): at most about 8 minutes of training per arm and seed on one
#   core with one thread (taskset -c 0), the slowest arm (infinite_former_content, measured) included, on this
#   project's 2-core machine with the other core busy; scoring adds under a minute (docs/results/mqar.md,
#   "Setup"). THREADS: torch CPU threads (default 1 on a CPU).
# Data (environment; defaults): VOCAB=256 PAIRS=8 POWER_A=0.01 FILLER=zeros BUCKETS="0.5 1 2" (distance
#   buckets, multiples of W) TRAIN_EXAMPLES (default MAX_UPDATE x STREAMS x SEGMENT / (LENGTH + 1))
#   VALID_EXAMPLES=100 TEST_EXAMPLES=1000 DATA_SEED=1; the data goes to --data DIR (default
#   data/mqar/V<V>_k<k>_L<LENGTH>_W<W>_n<TRAIN_EXAMPLES>_seed<DATA_SEED>; data made with other options
#   is refused there).
# Refused in one line before anything is written: PAIRS above the VOCAB/2 - 1 keys of the key half, a
#   LENGTH without room for the PAIRS queries, a window W not shorter than the longest key–query gap the
#   LENGTH allows, a bucket edge beyond it, a seed given twice, an unknown arm.
# --quick: a 1-layer width-32 model, SEGMENT 8, LENGTH 63, 4 pairs, 3 updates, 40 training and 8 test
#   examples (for tests; seconds per arm), output in runs/mqar_quick and data in data/mqar_quick unless
#   --out / --data; it sets the sizes, MAX_UPDATE, WARMUP and NUM_BASIS (LR and SEED stay as the
#   environment sets them).
# Re-running skips runs already scored (OUT/ARM/seedS/mqar.json; delete it to redo that run) and the
# training of runs already trained (OUT/ARM/seedS/checkpoint_last.pt with train_seconds); a run trained
# with another budget or other options after -- (OUT/ARM/seedS/trained_with) is refused in one line
# before anything runs: give such a run another --out.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PROG=mqar.sh
die() { echo "$PROG: error: $*" >&2; exit 2; }
. "$ROOT/scripts/experiment-options.sh"
experiment_options $PROG mqar "$@"
if [ "$QUICK" = 1 ]; then
  # --quick sets its own sizes and budget; separate default folders keep it out of the real run's
  export LAYERS=1 WIDTH=32 HEADS=1 FFN=64 SEGMENT=8 STREAMS=4 MAX_UPDATE=3 WARMUP=1 NUM_BASIS=8 LENGTH=63
  PAIRS=4 TRAIN_EXAMPLES=40 VALID_EXAMPLES=4 TEST_EXAMPLES=8
  OUT=${OUT:-runs/mqar_quick} DATA=${DATA:-data/mqar_quick}
fi
# the budget (environment or the defaults of fairseq_plugins/lab/mqar/arms.py): fairseq-longmem arms, job mqar
BUDGET=$(fairseq-longmem arms budget mqar --prog $PROG) || exit $?
while IFS= read -r kv; do declare "${kv?}"; done <<< "$BUDGET"
VOCAB=${VOCAB:-256} PAIRS=${PAIRS:-8} POWER_A=${POWER_A:-0.01} FILLER=${FILLER:-zeros} BUCKETS=${BUCKETS:-0.5 1 2}
VALID_EXAMPLES=${VALID_EXAMPLES:-100} TEST_EXAMPLES=${TEST_EXAMPLES:-1000} DATA_SEED=${DATA_SEED:-1}
for kv in SEGMENT=$SEGMENT STREAMS=$STREAMS MAX_UPDATE=$MAX_UPDATE LENGTH=$LENGTH VOCAB=$VOCAB PAIRS=$PAIRS; do
  [[ "${kv#*=}" =~ ^[0-9]+$ ]] || die "${kv%%=*} must be a non-negative integer, not '${kv#*=}'"
done
WINDOW=$((2 * SEGMENT))
KEYS=$((VOCAB / 2 - 1)) SLOTS=$(( (LENGTH - 2 * PAIRS - 1) / 4 ))
[ "$PAIRS" -le "$KEYS" ] || die "PAIRS=$PAIRS is more than the $KEYS keys of the vocabulary's key half (VOCAB=$VOCAB:" \
  "keys 1..$KEYS, 0 the filler, values $((VOCAB / 2))..$((VOCAB - 1))); lower PAIRS or raise VOCAB"
[ "$SLOTS" -ge "$PAIRS" ] || die "LENGTH=$LENGTH has no room for $PAIRS pairs and their $PAIRS queries (2k + 4k + 1" \
  "= $((6 * PAIRS + 1)) tokens); raise LENGTH or lower PAIRS"
LONGEST=$((2 * PAIRS + 4 * (SLOTS - 1)))
[ "$WINDOW" -lt "$LONGEST" ] || die "the attention window W = 2 x SEGMENT = $WINDOW tokens is not shorter than the" \
  "longest key–query gap of LENGTH=$LENGTH ($LONGEST tokens): no query would lie beyond the window; raise LENGTH" \
  "or lower SEGMENT"
DEFAULT_TRAIN=$(( MAX_UPDATE * STREAMS * SEGMENT / (LENGTH + 1) ))
TRAIN_EXAMPLES=${TRAIN_EXAMPLES:-$(( DEFAULT_TRAIN > 0 ? DEFAULT_TRAIN : 1 ))}
for kv in TRAIN_EXAMPLES=$TRAIN_EXAMPLES VALID_EXAMPLES=$VALID_EXAMPLES TEST_EXAMPLES=$TEST_EXAMPLES; do
  [[ "${kv#*=}" =~ ^[0-9]+$ ]] && [ "${kv#*=}" -ge 1 ] || die "${kv%%=*} must be a positive integer, not '${kv#*=}'"
done
OUT=${OUT:-runs/mqar}
DATA=${DATA:-data/mqar/V${VOCAB}_k${PAIRS}_L${LENGTH}_W${WINDOW}_n${TRAIN_EXAMPLES}_seed$DATA_SEED}
# the data stage's options (fairseq-longmem prep mqar; data-prep/stages.sh's build_generated runs them)
. "$ROOT/data-prep/stages.sh"
find_tools
DATA_OPTS=(--vocab "$VOCAB" --pairs "$PAIRS" --length "$LENGTH" --power-a "$POWER_A" --filler "$FILLER"
           --window "$WINDOW" --buckets "$BUCKETS" --train-examples "$TRAIN_EXAMPLES"
           --valid-examples "$VALID_EXAMPLES" --test-examples "$TEST_EXAMPLES" --seed "$DATA_SEED")
state_rc=0
prep mqar state --out "$DATA" "${DATA_OPTS[@]}" > /dev/null || state_rc=$?
case "$state_rc" in 0|3) ;; *) exit "$state_rc" ;; esac   # a refusal: its one line already printed
. "$ROOT/scripts/threads.sh"   # THREADS: see scripts/train.sh --help; scoring runs on the CPU
set_threads $PROG "$([ -n "${THREADS:-}" ] && echo cpu)"

. "$ROOT/scripts/trained-with.sh"   # an arm trained with another budget or -- options is not reused
declare -A NOW  # seed -> the line its runs are trained with (scripts/trained-with.sh)
for seed in $SEEDS; do NOW[$seed]=$(SEED=$seed trained_with $PROG mqar ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"}); done
for arm in $ARMS; do
  for seed in $SEEDS; do
    check_reusable $PROG "$OUT/$arm/seed$seed" "${NOW[$seed]}" mqar.json "$DATA" \
      "another --data, DATA_SEED, VOCAB, PAIRS, POWER_A, FILLER or BUCKETS"
  done
done
start=$(date +%s)
echo "== data: $DATA (V $VOCAB, $PAIRS pairs, length $LENGTH, a $POWER_A, W $WINDOW; $TRAIN_EXAMPLES training examples)"
( OUT=$DATA FORCE=0 WORKERS=1
  OPTS=(--out "$DATA" "${DATA_OPTS[@]}")
  WRITE_DICT_OPTS=("${OPTS[@]}")
  build_generated mqar manifest.json "generating MQAR -> $DATA" )
mkdir -p "$OUT"
. "$ROOT/scripts/failed.sh"   # a failed step: the end of its log, the error line last
for arm in $ARMS; do
  wiped=$(fairseq-longmem arms get mqar "$arm" has_memory)   # True: also scored with its memory wiped
  for seed in $SEEDS; do
    dir="$OUT/$arm/seed$seed"
    mkdir -p "$dir"
    if [ -f "$dir/mqar.json" ]; then echo "== $arm seed $seed: already scored ($dir/mqar.json)"; continue; fi
    SEED=$seed train_arm $PROG mqar "$arm" "$DATA/bin" "$dir" "${NOW[$seed]}" "$arm seed $seed" \
      "training $arm (seed $seed)"
    if [ "$wiped" = True ]; then
      fairseq-longmem mqar score --checkpoint "$dir/checkpoint_last.pt" --data "$DATA/bin" --arm "$arm" \
        --memory-wiped --json "$dir/mqar-wiped.json" --force
    fi   # --force: a run without mqar.json is scored again whole (an interrupted scoring)
    fairseq-longmem mqar score --checkpoint "$dir/checkpoint_last.pt" --data "$DATA/bin" --arm "$arm" \
      --json "$dir/mqar.json" --force
  done
done
fairseq-longmem mqar table "$OUT"
fairseq-longmem mqar plot "$OUT"   # OUT/accuracy.png
echo "== total $(( $(date +%s) - start ))s"
