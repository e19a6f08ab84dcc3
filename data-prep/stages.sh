# Shared helpers of the data-prep pipelines (sourced, not run): the tools, the Python stages
# (`fairseq-longmem prep`), timed stages and commands whose output goes to a log. The caller
# sets PROG (its name, used in error lines), defines die(), and may set RUN_LOGGED_STATUS
# (exit status on failure, default 2).

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

# create OUT if needed and mark it unfinished ($OUT/.unfinished, fairseq_plugins/data_prep/manifest.py UNFINISHED) until the
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
