#!/usr/bin/env bash
# make-recall.sh - recall by distance (docs/results/recall.md) as fairseq binaries: one key written once in
# real book text, a query d tokens later whose answer is the key, d a multiple of the attention window.
#
# Usage:
#   bash fairseq_plugins/lab/recall/make-recall.sh [--window W] [--distances "0.5 1 2 4 8 16 32 64"] [--keys K]
#                                 [--repeat L] [--length N] [--train-examples N | --train-tokens N]
#                                 [--train-mix tokens|examples] [--valid-per-distance N]
#                                 [--test-per-distance N] [--seed S] [--books DIR] [--out DIR]
#                                 [--workers N] [--force]
#
# Each example (one line, an empty line after it: one document), in the tokens the models read:
#   <p filler pieces> @key K [@key K ...] <d - 1 filler pieces> @query K
# K: one of the closed set of K keys (single dictionary symbols @Ada, @Basil, ...; chance 1/K);
# d: tokens from the (last) key to the query marker, m x W for each multiple m of --distances;
# filler: consecutive sentencepiece pieces (the books folder's spm.model) of the books split of the
# same name, from a random paragraph start; p uniform in 0..W-1 (within --length). Train mixes the
# distances; valid and test hold the same number of examples at every distance.
# Example i of a split comes from numpy's default_rng([seed, split, 1, i]) (train 0, valid 1, test 2).
#
# Options (defaults in brackets):
#   --window W            attention window: the ∞-former's segment + short-term memory,
#                         transformer_lm's block [128]
#   --distances "M ..."   distances as multiples of W; m x W must be a whole number [0.5 1 2 4 8 16 32 64]
#   --keys K              size of the closed set of keys, at most 64 [32]
#   --repeat L            times the key phrase "@key K" is written [1]
#   --length N            most tokens of an example [the longest distance + 2L + W]
#   --train-examples N    examples in train [2000]
#   --train-tokens N      instead of --train-examples: as many as make about N tokens of stream
#   --train-mix MIX       tokens: about equal tokens per distance (more examples at short
#                         distances); examples: equal examples per distance [tokens]
#   --valid-per-distance N  [8]
#   --test-per-distance N   [64]
#   --seed S              [1]
#   --books DIR           books folder of data-prep/prepare-lm.sh (raw/, spm.model) [data/books]
#   --out DIR             output folder [data/recall]
#   --workers N           fairseq-preprocess workers [1]
#   --force               rebuild even if DIR holds output made with other options or an
#                         unfinished run (only this script's own files in DIR are replaced)
#   -h, --help            print this help
#
# Output in DIR:
#   raw/{train,valid,test}.txt   one example per line, an empty line after each
#   raw/{train,valid,test}.jsonl one record per example (distance, key, offsets)
#   dict.txt                     fixed dictionary: the sentencepiece pieces, @key, @query, the K keys
#   bin/                         fairseq-preprocess --only-source output: pass DIR/bin to fairseq-train
#                                (task streaming_lm with --reset-memory-at-document-boundary, or
#                                language_modeling; the loss on the answer: --loss-after-symbol @query)
#   manifest.json                options, and per example its distance, key and the token offsets of the
#                                key and the query in the binarized split, checked against it; written last
#   logs/preprocess.log
# Re-running with the same options on a complete DIR prints "up to date" and changes nothing.
#
# Needs: a Python with fairseq-longmem, numpy and sentencepiece (python next to fairseq-preprocess,
# or $PYTHON), fairseq-preprocess on PATH (or $FAIRSEQ_PREPROCESS).
set -euo pipefail

PROG=make-recall.sh
PREP="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../data-prep" && pwd)"  # the shared stages

# shellcheck source=data-prep/options.sh
source "$PREP/options.sh"
# shellcheck source=data-prep/stages.sh
source "$PREP/stages.sh"

WINDOW=128 DISTANCES="0.5 1 2 4 8 16 32 64" KEYS=32 REPEAT=1 LENGTH="" TRAIN="" TRAIN_TOKENS="" MIX=tokens
VALID=8 TEST=64 SEED=1 BOOKS=data/books OUT=data/recall WORKERS=1 FORCE=0
OPTIONS=(--window=WINDOW --distances=DISTANCES --keys=KEYS --repeat=REPEAT --length=LENGTH
         --train-examples=TRAIN --train-tokens=TRAIN_TOKENS --train-mix=MIX --valid-per-distance=VALID
         --test-per-distance=TEST --seed=SEED --books=BOOKS --out=OUT --workers=WORKERS --force!FORCE)
parse_options "$@"
need_int --window "$WINDOW" 1
need_int --keys "$KEYS" 1
need_int --repeat "$REPEAT" 1
[ -z "$LENGTH" ] || need_int --length "$LENGTH" 1
[ -z "$TRAIN" ] || need_int --train-examples "$TRAIN" 1
[ -z "$TRAIN_TOKENS" ] || need_int --train-tokens "$TRAIN_TOKENS" 1
[ -z "$TRAIN" ] || [ -z "$TRAIN_TOKENS" ] || die "give --train-examples or --train-tokens, not both"
need_int --valid-per-distance "$VALID" 1
need_int --test-per-distance "$TEST" 1
need_int --workers "$WORKERS" 1
need_int --seed "$SEED" 0
[ -e "$OUT" ] && [ ! -d "$OUT" ] && die "--out $OUT exists and is not a directory"

find_tools
OPTS=(--out "$OUT" --books "$BOOKS" --window "$WINDOW" --distances "$DISTANCES" --keys "$KEYS" --repeat "$REPEAT"
      --train-mix "$MIX" --valid-per-distance "$VALID" --test-per-distance "$TEST" --seed "$SEED")
[ -z "$LENGTH" ] || OPTS+=(--length "$LENGTH")
if [ -n "$TRAIN_TOKENS" ]; then OPTS+=(--train-tokens "$TRAIN_TOKENS")
else OPTS+=(--train-examples "${TRAIN:-2000}"); fi

WRITE_DICT_OPTS=("${OPTS[@]}")
build_generated recall manifest.json \
    "generating recall by distance -> $OUT (W $WINDOW, distances $DISTANCES x W, $KEYS keys, seed $SEED)"
