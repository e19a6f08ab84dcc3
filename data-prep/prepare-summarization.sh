#!/usr/bin/env bash
# prepare-summarization.sh - summarization data for fairseq: (document, summary) pairs ->
# normalised text -> one joined sentencepiece model -> fairseq-preprocess binaries for the
# `translation` task (source = document, target = summary).
#
# Usage:
#   bash data-prep/prepare-summarization.sh [--corpus aclsum|source-target|jsonl] [--input PATH]
#        [--out DIR] [--vocab-size N | --spm-model FILE] [--document-field F] [--summary-field F]
#        [--drop-empty] [--workers N] [--force]
#
# Options (defaults in brackets):
#   --corpus aclsum         [default] ACLSum (PyPI aclsum==0.1.2, 250 ACL papers, the package's
#                           own split train 100 / val 50 / test 100): document = the paper body
#                           (S2ORC pdf_parse.body_text paragraphs, no headings, captions, back
#                           matter or references), summary = the abstract. Without --input the
#                           wheel is fetched with `pip download` into DIR/download/ (kept as a
#                           cache) and checked against the pinned sha256 c75ffc48d3eabc5f37c68e
#                           a087943780a85950087957759e89746f21111f2213 (ACLSUM_SHA256 in
#                           summarization_documents.py). With --input
#                           PATH, PATH holds either the wheel aclsum-0.1.2-py3-none-any.whl
#                           (checksum-verified, unpacked into DIR/download/) or the unpacked
#                           aclsum-0.1.2/aclsum/dataset/ (or aclsum/dataset/) with
#                           {train,val,test}.jsonl and paper_jsons/ (used as is, not verified).
#                           A previous run's DIR/download/ qualifies.
#   --corpus source-target  --input DIR holds line-aligned {train,valid,test}.source and .target
#                           (CNN/DailyMail as in fairseq's BART recipe; valid.* may be val.*).
#   --corpus jsonl          --input is a folder with {train,valid,test}.jsonl (valid may be
#                           val.jsonl), or ONE .jsonl file that is split by hash of the document
#                           (md5 bucket < 5 test, < 10 valid, else train). One JSON object per line.
#   --document-field F      jsonl: dotted path of the document [document]; a.b.0 indexes a
#                           list; a list of strings is joined with spaces
#   --summary-field F       jsonl: dotted path of the summary [summary]
#   --input PATH            see above
#   --out DIR               output folder [data/aclsum]
#   --vocab-size N          joined sentencepiece vocabulary, trained on train source + target
#                           [4000 for aclsum: its 100 training papers (~0.46 M words) leave only
#                           ~300 of 4000 pieces rarer than 5 occurrences, ~1000 of 8000; 8000
#                           for the other corpora]
#   --spm-model FILE        reuse this sentencepiece model instead of training one
#   --drop-empty            drop examples whose document or summary is empty (the number is
#                           reported); without it an empty one is an error naming file and line
#   --workers N             threads for sentencepiece encoding and fairseq-preprocess [2]
#                           (sentencepiece TRAINING always uses 2 threads so output is independent of N)
#   --force                 rebuild even if DIR holds output made with other options (only this
#                           script's own files in DIR are replaced); a run that failed or was
#                           interrupted is rebuilt without it (its DIR/.unfinished marker says so)
#   -h, --help              print this help
#
# Text: every document and summary becomes ONE line: whitespace runs (newlines included)
# collapsed to one space, control characters dropped, Unicode normalised with sentencepiece's
# nmt_nfkc rule (NFKC: "ﬁ" -> "fi", full-width -> ASCII), so that decoded model output and
# raw/*.target are comparable character for character. Nothing is truncated: documents are kept
# whole (fairseq's --truncate-source / --max-source-positions are the model-side limits; the
# statistics say how many sources exceed 1024 / 4096 / 16384 positions).
#
# Output in DIR:
#   raw/{train,valid,test}.source, .target   one example per line (UTF-8), line-aligned
#   raw/{train,valid,test}.ids               the example's id (ACLSum paper id, jsonl "id"
#                                            field, else file:line)
#   spm/spm.model, spm/spm.vocab             joined sentencepiece unigram model (fixed seed)
#   spm/dict.txt                             fairseq dictionary = the sentencepiece pieces
#                                            minus <unk> and control pieces (<s>, </s>)
#   tok/{train,valid,test}.source, .target   sentencepiece pieces, space-separated
#   bin/                                     fairseq-preprocess --joined-dictionary output:
#       fairseq-train DIR/bin --task translation --source-lang source --target-lang target
#   stats.json                               per split: examples, source/target length in
#                                            sentencepiece tokens and words (min, median, mean,
#                                            p90, max), sources longer than 1024/4096/16384
#   prepare.json                             manifest (options, checksums, counts); written last
#   logs/                                    sentencepiece and fairseq-preprocess logs
# Re-running with the same options on a complete DIR prints "up to date" and changes nothing.
# Bad input (missing files, unequal line counts, empty examples, invalid JSON, a missing
# field, a missing --spm-model, other options on an existing DIR) is one error line, exit 2.
#
# Needs: bash, a Python with sentencepiece and numpy (python next to fairseq-preprocess, or
# $PYTHON), fairseq-preprocess on PATH (or $FAIRSEQ_PREPROCESS); pip (that Python's) only for
# the default ACLSum download.
set -euo pipefail

PROG=prepare-summarization.sh
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the pinned ACLSum wheel (name and sha256) lives in readers/aclsum.py (re-exported by
# summarization_documents.py, which --help names)

usage() {
    sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed -E 's/^# ?//'
}
die() {
    echo "$PROG: error: $*" >&2
    exit 2
}

# ---- arguments
CORPUS=aclsum
INPUT=""
OUT=data/aclsum
VOCAB=""
VOCAB_SET=0
SPM_MODEL=""
DOC_FIELD=document
SUM_FIELD=summary
FIELDS_SET=0
DROP_EMPTY=0
WORKERS=2
FORCE=0
need_value() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --corpus) need_value "$1" $#; CORPUS="$2"; shift 2 ;;
        --corpus=*) CORPUS="${1#*=}"; shift ;;
        --input) need_value "$1" $#; INPUT="$2"; shift 2 ;;
        --input=*) INPUT="${1#*=}"; shift ;;
        --out) need_value "$1" $#; OUT="$2"; shift 2 ;;
        --out=*) OUT="${1#*=}"; shift ;;
        --vocab-size) need_value "$1" $#; VOCAB="$2"; VOCAB_SET=1; shift 2 ;;
        --vocab-size=*) VOCAB="${1#*=}"; VOCAB_SET=1; shift ;;
        --spm-model) need_value "$1" $#; SPM_MODEL="$2"; shift 2 ;;
        --spm-model=*) SPM_MODEL="${1#*=}"; shift ;;
        --document-field) need_value "$1" $#; DOC_FIELD="$2"; FIELDS_SET=1; shift 2 ;;
        --document-field=*) DOC_FIELD="${1#*=}"; FIELDS_SET=1; shift ;;
        --summary-field) need_value "$1" $#; SUM_FIELD="$2"; FIELDS_SET=1; shift 2 ;;
        --summary-field=*) SUM_FIELD="${1#*=}"; FIELDS_SET=1; shift ;;
        --drop-empty) DROP_EMPTY=1; shift ;;
        --workers) need_value "$1" $#; WORKERS="$2"; shift 2 ;;
        --workers=*) WORKERS="${1#*=}"; shift ;;
        --force) FORCE=1; shift ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case "$CORPUS" in aclsum|source-target|jsonl) ;; *) die "--corpus must be aclsum, source-target or jsonl, not '$CORPUS'" ;; esac
if [ "$VOCAB_SET" = 0 ]; then
    if [ "$CORPUS" = aclsum ]; then VOCAB=4000; else VOCAB=8000; fi
fi
[[ "$VOCAB" =~ ^[0-9]+$ ]] && [ "$VOCAB" -ge 10 ] || die "--vocab-size must be an integer >= 10, not '$VOCAB'"
[[ "$WORKERS" =~ ^[0-9]+$ ]] && [ "$WORKERS" -ge 1 ] || die "--workers must be a positive integer, not '$WORKERS'"
[ -n "$OUT" ] || die "--out must not be empty"
[ -n "$SPM_MODEL" ] && [ "$VOCAB_SET" = 1 ] && die "--vocab-size and --spm-model exclude each other (a reused model has its own vocabulary)"
[ "$FIELDS_SET" = 1 ] && [ "$CORPUS" != jsonl ] && die "--document-field / --summary-field apply to --corpus jsonl only"
[ -n "$DOC_FIELD" ] && [ -n "$SUM_FIELD" ] || die "--document-field and --summary-field must not be empty"
if [ "$CORPUS" != aclsum ] && [ -z "$INPUT" ]; then
    die "--corpus $CORPUS needs --input PATH (see --help)"
fi
if [ -n "$INPUT" ]; then
    [ -e "$INPUT" ] || die "--input $INPUT does not exist"
    if [ "$CORPUS" != jsonl ]; then [ -d "$INPUT" ] || die "--input $INPUT is not a directory"; fi
fi
[ -e "$OUT" ] && [ ! -d "$OUT" ] && die "--out $OUT exists and is not a directory"

# ---- tools
FAIRSEQ_PREPROCESS="${FAIRSEQ_PREPROCESS:-fairseq-preprocess}"
command -v "$FAIRSEQ_PREPROCESS" >/dev/null 2>&1 \
    || die "fairseq-preprocess not found on PATH (activate the environment with fairseq, or set FAIRSEQ_PREPROCESS)"
if [ -z "${PYTHON:-}" ]; then
    fp_dir="$(dirname "$(command -v "$FAIRSEQ_PREPROCESS")")"
    if [ -x "$fp_dir/python" ]; then PYTHON="$fp_dir/python"; else PYTHON=python3; fi
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "python not found ($PYTHON); set PYTHON"
DOCS=("$PYTHON" "$HERE/summarization_documents.py")
SPM=("$PYTHON" "$HERE/spm.py")
export SPM_PROG="$PROG"

# shellcheck source=data-prep/stages.sh
source "$(dirname "${BASH_SOURCE[0]}")/stages.sh"

# ---- what the input is (recorded in, and compared with, prepare.json); errors exit 2 here
INPUT_ARGS=()
[ -n "$INPUT" ] && INPUT_ARGS=(--input "$INPUT")
IDENTITY="$("${DOCS[@]}" identity --corpus "$CORPUS" "${INPUT_ARGS[@]}")" || exit 2
SPM_SHA=""
if [ -n "$SPM_MODEL" ]; then
    SPM_SHA="$("${DOCS[@]}" check-spm --model "$SPM_MODEL")" || exit 2
fi
OPTS=(--out "$OUT" --corpus "$CORPUS" --vocab-size "$VOCAB" --spm-model "$SPM_MODEL" --spm-sha256 "$SPM_SHA"
      --identity "$IDENTITY" --document-field "$DOC_FIELD" --summary-field "$SUM_FIELD")
[ "$DROP_EMPTY" = 1 ] && OPTS+=(--drop-empty)

# ---- up to date? different options? unfinished run?
state_rc=0
if [ "$FORCE" = 1 ]; then
    "${DOCS[@]}" state "${OPTS[@]}" --force || state_rc=$?
else
    "${DOCS[@]}" state "${OPTS[@]}" || state_rc=$?
fi
case "$state_rc" in
    0) ;;
    3) exit 0 ;;            # "up to date" already printed
    *) exit 2 ;;            # one-line reason already printed
esac

prepare_out_dir .pip-tmp
if [ -n "$SPM_MODEL" ]; then vocab_msg="sentencepiece model $SPM_MODEL"; else vocab_msg="vocab $VOCAB"; fi
echo "preparing $CORPUS -> $OUT ($vocab_msg, workers $WORKERS)"
T_ALL="$(now)"

# ---- 1. aclsum: fetch (cached) + verify + unpack
PACKAGES_JSON="{}"
CONVERT_IN="$INPUT"
if [ "$CORPUS" = aclsum ]; then
    stage_start fetch
    CONVERT_IN="$("${DOCS[@]}" fetch-aclsum --out "$OUT" "${INPUT_ARGS[@]}" --python "$PYTHON")" || exit 2
    PACKAGES_JSON="$("$PYTHON" -c 'import json, sys
sys.path.insert(0, sys.argv[1]); import summarization_documents as s
i = json.loads(sys.argv[2])
check = "sha256:" + s.ACLSUM_SHA256 if "unpacked" not in i["sources"] else "unpacked folder, not verified"
print(json.dumps({s.ACLSUM_SPEC: {"wheel": s.ACLSUM_WHEEL, "sha256": check, "dataset": sys.argv[3]}}))' \
        "$HERE" "$IDENTITY" "$CONVERT_IN")"
    stage_end
fi

# ---- 2. examples -> normalised text (into a scratch folder; old output is kept until it works)
stage_start convert
rm -rf "$OUT/.raw.tmp"
CONVERT_OPTS=(--document-field "$DOC_FIELD" --summary-field "$SUM_FIELD")
[ "$DROP_EMPTY" = 1 ] && CONVERT_OPTS+=(--drop-empty)
"${DOCS[@]}" convert --corpus "$CORPUS" --input "$CONVERT_IN" --out "$OUT/.raw.tmp" "${CONVERT_OPTS[@]}" \
    >"$OUT/.raw.tmp.log" 2>&1 \
    || { grep -m1 "^$PROG: error:" "$OUT/.raw.tmp.log" >&2 || tail -n1 "$OUT/.raw.tmp.log" >&2; exit 2; }
convert_msg="$(grep -v "^$PROG: note:" "$OUT/.raw.tmp.log" | tail -n1)"
grep "^$PROG: note:" "$OUT/.raw.tmp.log" >&2 || true
rm -f "$OUT/.raw.tmp.log"
# the new text is good: drop this script's previous output (manifest first) and move it in
rm -f "$OUT/prepare.json" "$OUT/stats.json"
rm -rf "$OUT/raw" "$OUT/spm" "$OUT/tok" "$OUT/bin" "$OUT/logs"
mv "$OUT/.raw.tmp" "$OUT/raw"
mkdir -p "$OUT/logs" "$OUT/spm" "$OUT/tok"
stage_end "$convert_msg"

# ---- 3. sentencepiece
if [ -n "$SPM_MODEL" ]; then
    stage_start spm-copy
    cp "$SPM_MODEL" "$OUT/spm/spm.model"
    stage_end "reused $SPM_MODEL"
else
    stage_start spm-train
    # whole documents are single lines: let sentencepiece train on lines of any length
    max_bytes="$(cat "$OUT/raw/train.source" "$OUT/raw/train.target" | LC_ALL=C awk '{ if (length($0) > m) m = length($0) } END { print m + 1 }')"
    [ "$max_bytes" -ge 16384 ] || max_bytes=16384
    run_logged "$OUT/logs/spm-train.log" "${SPM[@]}" train --input "$OUT/raw/train.source" "$OUT/raw/train.target" \
        --model-prefix "$OUT/spm/spm" --vocab-size "$VOCAB" --max-sentence-length "$max_bytes"
    stage_end
fi
stage_start spm-encode
for split in train valid test; do
    for side in source target; do
        run_logged "$OUT/logs/spm-encode.log" "${SPM[@]}" encode --model "$OUT/spm/spm.model" \
            --input "$OUT/raw/$split.$side" --output "$OUT/tok/$split.$side" --threads "$WORKERS"
    done
done
VOCAB_OUT=()
[ -n "$SPM_MODEL" ] && VOCAB_OUT=(--vocab-out "$OUT/spm/spm.vocab")
run_logged "$OUT/logs/make-dict.log" "${DOCS[@]}" spm-files --model "$OUT/spm/spm.model" "${VOCAB_OUT[@]}" \
    --dict-out "$OUT/spm/dict.txt" --counts "$OUT/tok/train.source" "$OUT/tok/train.target"
stage_end

# ---- 4. fairseq binaries
stage_start binarize
run_logged "$OUT/logs/preprocess.log" "$FAIRSEQ_PREPROCESS" --source-lang source --target-lang target \
    --trainpref "$OUT/tok/train" --validpref "$OUT/tok/valid" --testpref "$OUT/tok/test" \
    --joined-dictionary --srcdict "$OUT/spm/dict.txt" --destdir "$OUT/bin" --workers "$WORKERS"
unk="$(grep -o '\[[a-z]*\] [^ ]*/tok/[a-z]*\.[a-z]*: [0-9]* sents, [0-9]* tokens, [0-9.]*% replaced' "$OUT/logs/preprocess.log" \
    | sed -E 's/^\[([a-z]*)\] .*\/tok\/([a-z]*)\.[a-z]*: .* ([0-9.]*%) replaced/\2.\1 \3/' | paste -sd, - | sed 's/,/, /g' || true)"
stage_end "${unk:+<unk> replaced: $unk}"

# ---- 5. statistics + manifest + summary
TOOLS_JSON="$(tool_versions)"
TIMINGS+=(--timing "total=$(elapsed "$T_ALL")")
run_finish() { "${DOCS[@]}" finish "${OPTS[@]}" --workers "$WORKERS" --packages "$PACKAGES_JSON" --tools "$TOOLS_JSON" "${TIMINGS[@]}"; }
run_finish || exit 2
echo "total ${TIMINGS[-1]#total=}s"
