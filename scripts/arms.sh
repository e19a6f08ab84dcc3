# Sourced by the shell scripts (needs ROOT): the registry of experiment arms (fairseq-longmem arms).
#   arm_args NAME QUERY...   NAME=(the lines `fairseq-longmem arms QUERY...` prints, one element
#                            each); on an error it has printed its one line: exit with its status
arm_args() {
  local -n _into=$1; shift; local out
  out=$(fairseq-longmem arms "$@") || exit $?
  _into=(); [ -z "$out" ] || mapfile -t _into <<< "$out"
}
#   arm_budget JOB PROG [--export]   set (or export) the job's budget variables: the environment's
#                            value or the default (`fairseq-longmem arms budget JOB`); a bad value: exit 2
arm_budget() {
  local _kv _budget
  arm_args _budget budget "$1" --prog "$2"
  for _kv in "${_budget[@]}"; do
    if [ "${3:-}" = --export ]; then export "${_kv?}"; else declare -g "${_kv?}"; fi
  done
}
