#!/usr/bin/env bash
# prepare-summarization.sh - summarization data for fairseq: (document, summary) pairs ->
# normalised text -> one joined sentencepiece model -> fairseq-preprocess binaries for the
# `translation` task (source = document, target = summary).
#
# Usage:
#   bash data-prep/prepare-summarization.sh [--corpus aclsum|source-target|jsonl|facts] [--input PATH]
#        [--out DIR] [--vocab-size N | --spm-model FILE] [--document-field F] [--summary-field F]
#        [--doc-tokens N] [--facts K] [--examples TRAIN,VALID,TEST] [--seed S] [--placement P]
#        [--drop-empty] [--workers N] [--force]
#
# Options (defaults in brackets):
#   --corpus aclsum         [default] ACLSum (PyPI aclsum==0.1.2, 250 ACL papers, the package's
#                           own split train 100 / val 50 / test 100): document = the paper body
#                           (S2ORC pdf_parse.body_text paragraphs, no headings, captions, back
#                           matter or references), summary = the abstract. Without --input the
#                           wheel is fetched with `pip download` into DIR/download/ (kept as a
#                           cache) and checked against the pinned sha256 c75ffc48d3eabc5f37c68e
#                           a087943780a85950087957759e89746f21111f2213 (SHA256 in
#                           fairseq_plugins/lab/data/readers/aclsum.py). With --input
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
#   --corpus facts          a controlled long-document task generated from real text: --input DIR
#                           is the output of data-prep/prepare-lm.sh (e.g. data/books; its
#                           raw/{train,valid,test}.txt, or a folder holding those three files).
#                           Each document is a passage of the matching split's sentences with K
#                           carrier sentences "The hidden word is VALUE." (VALUE from a closed
#                           set of 32 words, no repeats) placed by --placement; the summary is
#                           the K values in order. Also writes
#                           raw/{split}.facts.jsonl: each fact's value and its character and
#                           sentencepiece-token offsets (docs/data-preparation.md).
#   --doc-tokens N          facts: document length in sentencepiece tokens (as words x 1.3) [4096]
#   --facts K               facts: facts per document [6]
#   --examples T,V,S        facts: examples in train, valid, test [1000,100,100]
#   --seed S                facts: random seed (example i of a split: default_rng([S, split, i])) [1]
#   --placement P           facts: strata (equal counts in the tokens [0,1k), [1k,4k), [4k,end)) or
#                           uniform (boundaries drawn over the whole document: at --doc-tokens 16384
#                           about 70% of the facts lie past 4k) [strata]
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
# Needs: bash, a Python with fairseq-longmem installed (python next to fairseq-preprocess, or
# $PYTHON), fairseq-preprocess on PATH (or $FAIRSEQ_PREPROCESS); pip (that Python's) only for
# the default ACLSum download.
set -euo pipefail

PROG=prepare-summarization.sh
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# the pinned ACLSum wheel (name and sha256) lives in fairseq_plugins/lab/data/readers/aclsum.py

# shellcheck source=data-prep/options.sh
source "$HERE/options.sh"
# shellcheck source=data-prep/stages.sh
source "$HERE/stages.sh"

# ---- arguments (the checks that depend on the corpus come from its reader, in `prep summarization state`)
CORPUS=aclsum INPUT="" OUT=data/aclsum VOCAB="" SPM_MODEL="" DOC_FIELD="" SUM_FIELD="" DROP_EMPTY=0 WORKERS=2 FORCE=0
DOC_TOKENS="" FACTS="" EXAMPLES="" SEED="" PLACEMENT=""
OPTIONS=(--corpus=CORPUS --input=INPUT --out=OUT --vocab-size=VOCAB --spm-model=SPM_MODEL
         --document-field=DOC_FIELD --summary-field=SUM_FIELD --drop-empty!DROP_EMPTY --workers=WORKERS --force!FORCE
         --doc-tokens=DOC_TOKENS --facts=FACTS --examples=EXAMPLES --seed=SEED --placement=PLACEMENT)
parse_options "$@"
if [ -z "${VOCAB_GIVEN:-}" ]; then
    if [ "$CORPUS" = aclsum ]; then VOCAB=4000; else VOCAB=8000; fi
fi
need_int --vocab-size "$VOCAB" 10
need_int --workers "$WORKERS" 1
[ -n "$OUT" ] || die "--out must not be empty"
[ -n "$SPM_MODEL" ] && [ -n "${VOCAB_GIVEN:-}" ] && die "--vocab-size and --spm-model exclude each other (a reused model has its own vocabulary)"
FIELD_ARGS=()
if [ -n "${DOC_FIELD_GIVEN:-}" ]; then [ -n "$DOC_FIELD" ] || die "--document-field must not be empty"; FIELD_ARGS+=(--document-field "$DOC_FIELD"); fi
if [ -n "${SUM_FIELD_GIVEN:-}" ]; then [ -n "$SUM_FIELD" ] || die "--summary-field must not be empty"; FIELD_ARGS+=(--summary-field "$SUM_FIELD"); fi
# the facts generator's options go where the field options go (the reader checks them)
[ -n "${DOC_TOKENS_GIVEN:-}" ] && FIELD_ARGS+=(--doc-tokens "$DOC_TOKENS")
[ -n "${FACTS_GIVEN:-}" ] && FIELD_ARGS+=(--facts "$FACTS")
[ -n "${EXAMPLES_GIVEN:-}" ] && FIELD_ARGS+=(--examples "$EXAMPLES")
[ -n "${SEED_GIVEN:-}" ] && FIELD_ARGS+=(--seed "$SEED")
[ -n "${PLACEMENT_GIVEN:-}" ] && FIELD_ARGS+=(--placement "$PLACEMENT")
[ -e "$OUT" ] && [ ! -d "$OUT" ] && die "--out $OUT exists and is not a directory"

# ---- tools
find_tools

# ---- the manifest's options; `state` checks the corpus, its input and --spm-model, and takes
# the input's identity from these (as `finish` does); errors exit 2 here
INPUT_ARGS=()
[ -n "$INPUT" ] && INPUT_ARGS=(--input "$INPUT")
OPTS=(--out "$OUT" --corpus "$CORPUS" "${INPUT_ARGS[@]}" --vocab-size "$VOCAB" --spm-model "$SPM_MODEL" "${FIELD_ARGS[@]}")
[ "$DROP_EMPTY" = 1 ] && OPTS+=(--drop-empty)

# ---- up to date? different options? unfinished run?
state_rc=0
if [ "$FORCE" = 1 ]; then
    prep summarization state "${OPTS[@]}" --force || state_rc=$?
else
    prep summarization state "${OPTS[@]}" || state_rc=$?
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
CONVERT_IN="$INPUT"
DATASET_ARGS=()
if [ "$CORPUS" = aclsum ]; then
    stage_start fetch
    CONVERT_IN="$(prep summarization fetch-aclsum --out "$OUT" "${INPUT_ARGS[@]}" --python "$PYTHON")" || exit 2
    DATASET_ARGS=(--dataset "$CONVERT_IN")
    stage_end
fi

# ---- 2. examples -> normalised text (into a scratch folder; old output is kept until it works)
stage_start convert
rm -rf "$OUT/.raw.tmp"
CONVERT_OPTS=("${FIELD_ARGS[@]}")
[ "$DROP_EMPTY" = 1 ] && CONVERT_OPTS+=(--drop-empty)
prep summarization convert --corpus "$CORPUS" --input "$CONVERT_IN" --out "$OUT/.raw.tmp" "${CONVERT_OPTS[@]}" \
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

# ---- 3. sentencepiece, in one process: train (or copy --spm-model), encode, spm/dict.txt
stage_start spm
SPM_ARGS=()
[ -n "$SPM_MODEL" ] && SPM_ARGS=(--spm-model "$SPM_MODEL")
run_logged "$OUT/logs/spm.log" prep summarization tokenize --out "$OUT" --vocab-size "$VOCAB" "${SPM_ARGS[@]}" \
    --workers "$WORKERS"
if [ -n "$SPM_MODEL" ]; then stage_end "reused $SPM_MODEL"; else stage_end; fi

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
run_finish() { prep summarization finish "${OPTS[@]}" "${DATASET_ARGS[@]}" --workers "$WORKERS" --tools "$TOOLS_JSON" "${TIMINGS[@]}"; }
run_finish || exit 2
echo "total ${TIMINGS[-1]#total=}s"
