#!/usr/bin/env bash
# Mixed-precision checks on a CUDA machine.
#
#   bash scripts/gpu-checks.sh [--updates 40] [--keep DIR] [--dry-run]
#   bash scripts/gpu-checks.sh --sorting
#
# Trains infinite_former_lm (streaming_lm), fastformer_lm (language_modeling), the
# fastformer encoder-decoder (fastformer_tiny, translation) and infinite_former_gpt2 (a tiny
# random GPT-2 built here with fairseq-longmem gpt2 tiny, converted with fairseq-longmem gpt2
# convert and fine-tuned from it with --restore-file; needs the [hf] extra, else its rows say
# SKIP) on generated toy data with fairseq-train, in fp32 and with --fp16,
# --memory-efficient-fp16, --amp and --bf16, and prints a table: first/last loss, the fp32
# run's last loss, PASS when every logged loss is finite, the run learns (last < first) and
# ends within 0.5 bit of fp32. It says whether apex's fused LayerNorm / Adam are in use
# (fairseq picks them itself when apex imports and CUDA is present; apex is never required).
# Exit status 1 when a row fails.
# Without a CUDA device it prints "no CUDA device: skipped" and exits 0 (the CPU tests,
# tests/compat/test_precision_and_faults.py, cover what a CPU can run).
# --dry-run (no CUDA needed): prepare everything (toy data, tiny GPT-2, conversion) and print
# each row's fairseq-train command line, one per line (model, precision, command; tab-separated),
# instead of training; with --keep DIR the prepared files stay there, so the lines can be run.
# Then, with CUDA and transformers, GPT-2 with the memory against transformers' GPT-2 at
# GPT-2-small size in bf16 (docs/benchmark.md, "GPT-2 against transformers"), written to
# $BENCH_OUT (default results/bench-gpu), and the GPT-2 fine-tuning arm: a random GPT-2 of
# GPT-2 small's size ($GPT2_SIZE: fairseq-longmem gpt2 tiny's options) with a BPE trained on the
# fixture books, fine-tuned by scripts/gpt2-recipe.sh with --bf16 and LR 3e-4 (the weights are
# random, not GPT-2's) for $GPT2_UPDATES (300) updates of 4 x $GPT2_TOKENS (512) tokens on those
# books, memory on and off: each epoch's loss and tokens/s (wps), then both arms' test
# perplexity, in $GPT2_WORK (default results/gpu-gpt2; a rerun resumes the arms there: remove it
# to fine-tune again). --dry-run prints those commands on stderr.
# Last, the paper's sorting task at its length T = 4096 (docs/results/sorting.md, "Sorting task", "At the
# paper's length on a GPU"): fairseq_plugins/lab/sorting/sorting.sh with the paper's model (3 layers, width 300, 6 heads, FFN 300, segment
# and short-term memory 1024, N = 512) and budget (2,000 training examples, 1,000 updates of 32
# streams x 1024 tokens, 800 test examples; SORT_SIZE="NAME=VALUE ..." replaces entries, e.g.
# SORT_SIZE="MAX_UPDATE=2000", NAME one of sorting.sh's budget variables listed there), every arm
# in --bf16 and scored on the GPU, into $SORT_WORK (default results/gpu-sorting: results.md,
# accuracy.png, curves.png; a rerun skips arms already scored). Sized to take about 8 minutes on
# one H200 (an estimate: measure it with `time`). --sorting runs only this stage, on the GPU when
# there is one, else on the CPU in fp32 (the tests run it so with a tiny SORT_SIZE).
# The checks themselves: fairseq-longmem precision-check (fairseq_plugins/lab/precision/checks.py).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# the checkout's environment (scripts/install.sh) when there is one, else the tools on PATH
if [ -x "$ROOT/.venv/bin/fairseq-longmem" ]; then PATH="$ROOT/.venv/bin:$PATH"; fi
cd "$ROOT"
BENCH=(fairseq-longmem bench gpt2 --device cuda --bf16 --prompts 256,1024,4096,16384,65536
       --out "$(realpath -m "${BENCH_OUT:-results/bench-gpu}")" --force)  # a rerun measures again
GPT2_WORK=$(realpath -m "${GPT2_WORK:-results/gpu-gpt2}")
read -r -a SIZE <<<"${GPT2_SIZE:---layers 12 --width 768 --heads 12 --positions 1024 --vocab-size 8000}"
TINY=(fairseq-longmem gpt2 tiny --force --out "$GPT2_WORK/hf" "${SIZE[@]}")
FINETUNE=(env TOKENS_PER_SAMPLE="${GPT2_TOKENS:-512}" BATCH_SIZE=4 LR=3e-4 MAX_EPOCH=1000
          MAX_UPDATE="${GPT2_UPDATES:-300}" GEN_LEN=40 bash "$ROOT/scripts/gpt2-recipe.sh" --hf-dir "$GPT2_WORK/hf"
          --work "$GPT2_WORK/recipe" --corpus txt --input "$ROOT/tests/fixtures/books_txt" -- --bf16)
SORT_WORK=$(realpath -m "${SORT_WORK:-results/gpu-sorting}")
# the paper's size and this stage's budget; SORT_SIZE's NAME=VALUE assignments replace single entries
SORT_DEFAULT=(LAYERS=3 WIDTH=300 HEADS=6 FFN=300 SEGMENT=1024 NUM_BASIS=512 STREAMS=32 MAX_UPDATE=1000 WARMUP=100
              LR=0.001 TRAIN_EXAMPLES=2000 VALID_EXAMPLES=100 TEST_EXAMPLES=800 SEED=1 DATA_SEED=1)
read -r -a SORT_GIVEN <<<"${SORT_SIZE:-}"
for kv in ${SORT_GIVEN[@]+"${SORT_GIVEN[@]}"}; do
  known=0; for d in "${SORT_DEFAULT[@]}"; do [ "${kv%%=*}" = "${d%%=*}" ] && known=1; done
  if [[ ! "$kv" =~ ^[A-Z_]+=[^=]+$ ]] || [ $known = 0 ]; then
    echo "gpu-checks.sh: error: SORT_SIZE: '$kv' is not NAME=VALUE with NAME one of $(printf '%s ' "${SORT_DEFAULT[@]%%=*}")" >&2
    exit 2
  fi
done
SORT_ENV=("${SORT_DEFAULT[@]}" ${SORT_GIVEN[@]+"${SORT_GIVEN[@]}"})  # env: a later assignment wins
cuda() { python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
sorting() {  # the paper's length; --bf16 and scoring on the GPU when there is one
  local device=()
  if cuda; then device=(--gpu-score -- --bf16); fi
  env "${SORT_ENV[@]}" bash "$ROOT/fairseq_plugins/lab/sorting/sorting.sh" --lengths 4096 --out "$SORT_WORK" \
    --data-root "$SORT_WORK/data" ${device[@]+"${device[@]}"}
}
case " $* " in *" --sorting "*)
  [ $# = 1 ] || { echo "gpu-checks.sh: error: --sorting takes no other option (sizes: SORT_SIZE)" >&2; exit 2; }
  sorting; exit $? ;;
esac
status=0
fairseq-longmem precision-check --prog gpu-checks.sh "$@" || status=$?
case " $* " in *" --dry-run "*)
  printf 'then: %s\n' "${BENCH[*]}" "${TINY[*]}" "${FINETUNE[*]}" "bash scripts/gpu-checks.sh --sorting" >&2
  exit "$status" ;; esac
if python -c "import torch,sys,transformers; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  "${BENCH[@]}" || status=$?
  { "${TINY[@]}" && "${FINETUNE[@]}"; } || status=$?
fi
if cuda; then sorting || status=$?; fi
exit "$status"
