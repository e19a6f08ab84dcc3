#!/usr/bin/env bash
# The summarization comparison, end to end (CPU, ~30-35 min on 2 idle cores with the defaults:
# ~20 min training, up to ~10 min beam search, most of it the fastformer's 4096-token sources):
#   1. install into ./.venv if needed (scripts/install.sh; skipped if the active Python has it all);
#   2. prepare the corpus (data-prep/prepare-summarization.sh; default ACLSum: paper body ->
#      abstract, 100 train / 50 valid / 100 test papers) into DATA;
#   3. train each arm on the same budget (scripts/train-summarizer.sh: equal depth, width,
#      heads, FFN, updates and documents per update);
#   4. generate summaries of the SPLIT documents (scripts/generate-summaries.sh: beam search,
#      --post-process sentencepiece) and score them (`fairseq-longmem summarize score`:
#      ROUGE-1/2/L/Lsum F1 with stemming, sacreBLEU);
#   5. the memory-wiped control: the infinite_former checkpoint generates again with every read of
#      its document memory empty (--model-overrides "{'memory_wiped': True}"; the lead window is
#      kept) into OUT/infinite_former/SPLIT-wiped, scored the same way ("..., memory wiped");
#   6. score the Lead-k baseline (`fairseq-longmem summarize lead`) the same way;
#   7. print one table, also written to OUT/comparison.md and OUT/comparison.json.
#
#   bash scripts/summarization-comparison.sh [--arms "infinite_former fastformer transformer"]
#       [--out runs/summarization] [--data data/aclsum] [--split test] [--lead-k 3]
#       [--corpus aclsum|source-target|jsonl|facts] [--input PATH] [--vocab-size N | --spm-model FILE]
#       [--document-field F] [--summary-field F] [--doc-tokens N] [--facts K] [--examples T,V,S] [--seed S] [--placement strata|uniform]
#       [--rouge-tokenizer unicode|rouge-score] [--seeds 1,2,3]
#
# --seeds trains, generates and scores every arm once per training seed (SEED of
# scripts/train-summarizer.sh), each seed's whole run (its table with Lead-k) in OUT/seedS/; the
# data is the same for every seed (the facts corpus' --seed is the data's seed, not training's);
# on the facts corpus OUT/facts.md then pools each arm's seeds (intervals over documents and seeds).
#
# --corpus, --input, --vocab-size, --spm-model, --document-field, --summary-field and the facts
# corpus' --doc-tokens, --facts, --examples, --seed, --placement go to data-prep/prepare-summarization.sh
# (default: ACLSum, fetched with pip). On the facts corpus every run also scores each fact
# (`fairseq-longmem summarize facts`, docs/summarization.md) into OUT/facts.md, facts.json,
# facts.png and facts-curves.png. The active Python environment is used if it has fairseq and
# this package, else ./.venv (scripts/install.sh).
# Budget and sizes: the environment variables of scripts/train-summarizer.sh; decoding: those of
# scripts/generate-summaries.sh. --rouge-tokenizer goes to `fairseq-longmem summarize score`
# (default unicode: every script; rouge-score: its own [a-z0-9] words, as docs/results/aclsum.md's ACLSum
# table). Re-running reuses the prepared data and skips every step whose output exists under OUT
# (OUT/ARM/train.done, OUT/ARM/SPLIT[-wiped]/hyp.txt, OUT/ARM/SPLIT[-wiped]/results.json; with
# --seeds, OUT/seedS/ARM/...);
# an interrupted training resumes from OUT/ARM/checkpoint_last.pt. An arm trained with another
# budget is refused in one line; decoding settings are not checked: summaries already in
# OUT/ARM/SPLIT/hyp.txt are reused as they are. Delete OUT/ARM (OUT/seedS/ARM) to redo an arm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PROG=summarization-comparison.sh
. "$ROOT/scripts/failed.sh"   # a failed step: the end of its log, the error line last
. "$ROOT/scripts/trained-with.sh"   # an arm trained with another budget is not reused
ARMS="infinite_former fastformer transformer"
OUT=runs/summarization
DATA=data/aclsum
SPLIT=test
LEAD_K=3
PREP=()
SCORE=()
SEEDS="" SEEDS_GIVEN=0
die() { echo "$PROG: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --arms) [ $# -ge 2 ] || die "--arms needs a value"; ARMS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --data) [ $# -ge 2 ] || die "--data needs a value"; DATA=$2; shift 2 ;;
    --split) [ $# -ge 2 ] || die "--split needs a value"; SPLIT=$2; shift 2 ;;
    --lead-k) [ $# -ge 2 ] || die "--lead-k needs a value"; LEAD_K=$2; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; SEEDS=$2; SEEDS_GIVEN=1; shift 2 ;;
    --rouge-tokenizer) [ $# -ge 2 ] || die "--rouge-tokenizer needs a value"; SCORE+=("$1" "$2"); shift 2 ;;
    --corpus|--input|--vocab-size|--spm-model|--document-field|--summary-field|--doc-tokens|--facts|--examples|--seed|--placement)
      [ $# -ge 2 ] || die "$1 needs a value"; PREP+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$SPLIT" in valid|test) ;; *) die "--split must be valid or test, not '$SPLIT'" ;; esac
[[ "$LEAD_K" =~ ^[1-9][0-9]*$ ]] || die "--lead-k must be a positive integer, not '$LEAD_K'"
if [ ${#SCORE[@]} -gt 0 ]; then
  case "${SCORE[1]}" in unicode|rouge-score) ;; *) die "--rouge-tokenizer must be unicode or rouge-score, not '${SCORE[1]}'" ;; esac
fi
# the active environment if it has everything, else ./.venv (installed if needed)
. "$ROOT/scripts/installed.sh"
NEEDED=(fairseq fairseq_plugins rouge_score sacrebleu)
if ! installed python "${NEEDED[@]}" || ! command -v fairseq-train >/dev/null 2>&1; then
  if ! installed .venv/bin/python "${NEEDED[@]}"; then
    echo "== installing into .venv"; bash scripts/install.sh
  fi
  export PATH="$ROOT/.venv/bin:$PATH"
fi
# the checks that need the package (arms, seeds and the budget: the registry's answer), before any data is built
fairseq-longmem arms check summarization --prog "$PROG" --arms="$ARMS" --join comma || exit $?
if [ "$SEEDS_GIVEN" = 1 ]; then SEEDS=$(fairseq-longmem arms seeds --prog "$PROG" "$SEEDS" | tr '\n' ' ') || exit $?; fi
fairseq-longmem arms budget summarization --prog "$PROG" >/dev/null || exit $?
start=$(date +%s)
echo "== preparing the data ($DATA)"
bash data-prep/prepare-summarization.sh --out "$DATA" "${PREP[@]}"
facts_outputs() {  # the files `summarize facts` writes for FACTS (facts-curves.png only with a --log)
  local curves=""
  case " ${FACTS[*]} " in *" --log "*) curves=", facts-curves.png" ;; esac
  echo "$OUT/facts.md, facts.json, facts.png$curves"
}
facts_args() {  # ARM RUN: FACTS += its summaries (and its memory-wiped control's), its training log where it logged an update
  FACTS+=(--hyp "$1=$2/$SPLIT/hyp.txt")
  if [ -f "$2/$SPLIT-wiped/hyp.txt" ]; then FACTS+=(--hyp "$1 wiped=$2/$SPLIT-wiped/hyp.txt"); fi
  if grep -q "| train_inner |" "$2/train.log" 2>/dev/null; then FACTS+=(--log "$1=$2/train.log"); fi
}
run_seed() {  # OUT: one whole comparison (Lead-k and every arm) with the environment's SEED
local OUT=$1 ROWS LEAD_DIR arm t0
mkdir -p "$OUT"
label() {  # the model column of the table (fairseq-longmem arms)
  fairseq-longmem arms get summarization "$1" label --prog "$PROG"
}
ROWS=()
# Lead-k first: it needs no training and is the bar to beat
LEAD_DIR=$OUT/lead$LEAD_K/$SPLIT
if [ ! -f "$LEAD_DIR/results.json" ]; then
  echo "== Lead-$LEAD_K baseline on $SPLIT"
  mkdir -p "$LEAD_DIR"
  fairseq-longmem summarize lead --source "$DATA/raw/$SPLIT.source" --k "$LEAD_K" --out "$LEAD_DIR/hyp.txt" --force
  fairseq-longmem summarize score --hyp "$LEAD_DIR/hyp.txt" --ref "$DATA/raw/$SPLIT.target" \
    --model "Lead-$LEAD_K" --split "$SPLIT" --decoding "first $LEAD_K sentences (regex splitter)" --out "$LEAD_DIR" \
    "${SCORE[@]}" --force
else
  echo "== Lead-$LEAD_K already scored in $LEAD_DIR"
fi
ROWS+=("$LEAD_DIR/results.json")
# the budget an arm was trained with (the variables of scripts/train-summarizer.sh, defaults filled in)
budget() { trained_with "$PROG" summarization; }
decode() {  # ARM GEN MODEL [fairseq-generate options]: ARM's summaries of SPLIT into GEN, scored as MODEL
  local arm=$1 gen=$2 model=$3 t0; shift 3
  if [ -f "$gen/hyp.txt" ]; then
    echo "== $model: summaries of $SPLIT already in $gen/hyp.txt"
  else
    t0=$(date +%s)
    echo "== generating $SPLIT summaries with $model (log: $gen/generate.log)"
    bash scripts/generate-summaries.sh "$OUT/$arm/checkpoint_last.pt" "$DATA" "$SPLIT" "$gen" --force "$@" \
      || { echo "$PROG: generating with $model failed" >&2; exit 1; }
    echo "$(( $(date +%s) - t0 ))" > "$gen/generate.seconds"
  fi
  if [ ! -f "$gen/results.json" ]; then
    fairseq-longmem summarize score --hyp "$gen/hyp.txt" --ref "$DATA/raw/$SPLIT.target" \
      --model "$model" --checkpoint "$OUT/$arm/checkpoint_last.pt" --split "$SPLIT" \
      --decoding "$(cat "$gen/decoding.txt")" --out "$gen" "${SCORE[@]}" --force
  fi
  ROWS+=("$gen/results.json")
}
for arm in $ARMS; do
  mkdir -p "$OUT/$arm"
  if [ -f "$OUT/$arm/train.done" ]; then
    check_trained_with "$PROG" "$OUT/$arm" "$(sed -n 's/^budget: //p' "$OUT/$arm/train.done")" "$(budget)"
    echo "== $arm already trained in $OUT/$arm (delete it to retrain)"
  else
    t0=$(date +%s)
    echo "== training $arm (log: $OUT/$arm/train.log)"
    # the log without fairseq's setup noise (QUIET=0 keeps everything); on failure its end, the error line last
    bash scripts/train-summarizer.sh "$arm" "$DATA/bin" "$OUT/$arm" >> "$OUT/$arm/train.log" 2>&1 \
      || failed "$PROG" "training $arm" "$OUT/$arm/train.log"
    printf '%s\nbudget: %s\n' "$(( $(date +%s) - t0 ))" "$(budget)" > "$OUT/$arm/train.done"
  fi
  decode "$arm" "$OUT/$arm/$SPLIT" "$(label "$arm")"
  if [ "$(fairseq-longmem arms get summarization "$arm" has_memory --prog "$PROG")" = True ]; then
    # the memory-wiped control of an arm with a document memory
    decode "$arm" "$OUT/$arm/$SPLIT-wiped" "$(label "$arm"), memory wiped" --model-overrides "{'memory_wiped': True}"
  fi
done
# arms of earlier runs into the same OUT stay in the table
for arm in $(fairseq-longmem arms list summarization); do
  case " $ARMS " in *" $arm "*) continue ;; esac
  for run in "$OUT/$arm/$SPLIT" "$OUT/$arm/$SPLIT-wiped"; do
    if [ -f "$run/results.json" ]; then ROWS+=("$run/results.json"); fi
  done
done
echo "== comparison ($OUT/comparison.md, $OUT/comparison.json)"
fairseq-longmem results summarization "${ROWS[@]}" --out "$OUT" --force
if [ -f "$DATA/raw/$SPLIT.facts.jsonl" ]; then  # the facts corpus: scores per fact and position
  FACTS=()
  for arm in $ARMS; do facts_args "$arm" "$OUT/$arm"; done
  echo "== scores per fact ($(facts_outputs))"
  fairseq-longmem summarize facts --manifest "$DATA/raw/$SPLIT.facts.jsonl" "${FACTS[@]}" --out "$OUT" --force --prog "$PROG"
fi
}
if [ -z "$SEEDS" ]; then
  run_seed "$OUT"
else
  for seed in $SEEDS; do echo "== seed $seed: $OUT/seed$seed"; SEED=$seed run_seed "$OUT/seed$seed"; done
  if [ -f "$DATA/raw/$SPLIT.facts.jsonl" ]; then  # each arm's seeds pooled, intervals over documents and seeds
    FACTS=()
    for arm in $ARMS; do for seed in $SEEDS; do facts_args "$arm" "$OUT/seed$seed/$arm"; done; done
    echo "== scores per fact over the seeds ($(facts_outputs))"
    fairseq-longmem summarize facts --manifest "$DATA/raw/$SPLIT.facts.jsonl" "${FACTS[@]}" --out "$OUT" --force --prog "$PROG"
  fi
fi
echo "== total $(( $(date +%s) - start ))s"
