#!/usr/bin/env bash
# Train one arm of the language-modelling comparison with fairseq-train.
#
#   bash scripts/train.sh ARM DATA_BIN SAVE_DIR [extra fairseq-train options...]
#
# ARM is one of (fairseq-longmem arms list lm)
#   infinite_former            ∞-former (short-term memory + continuous long-term memory), task streaming_lm
#   memory_off                 the same model with --no-long-term-memory (Transformer-XL-style twin)
#   infinite_former_evicted    the ∞-former with --ltm-input evicted (the paper's variant)
#   infinite_former_no_sticky  the ∞-former without sticky memories
#   memory_off_matched         memory_off with the FFN widened to the ∞-former's parameter count
#   compressive                the Compressive Transformer (compressive_transformer_lm), N slots per layer
#   transformer_lm             fairseq's own transformer_lm, stock language_modeling task
#   fastformer_lm              Fastformer additive attention (plugin), stock language_modeling task
# All arms share width, depth, heads, FFN, updates and tokens per update. The budget
# comes from the environment (defaults = the README's CPU quick start):
#   LAYERS=2 WIDTH=128 HEADS=4 FFN=512 SEGMENT=64 STREAMS=16 MAX_UPDATE=600 LR=0.002
#   WARMUP=100 NUM_BASIS=64 SEED=1; THREADS (torch CPU threads via OMP_NUM_THREADS, printed; default 1 on a CPU)
# transformer_lm and fastformer_lm see the same tokens per update as STREAMS/2 blocks of 2*SEGMENT
# tokens (its attention span equals the ∞-former's segment + short-term memory).
# If SAVE_DIR already holds checkpoint_last.pt, fairseq resumes from it; one that has done MAX_UPDATE
# updates is left as it is (the run says so; raise MAX_UPDATE to train on). Extra options go to
# fairseq-train last.
# fairseq-train runs in one process with the plugin (fairseq-longmem arms train lm ARM ...; QUIET=0
# shows fairseq's setup messages and the libraries' warnings, hidden otherwise).
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -lt 3 ]; then usage >&2; exit 2; fi
ARM=$1 DATA=$2 SAVE=$3; shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$DATA/dict.txt" ]; then
  echo "train.sh: error: $DATA/dict.txt not found; prepare data with data-prep/prepare-lm.sh first" >&2; exit 2
fi
. "$ROOT/scripts/threads.sh"
set_threads train.sh
# the arm's command line from the registry and the budget variables; fairseq-train in this process
exec fairseq-longmem arms train --prog train.sh lm "$ARM" "$DATA" "$SAVE" "$@"
