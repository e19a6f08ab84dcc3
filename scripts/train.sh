#!/usr/bin/env bash
# Train one arm of the language-modelling comparison with fairseq-train.
#
#   bash scripts/train.sh ARM DATA_BIN SAVE_DIR [extra fairseq-train options...]
#
# ARM is one of
#   infinite_former  ∞-former (short-term memory + continuous long-term memory), task streaming_lm
#   memory_off       the same model with --no-long-term-memory (Transformer-XL-style twin)
#   transformer_lm   fairseq's own transformer_lm, stock language_modeling task
#   fastformer_lm    Fastformer additive attention (plugin), stock language_modeling task
# All arms share width, depth, heads, FFN, updates and tokens per update. The budget
# comes from the environment (defaults = the README's CPU quick start):
#   LAYERS=2 WIDTH=128 HEADS=4 FFN=512 SEGMENT=64 STREAMS=16 MAX_UPDATE=600 LR=0.002
#   WARMUP=100 NUM_BASIS=64 SEED=1; THREADS (torch CPU threads via OMP_NUM_THREADS, printed; default 1 on a CPU)
# transformer_lm and fastformer_lm see the same tokens per update as STREAMS/2 blocks of 2*SEGMENT
# tokens (its attention span equals the ∞-former's segment + short-term memory).
# If SAVE_DIR already holds checkpoint_last.pt, fairseq resumes from it (note: fairseq
# then runs one more update past MAX_UPDATE and saves again). Extra options go to fairseq-train last.
# ARMS_JOB=sorting takes the arms and budget of the registry's job sorting (scripts/sorting.sh) instead.
set -euo pipefail
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -lt 3 ]; then usage >&2; exit 2; fi
ARM=$1 DATA=$2 SAVE=$3; shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$DATA/dict.txt" ]; then
  echo "train.sh: error: $DATA/dict.txt not found; prepare data with data-prep/prepare-lm.sh first" >&2; exit 2
fi
DEVICE=(--cpu)
if python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then DEVICE=(); fi
. "$ROOT/scripts/threads.sh"
set_threads train.sh "$([ ${#DEVICE[@]} -gt 0 ] && echo cpu || echo cuda)"
# task, arch, criterion and flags of the arm, from the budget variables (fairseq-longmem arms, job lm or $ARMS_JOB)
. "$ROOT/scripts/arms.sh"
arm_args ARGS train-args "${ARMS_JOB:-lm}" "$ARM" --prog train.sh --root "$ROOT" --save-dir "$SAVE" "${DEVICE[@]}"
# stdout and stderr without fairseq's setup messages and the libraries' warnings, the error line last
# (scripts/log_filter.py; QUIET=0 shows everything); the process becomes fairseq-train (same pid and status)
exec python3 "$ROOT/scripts/log_filter.py" --exec fairseq-train "$DATA" "${ARGS[@]}" "$@"
