# Shared helpers of the data-prep pipelines (sourced, not run): timed stages and
# commands whose output goes to a log. The caller sets PROG (its name, used in
# error lines) and may set RUN_LOGGED_STATUS (exit status on failure, default 2).
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
