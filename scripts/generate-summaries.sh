#!/usr/bin/env bash
# Generate summaries with fairseq-generate and write them, detokenized, in the data's order.
#
#   bash scripts/generate-summaries.sh CKPT DATA_DIR SPLIT OUT_DIR [--force] [extra fairseq-generate options...]
#
# CKPT      a checkpoint from scripts/train-summarizer.sh (any arm)
# DATA_DIR  the folder written by data-prep/prepare-summarization.sh (holding bin/ and raw/), or
#           its bin/ folder alone (then no reference is copied)
# SPLIT     valid or test
# OUT_DIR   receives
#   hyp.txt          one summary per line, line i = example i of raw/SPLIT.source (the D- lines of
#                    fairseq-generate, ordered by id; sentencepiece removed by --post-process
#                    sentencepiece, which is the detokenization: the data is untokenized text)
#   ref.txt          a copy of raw/SPLIT.target (when DATA_DIR has raw/)
#   generate.out     fairseq-generate's full output (S-/T-/H-/D-/P- lines), generate.log its log
#   decoding.txt     the decoding options in one line (what `fairseq-longmem summarize score
#                    --decoding` records)
# Decoding options come from the environment (defaults in brackets):
#   BEAM [4]  LENPEN [*]  MIN_LEN [*]  MAX_LEN_A [0]  MAX_LEN_B [*]  NO_REPEAT_NGRAM [3]  GEN_BATCH [4]
#   THREADS [1 on a CPU] (torch CPU threads, via OMP_NUM_THREADS)
# i.e. fairseq-generate --beam --lenpen --min-len --max-len-a --max-len-b --no-repeat-ngram-size
# --batch-size --post-process sentencepiece (lengths in sentencepiece tokens; the max length is
# also capped by the model's --max-target-positions). [*]: from the lengths of the prepared
# TRAINING targets in DATA_DIR/stats.json (`fairseq-longmem summarize decoding-lengths`):
# MIN_LEN = median/2, MAX_LEN_B = 1.1 x p90, LENPEN 2.0 if the median is 64 pieces or more, else
# 1.0 (on ACLSum 85, 297, 2.0); printed before decoding. Without stats.json: 80, 300 and 2.0, the
# values for ACLSum abstracts (test split: median 172, p90 281, max 423 pieces; beam/lenpen/
# no-repeat as fairseq's BART CNN-DM recipe). The task options that decide which source tokens
# the model sees (--source-lang/--target-lang, --max-source-positions,
# --max-target-positions, --truncate-source) are read from the checkpoint, so generation cuts
# sources exactly as training did (`fairseq-longmem summarize task-args`). No example is skipped:
# a missing hypothesis is an error (`fairseq-longmem summarize hypotheses`). fairseq-generate runs
# as `fairseq-longmem generate` (fairseq's own tool with the plugin), whose workarounds
# (fairseq_plugins/compat) let torch's safe loader read fairseq's own `transformer` checkpoints
# (exactly argparse.Namespace is allow-listed) and make --no-repeat-ngram-size work on a CPU
# (fairseq's CPU n-gram blocker looks at padding instead of the hypothesis).
# Extra options go to fairseq-generate last (they override the above). OUT_DIR/hyp.txt is not
# overwritten without --force.
set -euo pipefail
PROG=generate-summaries.sh
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "$PROG: error: $*" >&2; exit 2; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -lt 4 ]; then usage >&2; exit 2; fi
CKPT=$1 DATA_DIR=$2 SPLIT=$3 OUT_DIR=$4; shift 4
FORCE=0
if [ "${1:-}" = "--force" ]; then FORCE=1; shift; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# MIN_LEN, MAX_LEN_B, LENPEN: the environment's, else derived from the training targets' lengths
# (DATA_DIR/stats.json; see --help)
LENGTHS=$(fairseq-longmem summarize decoding-lengths "$DATA_DIR" --prog "$PROG") || exit $?
while IFS= read -r kv; do declare "${kv?}"; done <<< "$LENGTHS"
BEAM=${BEAM:-4} MAX_LEN_A=${MAX_LEN_A:-0} NO_REPEAT_NGRAM=${NO_REPEAT_NGRAM:-3} GEN_BATCH=${GEN_BATCH:-4}
for v in BEAM MIN_LEN MAX_LEN_B NO_REPEAT_NGRAM GEN_BATCH; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, not '${!v}'"
done
for v in LENPEN MAX_LEN_A; do
  [[ "${!v}" =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || die "$v must be a number, not '${!v}'"
done
[ -f "$CKPT" ] || die "checkpoint $CKPT not found"
if [ -f "$DATA_DIR/dict.source.txt" ]; then BIN=$DATA_DIR RAW=""
elif [ -f "$DATA_DIR/bin/dict.source.txt" ]; then BIN=$DATA_DIR/bin RAW=$DATA_DIR/raw
else die "$DATA_DIR holds neither bin/dict.source.txt nor dict.source.txt (output of data-prep/prepare-summarization.sh)"
fi
[ -f "$BIN/$SPLIT.source-target.source.idx" ] || die "split '$SPLIT' not found in $BIN ($SPLIT.source-target.source.idx)"
REF=() # the reference (--ref FILE) when DATA_DIR has raw/
if [ -n "$RAW" ]; then
  [ -f "$RAW/$SPLIT.target" ] || die "$RAW/$SPLIT.target not found"
  REF=(--ref "$RAW/$SPLIT.target")
fi
if [ -e "$OUT_DIR/hyp.txt" ] && [ "$FORCE" = 0 ]; then die "$OUT_DIR/hyp.txt exists (use --force to overwrite)"; fi
# the checkpoint's task options: how sources were cut in training, one per line
TASK_LINES=$(fairseq-longmem summarize task-args "$CKPT" --prog "$PROG") || exit $?
mapfile -t TASK_ARGS <<< "$TASK_LINES"
mkdir -p "$OUT_DIR"
. "$ROOT/scripts/threads.sh"
DEVICE=(--cpu)
if torch_cuda; then DEVICE=(); fi
set_threads "$PROG" "$([ ${#DEVICE[@]} -gt 0 ] && echo cpu || echo cuda)"
shell_word() {  # ARG as it would be typed in a shell: bare, in double quotes, or bash-quoted
  if [[ $1 =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then printf '%s' "$1"
  elif [[ $1 != *[\"\$\`\\]* ]]; then printf '"%s"' "$1"
  else printf '%q' "$1"; fi
}
EXTRA=""  # the extra options, quoted so that decoding.txt can be pasted into a shell
for arg in "$@"; do EXTRA+="${EXTRA:+ }$(shell_word "$arg")"; done
DECODING="beam=$BEAM lenpen=$LENPEN min_len=$MIN_LEN max_len_a=$MAX_LEN_A max_len_b=$MAX_LEN_B no_repeat_ngram_size=$NO_REPEAT_NGRAM${EXTRA:+ extra: $EXTRA}"
echo "$PROG: $CKPT on $SPLIT ($DECODING; ${TASK_ARGS[*]})"
echo "$PROG: lengths $LENGTHS_FROM"
rm -f "$OUT_DIR/hyp.txt"
# fairseq-generate with the plugin and its workarounds (see --help)
if ! fairseq-longmem generate "$BIN" --task translation "${TASK_ARGS[@]}" \
    --path "$CKPT" --gen-subset "$SPLIT" --beam "$BEAM" --lenpen "$LENPEN" --min-len "$MIN_LEN" \
    --max-len-a "$MAX_LEN_A" --max-len-b "$MAX_LEN_B" --no-repeat-ngram-size "$NO_REPEAT_NGRAM" \
    --batch-size "$GEN_BATCH" --required-batch-size-multiple 1 --post-process sentencepiece \
    "${DEVICE[@]}" "$@" > "$OUT_DIR/generate.out" 2> "$OUT_DIR/generate.log"; then
  grep -m1 "error" "$OUT_DIR/generate.log" >&2 || tail -n 3 "$OUT_DIR/generate.log" >&2
  die "fairseq-generate failed; see $OUT_DIR/generate.log"
fi
echo "$DECODING" > "$OUT_DIR/decoding.txt"
# D-<id>\t<score>\t<text>, by id; every example exactly once; the reference has one line per example
fairseq-longmem summarize hypotheses "$OUT_DIR/generate.out" --data "$BIN" --split "$SPLIT" --out "$OUT_DIR/hyp.txt" \
  "${REF[@]}" --prog "$PROG" || exit $?
if [ ${#REF[@]} -gt 0 ]; then cp "${REF[1]}" "$OUT_DIR/ref.txt"; fi
