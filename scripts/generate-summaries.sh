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
#   decoding.txt     the decoding options in one line (what score_summaries.py --decoding records)
# Decoding options come from the environment (defaults in brackets):
#   BEAM [4]  LENPEN [*]  MIN_LEN [*]  MAX_LEN_A [0]  MAX_LEN_B [*]  NO_REPEAT_NGRAM [3]  GEN_BATCH [4]
#   THREADS [1 on a CPU] (torch CPU threads, via OMP_NUM_THREADS)
# i.e. fairseq-generate --beam --lenpen --min-len --max-len-a --max-len-b --no-repeat-ngram-size
# --batch-size --post-process sentencepiece (lengths in sentencepiece tokens; the max length is
# also capped by the model's --max-target-positions). [*]: from the lengths of the prepared
# TRAINING targets in DATA_DIR/stats.json (scripts/decoding_lengths.py): MIN_LEN = median/2,
# MAX_LEN_B = 1.1 x p90, LENPEN 2.0 if the median is 64 pieces or more, else 1.0; printed before
# decoding. Without stats.json: 80, 300 and 2.0, the values for ACLSum abstracts (test split:
# median 172, p90 281, max 423 pieces; beam/lenpen/no-repeat as fairseq's BART CNN-DM recipe). The task options that decide which
# source tokens the model sees (--source-lang/--target-lang, --max-source-positions,
# --max-target-positions, --truncate-source) are read from the checkpoint, so generation cuts
# sources exactly as training did. No example is skipped: a missing hypothesis is an error.
# fairseq-generate runs through scripts/summarization_generate.py, which (1) lets torch's safe
# loader read fairseq's own `transformer` checkpoints (they hold an argparse.Namespace: exactly
# that class is allowlisted) and (2) makes --no-repeat-ngram-size work on CPU (fairseq issues
# #4709/#5206: its CPU n-gram blocker looks at padding instead of the hypothesis).
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
# (DATA_DIR/stats.json, scripts/decoding_lengths.py; see --help)
LENGTHS=$(python3 "$ROOT/scripts/decoding_lengths.py" "$DATA_DIR" --prog "$PROG") || exit $?
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
REF=""
if [ -n "$RAW" ]; then
  [ -f "$RAW/$SPLIT.target" ] || die "$RAW/$SPLIT.target not found"
  REF=$RAW/$SPLIT.target
fi
if [ -e "$OUT_DIR/hyp.txt" ] && [ "$FORCE" = 0 ]; then die "$OUT_DIR/hyp.txt exists (use --force to overwrite)"; fi
# the checkpoint's task options: how sources were cut in training
TASK_ARGS=$(python - "$CKPT" <<'EOF'
import argparse, sys
import torch
torch.serialization.add_safe_globals([argparse.Namespace])  # fairseq's legacy `transformer` config, see --help
try:
    state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
except Exception as err:  # truncated, corrupt, not a checkpoint
    what = (str(err).strip().splitlines() or [type(err).__name__])[0][:120] or type(err).__name__
    sys.exit(f"generate-summaries.sh: error: cannot read checkpoint {sys.argv[1]}: the file is truncated "
             f"or corrupt ({what}); it was left as it is; pass another checkpoint (e.g. checkpoint_best.pt)")
cfg = state.get("cfg") or {}
task = cfg.get("task") or {}
if task.get("_name") != "translation":
    sys.exit(f"generate-summaries.sh: error: {sys.argv[1]} was trained with task {task.get('_name')!r}, "
             "not translation (use a checkpoint from scripts/train-summarizer.sh)")
args = ["--source-lang", task["source_lang"], "--target-lang", task["target_lang"],
        "--max-source-positions", str(task["max_source_positions"]),
        "--max-target-positions", str(task["max_target_positions"])]
if task.get("truncate_source"):
    args.append("--truncate-source")
print(" ".join(args))
EOF
) || exit 2
# shellcheck disable=SC2206  # values are plain words/numbers
TASK_ARGS=($TASK_ARGS)
mkdir -p "$OUT_DIR"
DEVICE=(--cpu)
if python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then DEVICE=(); fi
. "$ROOT/scripts/threads.sh"
set_threads "$PROG" "$([ ${#DEVICE[@]} -gt 0 ] && echo cpu || echo cuda)"
DECODING="beam=$BEAM lenpen=$LENPEN min_len=$MIN_LEN max_len_a=$MAX_LEN_A max_len_b=$MAX_LEN_B no_repeat_ngram_size=$NO_REPEAT_NGRAM${*:+ extra: $*}"
echo "$PROG: $CKPT on $SPLIT ($DECODING; ${TASK_ARGS[*]})"
echo "$PROG: lengths $LENGTHS_FROM"
rm -f "$OUT_DIR/hyp.txt"
# fairseq-generate with the two fixes of scripts/summarization_generate.py (see --help)
if ! python "$ROOT/scripts/summarization_generate.py" "$BIN" --user-dir "$ROOT/fairseq_plugins" --task translation "${TASK_ARGS[@]}" \
    --path "$CKPT" --gen-subset "$SPLIT" --beam "$BEAM" --lenpen "$LENPEN" --min-len "$MIN_LEN" \
    --max-len-a "$MAX_LEN_A" --max-len-b "$MAX_LEN_B" --no-repeat-ngram-size "$NO_REPEAT_NGRAM" \
    --batch-size "$GEN_BATCH" --required-batch-size-multiple 1 --post-process sentencepiece \
    "${DEVICE[@]}" "$@" > "$OUT_DIR/generate.out" 2> "$OUT_DIR/generate.log"; then
  grep -m1 "error" "$OUT_DIR/generate.log" >&2 || tail -n 3 "$OUT_DIR/generate.log" >&2
  die "fairseq-generate failed; see $OUT_DIR/generate.log"
fi
echo "$DECODING" > "$OUT_DIR/decoding.txt"
# D-<id>\t<score>\t<text>, by id; every example 0..N-1 exactly once
N=$(python -c "from fairseq.data.indexed_dataset import MMapIndexedDataset as M; import sys
d = M(sys.argv[1]); print(len(d))" "$BIN/$SPLIT.source-target.source" 2>>"$OUT_DIR/generate.log")
python - "$OUT_DIR/generate.out" "$N" "$OUT_DIR/hyp.txt" <<'EOF' || exit 2
import os, sys
path, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
hyps = {}
with open(path, encoding="utf-8") as f:
    for line in f:
        if line.startswith("D-"):
            parts = line.rstrip("\n").split("\t", 2)
            i, text = int(parts[0][2:]), (parts[2] if len(parts) > 2 else "")
            if i in hyps:
                sys.exit(f"generate-summaries.sh: error: example {i} has two hypotheses in {path} (use --nbest 1)")
            hyps[i] = text
missing = [i for i in range(n) if i not in hyps]
if missing or len(hyps) != n:
    sys.exit(f"generate-summaries.sh: error: {len(missing)} of {n} examples have no hypothesis in {path} "
             f"(first ids {missing[:5]})")
with open(out + ".tmp", "w", encoding="utf-8", newline="\n") as f:
    for i in range(n):
        f.write(hyps[i].replace("\n", " ") + "\n")
os.replace(out + ".tmp", out)
EOF
if [ -n "$REF" ]; then
  R=$(python -c "import sys; t = open(sys.argv[1], encoding='utf-8').read(); print(t.count(chr(10)) + (not t.endswith(chr(10)) and t != ''))" "$REF")
  [ "$R" = "$N" ] || die "$REF has $R lines but $BIN holds $N $SPLIT examples (data folder out of sync?)"
  cp "$REF" "$OUT_DIR/ref.txt"
fi
echo "$PROG: wrote $N summaries to $OUT_DIR/hyp.txt"
