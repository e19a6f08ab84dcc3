# Sourced by the recipes: what an arm was trained with, kept beside its checkpoint, so that a later
# run into the same folder never reuses it under another budget.
#   trained_with PROG JOB [OPTIONS...]
#       prints one line: the job's budget variables as this run sets them (fairseq-longmem arms
#       budget JOB --one-line, SEED included) and, after " -- ", the options passed on to fairseq-train
#   check_trained_with PROG DIR RECORDED NOW
#       RECORDED: the line of the run in DIR (empty: a run that recorded none, taken as it is); when
#       it differs from NOW, one line "PROG: error: DIR was trained with another budget (NAME old ->
#       new, ...)" naming the fix, and exit 2
#   check_reusable PROG DIR NOW RESULT DATA WHAT
#       a run folder of a scored experiment: check_trained_with of the line DIR/trained_with records,
#       then, when DIR/RESULT (its score, JSON) was scored on other data than DATA/bin (the path as
#       the scorer writes it: absolute, links kept), one line naming WHAT differs there, and exit 2
#   train_arm PROG JOB ARM BIN DIR NOW TITLE STEP
#       ARM of JOB trained on BIN into DIR (`fairseq-longmem arms train`, SEED from the environment,
#       TRAIN_EXTRA after the arm's own options, the log in DIR/train.log), from scratch, never a
#       resume one update further; skipped when DIR holds a finished training (checkpoint_last.pt
#       and train_seconds). Prints "== TITLE: ..."; records NOW in DIR/trained_with; a failed
#       training is `failed PROG STEP` (scripts/failed.sh, sourced by the recipe), exit 2
trained_with() {
  local prog=$1 job=$2 line
  shift 2
  line=$(fairseq-longmem arms budget "$job" --one-line --unchecked --prog "$prog") || exit 2
  if [ $# -gt 0 ]; then line+=" -- $*"; fi
  printf '%s\n' "$line"
}
check_trained_with() {
  local prog=$1 dir=$2 old=$3 now=$4 differs="" kv was old_opts="" now_opts=""
  if [ -z "$old" ] || [ "$old" = "$now" ]; then return 0; fi
  for kv in ${now%% -- *}; do  # "NAME old -> new" for each budget variable that changed
    was=$(tr ' ' '\n' <<< "${old%% -- *}" | sed -n "s/^${kv%%=*}=//p")
    [ "$was" = "${kv#*=}" ] || differs+="${differs:+, }${kv%%=*} ${was:-?} -> ${kv#*=}"
  done
  if [[ "$old" == *" -- "* ]]; then old_opts=${old#* -- }; fi
  if [[ "$now" == *" -- "* ]]; then now_opts=${now#* -- }; fi
  [ "$old_opts" = "$now_opts" ] || differs+="${differs:+, }options after -- '$old_opts' -> '$now_opts'"
  echo "$prog: error: $dir was trained with another budget ($differs); delete $dir to retrain with" \
    "this one, or use another --out" >&2
  exit 2
}
check_reusable() {
  local prog=$1 dir=$2 now=$3 result=$4 data=$5 what=$6
  check_trained_with "$prog" "$dir" "$(cat "$dir/trained_with" 2>/dev/null)" "$now"
  if [ -f "$dir/$result" ] && ! grep -qF "\"data\": \"$(realpath -ms "$data/bin")\"" "$dir/$result"; then
    echo "$prog: error: $dir holds a run scored on other data than $data ($what); give this run another" \
      "--out, or delete $dir" >&2
    exit 2
  fi
}
train_arm() {
  local prog=$1 job=$2 arm=$3 bin=$4 dir=$5 now=$6 title=$7 step=$8 t0
  if [ -f "$dir/checkpoint_last.pt" ] && [ -f "$dir/train_seconds" ]; then
    echo "== $title: already trained ($dir/checkpoint_last.pt)"
    return 0
  fi
  rm -f "$dir/checkpoint_last.pt"
  t0=$(date +%s)
  echo "== $title: training (log $dir/train.log)"
  fairseq-longmem arms train --prog "$prog" "$job" "$arm" "$bin" "$dir" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"} \
    > "$dir/train.log" 2>&1 || failed "$prog" "$step" "$dir/train.log" 2
  echo "$(( $(date +%s) - t0 ))" > "$dir/train_seconds"
  echo "$now" > "$dir/trained_with"
  echo "   trained in $(cat "$dir/train_seconds")s"
}
