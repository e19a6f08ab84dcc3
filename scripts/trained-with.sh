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
