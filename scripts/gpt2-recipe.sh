#!/usr/bin/env bash
# The ∞-former on a pretrained GPT-2 (paper §4.2; docs/gpt2.md), one command per step:
# convert -> prepare data with GPT-2's BPE -> fine-tune two arms from the same checkpoint
# (memory: the long-term memory on; baseline: --no-long-term-memory) -> fairseq-eval-lm of
# GPT-2 as converted and of both arms on the test split (memory carried through the whole
# split) -> a sampled continuation with fairseq-interactive.
#
#   bash scripts/gpt2-recipe.sh --hf-dir DIR --work DIR (--data BIN | --corpus C --input PATH)
#        [--paragraphs blank-line|line] [--prompt TEXT] [-- extra fairseq-train options]
#
#   --hf-dir DIR   Hugging Face GPT-2 folder (config.json, model.safetensors, vocab.json, merges.txt)
#   --work DIR     everything goes here: gpt2/ (converted), data/, memory/, baseline/, results.md
#   --data BIN     already binarized with data-prep/prepare-lm.sh --bpe gpt2 (its OUT/bin); or
#   --corpus C --input PATH   prepare it here (prepare-lm.sh --corpus C --input PATH --bpe gpt2)
#   --prompt TEXT  start of the generated continuation ["The"]
# Settings from the environment (defaults: the paper's fine-tuning, docs/design/gpt2.md §2-§3):
#   TOKENS_PER_SAMPLE=512 BATCH_SIZE=1 LR=5e-5 MAX_EPOCH=1 MAX_UPDATE=0 (0: the epoch)
#   NUM_BASIS=512 NUM_SAMPLES=512 KL_WEIGHT=1e-6 CLIP_NORM=1.0 WEIGHT_DECAY=0.01 SEED=1
#   GEN_LEN=100 (tokens, prompt included) ARMS="memory baseline"; THREADS (torch CPU threads, printed)
# The device is the GPU when torch sees one, else --cpu; pass e.g. -- --fp16 for mixed precision.
# Every input is checked before anything is created (fairseq-longmem gpt2 check). A rerun with
# the same --work resumes each arm from its checkpoint_last.pt (a finished arm takes one more
# step, at learning rate 0, which changes no weight) and evaluates again; remove an arm's folder
# to fine-tune it again.
set -euo pipefail
PROG=gpt2-recipe.sh
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$PROG: error: $*" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HF="" WORK="" DATA="" CORPUS="" INPUT="" PARAGRAPHS=() PROMPT="The" EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --hf-dir) HF=${2:?}; shift 2 ;;
    --work) WORK=${2:?}; shift 2 ;;
    --data) DATA=${2:?}; shift 2 ;;
    --corpus) CORPUS=${2:?}; shift 2 ;;
    --input) INPUT=${2:?}; shift 2 ;;
    --paragraphs) PARAGRAPHS=(--paragraphs "${2:?}"); shift 2 ;;
    --prompt) PROMPT=${2:?}; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$HF" ] || die "--hf-dir DIR is required (see --help)"
[ -n "$WORK" ] || die "--work DIR is required (see --help)"
if [ -z "$DATA" ] && [ -z "$CORPUS" ]; then die "give --data BIN or --corpus C --input PATH"; fi
if [ -n "$DATA" ] && [ -n "$CORPUS" ]; then die "give either --data or --corpus/--input, not both"; fi
L=${TOKENS_PER_SAMPLE:-512} BSZ=${BATCH_SIZE:-1} LR=${LR:-5e-5} MAX_EPOCH=${MAX_EPOCH:-1}
MAX_UPDATE=${MAX_UPDATE:-0} NUM_BASIS=${NUM_BASIS:-512} NUM_SAMPLES=${NUM_SAMPLES:-512}
KL_WEIGHT=${KL_WEIGHT:-1e-6} CLIP_NORM=${CLIP_NORM:-1.0} WEIGHT_DECAY=${WEIGHT_DECAY:-0.01} SEED=${SEED:-1}
GEN_LEN=${GEN_LEN:-100} ARMS=${ARMS:-memory baseline}
# the checkout's environment (scripts/install.sh) when there is one, else the tools on PATH
if [ -x "$ROOT/.venv/bin/fairseq-longmem" ]; then PATH="$ROOT/.venv/bin:$PATH"; fi
. "$ROOT/scripts/threads.sh"
DEVICE=(--cpu)
if torch_cuda; then DEVICE=(); fi
set_threads "$PROG" "$([ ${#DEVICE[@]} -gt 0 ] && echo cpu || echo cuda)"
PLUGIN=(--user-dir "$ROOT/fairseq_plugins")
CHECK=(--hf-dir "$HF" --work "$WORK" --tokens-per-sample "$L")
if [ -n "$DATA" ]; then CHECK+=(--data "$DATA"); else CHECK+=(--corpus "$CORPUS" ${INPUT:+--input "$INPUT"}); fi
fairseq-longmem gpt2 check --prog "$PROG" "${CHECK[@]}" "${PARAGRAPHS[@]}"   # before anything is created
mkdir -p "$WORK"
step() { echo "== $*"; }

step "1. convert $HF"
if [ -f "$WORK/gpt2/checkpoint.pt" ]; then
  echo "$WORK/gpt2 already holds the conversion (delete that folder to convert again)"
else
  fairseq-longmem gpt2 convert --hf-dir "$HF" --out "$WORK/gpt2" --tokens-per-sample "$L"
fi
read -r -a MODEL <"$WORK/gpt2/model-args.txt"

if [ -z "$DATA" ]; then
  step "2. prepare $CORPUS with GPT-2's BPE"
  bash "$ROOT/data-prep/prepare-lm.sh" --corpus "$CORPUS" --input "$INPUT" "${PARAGRAPHS[@]}" \
    --out "$WORK/data" --bpe gpt2 --hf-dir "$HF"
  DATA="$WORK/data/bin"
fi
cmp -s "$DATA/dict.txt" "$WORK/gpt2/dict.txt" \
  || die "$DATA/dict.txt is not the converted model's dictionary; prepare the data with --bpe gpt2 --hf-dir $HF"

# the linear schedule needs the number of updates: one epoch = ceil(ceil(tokens / BSZ) / L) batches
UPDATES=$(fairseq-longmem gpt2 updates --data "$DATA" --tokens-per-sample "$L" --batch-size "$BSZ" \
  --max-epoch "$MAX_EPOCH" --max-update "$MAX_UPDATE")
MEMORY=(--num-basis-functions "$NUM_BASIS" --num-samples "$NUM_SAMPLES")
for arm in $ARMS; do
  # from the conversion; or, when the arm has a checkpoint_last.pt (an earlier or interrupted run),
  # resumed from it as fairseq-train resumes
  START=(--restore-file "$WORK/gpt2/checkpoint.pt" --reset-optimizer --reset-lr-scheduler --reset-meters
         --reset-dataloader)
  if [ -f "$WORK/$arm/checkpoint_last.pt" ]; then
    START=()
    step "3. resume '$arm' from $WORK/$arm/checkpoint_last.pt ($UPDATES updates in all; remove $WORK/$arm to fine-tune again)"
  else
    step "3. fine-tune '$arm' ($UPDATES updates of $BSZ x $L tokens)"
  fi
  mkdir -p "$WORK/$arm"
  ARM_ARGS=()
  [ "$arm" = baseline ] && ARM_ARGS=(--no-long-term-memory)
  fairseq-train "$DATA" "${PLUGIN[@]}" --task streaming_lm "${MODEL[@]}" "${MEMORY[@]}" "${ARM_ARGS[@]}" \
    --tokens-per-sample "$L" --batch-size "$BSZ" --criterion infinite_former_kl --kl-weight "$KL_WEIGHT" \
    --optimizer adam --adam-betas '(0.9, 0.999)' --weight-decay "$WEIGHT_DECAY" --lr "$LR" \
    --lr-scheduler polynomial_decay --total-num-update "$UPDATES" --max-update "$UPDATES" \
    --max-epoch "$MAX_EPOCH" --clip-norm "$CLIP_NORM" --seed "$SEED" \
    "${START[@]}" --save-dir "$WORK/$arm" --no-epoch-checkpoints --required-batch-size-multiple 1 \
    --log-format simple --log-interval 10 "${DEVICE[@]}" "${EXTRA[@]}" 2>&1 | tee -a "$WORK/$arm/train.log" \
    | grep -E "train \| epoch|valid on|error" || true
  [ "${PIPESTATUS[0]}" = 0 ] || die "fine-tuning '$arm' failed; see $WORK/$arm/train.log"
done

evaluate() {  # name checkpoint [model overrides]
  local log="$WORK/eval-$1.log"
  fairseq-eval-lm "$DATA" "${PLUGIN[@]}" --task streaming_lm --path "$2" --tokens-per-sample "$L" \
    --batch-size 1 --gen-subset test --model-overrides "${3:-{\}}" "${DEVICE[@]}" >"$log" 2>&1 \
    || die "fairseq-eval-lm of $1 failed; see $log"
  local ppl; ppl=$(grep -o "Perplexity: [0-9.]*" "$log" | tail -1 | cut -d' ' -f2)
  local n; n=$(grep -o "Evaluated [0-9,]* tokens" "$log" | tail -1 | cut -d' ' -f2)
  printf '| %s | %s | %s |\n' "$1" "$ppl" "$n" | tee -a "$WORK/results.md"
}
step "4. fairseq-eval-lm, test split"
printf '| model | test perplexity | tokens |\n|---|---|---|\n' | tee "$WORK/results.md"
evaluate "GPT-2 as converted" "$WORK/gpt2/checkpoint.pt" "{'no_long_term_memory': True}"
for arm in $ARMS; do
  case "$arm" in memory) name="∞-former (GPT-2 + long-term memory), fine-tuned" ;;
                 baseline) name="GPT-2 fine-tuned (no memory)" ;; *) name=$arm ;; esac
  evaluate "$name" "$WORK/$arm/checkpoint_last.pt"
done

first=${ARMS%% *}
step "5. continuation of \"$PROMPT\" ($first, sampled, top-k 10)"
echo "$PROMPT" | fairseq-interactive "$WORK/gpt2" "${PLUGIN[@]}" --task language_modeling \
  --path "$WORK/$first/checkpoint_last.pt" --bpe gpt2 --gpt2-encoder-json "$HF/vocab.json" \
  --gpt2-vocab-bpe "$HF/merges.txt" --beam 1 --sampling --sampling-topk 10 --seed "$SEED" \
  --max-len-b "$GEN_LEN" "${DEVICE[@]}" 2>"$WORK/generate.log" | grep "^D-" | cut -f3 \
  || die "fairseq-interactive failed; see $WORK/generate.log"
echo "results: $WORK/results.md"
