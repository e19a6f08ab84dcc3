# Shared helpers of the data-prep pipelines (sourced, not run): the tools, the Python stages
# (`fairseq-longmem prep`), timed stages, commands whose output goes to a log, and the build of a
# generated task (build_generated). The caller sets PROG (its name, used in error lines), defines
# die(), and may set RUN_LOGGED_STATUS (exit status on failure, default 2).

# FAIRSEQ_PREPROCESS and PYTHON (the python next to fairseq-preprocess unless set), or one error line
find_tools() {
    FAIRSEQ_PREPROCESS="${FAIRSEQ_PREPROCESS:-fairseq-preprocess}"
    command -v "$FAIRSEQ_PREPROCESS" >/dev/null 2>&1 \
        || die "fairseq-preprocess not found on PATH (activate the environment with fairseq, or set FAIRSEQ_PREPROCESS)"
    if [ -z "${PYTHON:-}" ]; then
        local fp_dir; fp_dir="$(dirname "$(command -v "$FAIRSEQ_PREPROCESS")")"
        if [ -x "$fp_dir/python" ]; then PYTHON="$fp_dir/python"; else PYTHON=python3; fi
    fi
    command -v "$PYTHON" >/dev/null 2>&1 || die "python not found ($PYTHON); set PYTHON"
}

# a Python stage: `fairseq-longmem prep ARGS` run by $PYTHON. Its stdout is the caller's; its one
# error line "fairseq-longmem prep ...: error: MSG" is shown as "$PROG: error: MSG", and the notice
# fairseq logs when its text-to-speech tasks are imported (tensorboardX missing) is dropped
prep() {
    { "$PYTHON" -m fairseq_plugins.cli prep "$@" 2>&1 1>&3 3>&- \
        | sed -u -E -e '/^INFO:fairseq\.tasks\.[a-z_]*text_to_speech:/d' \
            -e "s/^fairseq-longmem prep[^:]*: error: /$PROG: error: /" >&2; } 3>&1
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
TIMINGS=()
stage_start() { STAGE_NAME="$1"; STAGE_T0="$(now)"; }
stage_end() {
    local s; s="$(elapsed "$STAGE_T0")"
    TIMINGS+=(--timing "$STAGE_NAME=$s")
    printf '%-10s %6ss%s\n' "$STAGE_NAME" "$s" "${1:+  $1}"
}
# run a command with its output in a log; on failure show one line: the helper's own error
# line if it printed one, else a pointer to the log
run_logged() {
    local log="$1"; shift
    if ! "$@" >"$log" 2>&1; then
        grep -m1 "^$PROG: error:" "$log" >&2 || echo "$PROG: error: $(basename "$1") failed; see $log" >&2
        exit "${RUN_LOGGED_STATUS:-2}"
    fi
}

# the versions of the tools that made the output, as JSON for the manifest ({} if unknown)
tool_versions() {
    "$PYTHON" -c 'import json, importlib.metadata as m
v = {}
for p in ("sentencepiece", "ve-fairseq", "fairseq"):
    try: v[p] = m.version(p)
    except Exception: pass
print(json.dumps(v))' 2>/dev/null || echo '{}'
}

# create OUT if needed and mark it unfinished ($OUT/.unfinished, fairseq_plugins/lab/data/manifest.py UNFINISHED) until the
# manifest is written: a rerun after a failure or a kill redoes the build without --force. At exit: the
# marker goes once prepare.json is there (written last; a failure before the old output was dropped
# leaves it whole); on failure scratch files go ($OUT/.raw.tmp, its log and the download cache's
# scratch folder $1), and OUT itself if this run created it and left nothing useful
prepare_out_dir() {
    DOWNLOAD_SCRATCH=$1
    OUT_CREATED=0
    if [ ! -d "$OUT" ]; then mkdir -p "$OUT"; OUT_CREATED=1; fi
    : >"$OUT/.unfinished"
    trap _cleanup_out_dir EXIT
}
_cleanup_out_dir() {
    local rc=$?
    if [ -f "$OUT/prepare.json" ]; then rm -f "$OUT/.unfinished"; fi
    if [ "$rc" != 0 ]; then
        rm -rf "$OUT/.raw.tmp" "$OUT/.raw.tmp.log" "$OUT/download/$DOWNLOAD_SCRATCH"
        if [ "$OUT_CREATED" = 1 ]; then
            rmdir "$OUT/download" 2>/dev/null || true
            if [ -z "$(ls -A "$OUT" | grep -vx '.unfinished')" ]; then rm -f "$OUT/.unfinished"; fi
            rmdir "$OUT" 2>/dev/null || true
        fi
    fi
}

# build_generated TOPIC MANIFEST MESSAGE: the build of a generated task (make-sorting.sh,
# make-recall.sh) into the caller's OUT, with its FORCE, OPTS (the options every `prep TOPIC` stage
# takes) and WRITE_DICT_OPTS (those of its write-dict): `prep TOPIC state` (up to date: exit 0; a
# refusal: its one line, exit with its status), then MESSAGE, `generate` into OUT/.raw.tmp, moved to
# OUT/raw once whole (this script's previous output dropped, MANIFEST first), `write-dict`,
# fairseq-preprocess --only-source into OUT/bin (its log OUT/logs/preprocess.log) and `finish`
# (MANIFEST, written last). On failure the scratch folder goes, and OUT too if this run created it
# and it holds no log worth reading.
build_generated() {
    local topic=$1 manifest=$2 t0 state_rc=0
    if [ "$FORCE" = 1 ]; then prep "$topic" state "${OPTS[@]}" --force || state_rc=$?
    else prep "$topic" state "${OPTS[@]}" || state_rc=$?; fi
    case "$state_rc" in
        0) ;;
        3) exit 0 ;;                # "up to date" already printed
        *) exit "$state_rc" ;;      # one-line reason already printed
    esac
    OUT_CREATED=0
    if [ ! -d "$OUT" ]; then mkdir -p "$OUT"; OUT_CREATED=1; fi
    trap _cleanup_generated EXIT
    echo "$3"
    t0=$(date +%s)
    rm -rf "$OUT/.raw.tmp"
    prep "$topic" generate "${OPTS[@]}" --raw "$OUT/.raw.tmp"
    # the new text is good: drop this script's previous output (manifest first) and move it in
    rm -f "$OUT/$manifest" "$OUT/dict.txt"
    rm -rf "$OUT/raw" "$OUT/bin" "$OUT/logs"
    mv "$OUT/.raw.tmp" "$OUT/raw"
    mkdir -p "$OUT/logs"
    prep "$topic" write-dict "${WRITE_DICT_OPTS[@]}" --path "$OUT/dict.txt"
    if ! "$FAIRSEQ_PREPROCESS" --only-source --trainpref "$OUT/raw/train.txt" --validpref "$OUT/raw/valid.txt" \
            --testpref "$OUT/raw/test.txt" --srcdict "$OUT/dict.txt" --destdir "$OUT/bin" \
            --workers "$WORKERS" >"$OUT/logs/preprocess.log" 2>&1; then
        echo "$PROG: error: fairseq-preprocess failed; see $OUT/logs/preprocess.log" >&2
        exit 1
    fi
    prep "$topic" finish "${OPTS[@]}"
    echo "total $(( $(date +%s) - t0 ))s"
}
_cleanup_generated() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        rm -rf "$OUT/.raw.tmp"
        # a folder this run created goes, unless it holds a log worth reading
        if [ "$OUT_CREATED" = 1 ] && [ ! -d "$OUT/logs" ]; then rm -rf "$OUT"; fi
    fi
}
