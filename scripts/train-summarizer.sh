#!/usr/bin/env bash
# Train one arm of the summarization comparison (document -> summary) with fairseq-train.
#
#   bash scripts/train-summarizer.sh ARM DATA_BIN SAVE_DIR [extra fairseq-train options...]
#
# DATA_BIN is OUT/bin of data-prep/prepare-summarization.sh (translation task, --source-lang
# source --target-lang target, one joined dictionary). ARM is one of
#   infinite_former  ∞-former summarizer (plugin): reads the WHOLE document chunk by chunk into
#                    continuous long-term memory; --max-source-positions INF_MAX_SOURCE, no truncation
#   fastformer       Fastformer encoder-decoder (plugin, linear-cost additive attention): source cut
#                    to FASTFORMER_MAX_SOURCE=4096 tokens with --truncate-source (4x the transformer's
#                    window at linear cost; on ACLSum it keeps ~60% of the source tokens, the
#                    transformer's 1024 ~15%; its cost per update measured ~2x the transformer's)
#   transformer      fairseq's own transformer (pre-norm): source cut to TRANSFORMER_MAX_SOURCE=1024
#                    tokens with --truncate-source --max-source-positions 1024
# Truncation keeps the first N-1 pieces + </s>; how many sources are cut is printed per split
# before training (fairseq-longmem summarize check-lengths). A target longer than MAX_TARGET, or an
# uncut source longer than the limit, stops here with an error: nothing is dropped silently.
# All arms share encoder/decoder depth, width, heads, FFN, updates and documents per update
# (so the same summary tokens per update); the budget comes from the environment (CPU defaults):
#   LAYERS=2 WIDTH=128 HEADS=4 FFN=512 DOCS=2 MAX_UPDATE=800 LR=0.001 WARMUP=100 DROPOUT=0.1 SEED=1
#   MAX_TARGET=1280 TRANSFORMER_MAX_SOURCE=1024 FASTFORMER_MAX_SOURCE=4096 INF_MAX_SOURCE=131072
#   CHUNK=256 LEAD_WINDOW=256 NUM_BASIS=256 (∞-former: encoder chunk length C, ordinary
#   attention window W over the first encoder states, basis functions N of the memory);
#   INF_OPTIONS="" (more ∞-former model options, e.g. "--memory-read location --read-gate"; docs/summarization.md);
#   THREADS: torch CPU threads (OMP_NUM_THREADS, printed), default 1 on a CPU
# With the defaults the three arms together train in ~20 min on 2 idle CPU cores on ACLSum
# (measured per update, DOCS=2: transformer 0.20 s, fastformer 0.38 s, infinite_former 0.91 s,
# i.e. 800 updates = 3 + 5 + 12 min, plus start-up and one validation per arm).
# Loss: cross-entropy (the ∞-former: + λ_KL·KL, criterion infinite_former_kl). Validation runs once,
# at the end. If SAVE_DIR already holds checkpoint_last.pt, fairseq resumes from it (every arm, fairseq's
# own transformer too: run again with a larger MAX_UPDATE to train on); one that has done MAX_UPDATE
# updates is left as it is, and the run says so. Extra options go to fairseq-train
# last (they override the above). fairseq-train runs in one process with the plugin (fairseq-longmem arms
# train summarization ARM ...; QUIET=0 shows fairseq's setup messages and the libraries' warnings).
set -euo pipefail
PROG=train-summarizer.sh
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -lt 3 ]; then usage >&2; exit 2; fi
ARM=$1 DATA=$2 SAVE=$3; shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# the budget variables (checked) and the arm's length limits: fairseq-longmem arms, job summarization
BUDGET=$(fairseq-longmem arms budget summarization --prog "$PROG") || exit $?
while IFS= read -r kv; do declare "${kv?}"; done <<< "$BUDGET"
LENGTHS=$(fairseq-longmem arms lengths-args summarization "$ARM" --prog "$PROG") || exit $?
mapfile -t LENGTHS <<< "$LENGTHS"  # one option a line
if [ ! -f "$DATA/dict.source.txt" ] || [ ! -f "$DATA/dict.target.txt" ]; then
  echo "$PROG: error: $DATA/dict.source.txt not found; pass OUT/bin of data-prep/prepare-summarization.sh" >&2
  exit 2
fi
if ! cmp -s "$DATA/dict.source.txt" "$DATA/dict.target.txt"; then
  echo "$PROG: error: $DATA has different source and target dictionaries (needs fairseq-preprocess --joined-dictionary)" >&2
  exit 2
fi
# what truncation does to this data, and no example too long for the model (see --help)
fairseq-longmem summarize check-lengths "$DATA" "${LENGTHS[@]}" --prog "$PROG ($ARM)"
. "$ROOT/scripts/threads.sh"
set_threads "$PROG"
echo "$PROG: $ARM, ${LAYERS}+${LAYERS} layers, width $WIDTH, $HEADS heads, FFN $FFN, $DOCS documents/update, $MAX_UPDATE updates"
# the arm's command line from the registry and the budget variables; fairseq-train in this process
exec fairseq-longmem arms train --prog "$PROG" summarization "$ARM" "$DATA" "$SAVE" "$@"
