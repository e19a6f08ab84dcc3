#!/usr/bin/env bash
# Test perplexity of a trained arm with fairseq-eval-lm.
#
#   bash scripts/evaluate.sh ARM DATA_BIN CHECKPOINT [extra fairseq-eval-lm options...]
#
# infinite_former / memory_off: task streaming_lm, STREAMS (default 16) test streams read
#   in order with the memory carried through the whole stream (unbounded context).
# transformer_lm: task language_modeling, blocks of 2*SEGMENT tokens scored with
#   --context-window SEGMENT (every scored token sees at least SEGMENT tokens of context).
# fastformer_lm: the same as transformer_lm, with the plugin loaded.
# SEGMENT and STREAMS as in scripts/train.sh; THREADS: torch CPU threads (OMP_NUM_THREADS), default 1 on a CPU.
# Prints fairseq's "Loss (base 2): ..., Perplexity: ..." line last.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0; fi
if [ $# -lt 3 ]; then echo "usage: bash scripts/evaluate.sh ARM DATA_BIN CHECKPOINT [fairseq-eval-lm options]" >&2; exit 2; fi
ARM=$1 DATA=$2 CKPT=$3; shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$CKPT" ] || { echo "evaluate.sh: error: checkpoint $CKPT not found; train first (scripts/train.sh)" >&2; exit 2; }
DEVICE=(--cpu)
if python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then DEVICE=(); fi
. "$ROOT/scripts/threads.sh"
set_threads evaluate.sh "$([ ${#DEVICE[@]} -gt 0 ] && echo cpu || echo cuda)"
# task and flags of the arm, from SEGMENT and STREAMS (fairseq-longmem arms, job lm)
. "$ROOT/scripts/arms.sh"
arm_args ARGS eval-args lm "$ARM" --prog evaluate.sh --root "$ROOT" --checkpoint "$CKPT" "${DEVICE[@]}"
# stdout and stderr without fairseq's setup messages and the libraries' warnings, the error line last
# (scripts/log_filter.py; QUIET=0 shows everything); the process becomes fairseq-eval-lm (same pid and status)
exec python3 "$ROOT/scripts/log_filter.py" --exec fairseq-eval-lm "$DATA" "${ARGS[@]}" "$@"
