#!/usr/bin/env bash
# Test perplexity of a trained arm with fairseq-eval-lm.
#
#   bash scripts/evaluate.sh ARM DATA_BIN CHECKPOINT [extra fairseq-eval-lm options...]
#
# infinite_former / memory_off: task streaming_lm, STREAMS (default 16) test streams read
#   in order with the memory carried through the whole stream (unbounded context).
# transformer_lm: task language_modeling, blocks of 2*SEGMENT tokens scored with
#   --context-window SEGMENT (every scored token sees at least SEGMENT tokens of context).
# fastformer_lm: the same as transformer_lm (every arm runs with the plugin loaded).
# SEGMENT and STREAMS as in scripts/train.sh; THREADS: torch CPU threads (OMP_NUM_THREADS), default 1 on a CPU.
# Prints fairseq's "Loss (base 2): ..., Perplexity: ..." line last. fairseq-eval-lm runs in one process
# with the plugin (fairseq-longmem arms eval lm ARM ...; QUIET=0 shows fairseq's setup messages).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0; fi
if [ $# -lt 3 ]; then echo "usage: bash scripts/evaluate.sh ARM DATA_BIN CHECKPOINT [fairseq-eval-lm options]" >&2; exit 2; fi
ARM=$1 DATA=$2 CKPT=$3; shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$CKPT" ] || { echo "evaluate.sh: error: checkpoint $CKPT not found; train first (scripts/train.sh)" >&2; exit 2; }
. "$ROOT/scripts/threads.sh"
set_threads evaluate.sh
# the arm's command line from the registry, SEGMENT and STREAMS; fairseq-eval-lm in this process
exec fairseq-longmem arms eval --prog evaluate.sh lm "$ARM" "$DATA" "$CKPT" "$@"
