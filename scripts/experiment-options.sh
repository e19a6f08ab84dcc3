# Sourced by the arm × seed recipes (fairseq_plugins/lab/recall/recall.sh, fairseq_plugins/lab/mqar/mqar.sh): their common options.
#   experiment_options PROG JOB "$@"
#       parses --seeds S, --arms "A B", --out DIR, --data DIR, --quick, -h/--help (the comment
#       block at the top of the recipe, $0) and, after --, the options passed on to fairseq-train;
#       sets SEEDS (space-separated, checked by fairseq-longmem arms seeds), ARMS (checked by
#       fairseq-longmem arms check JOB, else the job's default arms), OUT, DATA, QUICK (0 or 1) and
#       the array TRAIN_EXTRA. A bad option is one line "PROG: error: ..." and exit 2, before
#       anything is built.
experiment_options() {
  local prog=$1 job=$2
  shift 2
  ARMS="" ARMS_GIVEN=0 OUT="" DATA="" SEEDS=1 QUICK=0
  TRAIN_EXTRA=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --seeds|--arms|--out|--data)
        [ $# -ge 2 ] || { echo "$prog: error: $1 needs a value (see --help)" >&2; exit 2; } ;;&
      --seeds) SEEDS=$2; shift 2 ;;
      --arms) ARMS=$2; ARMS_GIVEN=1; shift 2 ;;
      --out) OUT=$2; shift 2 ;;
      --data) DATA=$2; shift 2 ;;
      --quick) QUICK=1; shift ;;
      --) shift; TRAIN_EXTRA=("$@"); break ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
      *) echo "$prog: error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
  done
  # everything that can be refused is refused here, before any data is built or any folder created
  SEEDS=$(fairseq-longmem arms seeds --prog "$prog" "$SEEDS" | tr '\n' ' ') || exit $?
  if [ "$ARMS_GIVEN" = 1 ]; then
    fairseq-longmem arms check "$job" --prog "$prog" --arms="$ARMS" || exit $?
  else
    ARMS=$(fairseq-longmem arms list "$job" --default | tr '\n' ' ')
  fi
}
