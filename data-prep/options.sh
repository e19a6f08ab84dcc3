# The one option parser of the data-prep pipelines (sourced, not run), with their usage() (the
# comment block at the top of the script run, up to `set -euo pipefail`) and die MESSAGE (one line
# "PROG: error: MESSAGE", exit DIE_STATUS, default 2). The caller sets PROG and declares its
# options in OPTIONS, one word each:
#   --name=VAR   takes a value: "--name VALUE" or "--name=VALUE" sets VAR and VAR_GIVEN=1
#   --name!VAR   a flag: sets VAR=1
# -h/--help prints usage and exits 0; anything else is one error line naming it.
usage() {
    sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed -E 's/^# ?//'
}
die() {
    echo "$PROG: error: $*" >&2
    exit "${DIE_STATUS:-2}"
}
parse_options() {
    local arg spec name var found
    while [ $# -gt 0 ]; do
        arg="$1"
        case "$arg" in -h|--help) usage; exit 0 ;; esac
        found=0
        for spec in "${OPTIONS[@]}"; do
            case "$spec" in
                *=*)
                    name="${spec%%=*}"; var="${spec#*=}"
                    if [ "$arg" = "$name" ]; then
                        [ $# -ge 2 ] || die "$name needs a value (see --help)"
                        printf -v "$var" '%s' "$2"; printf -v "${var}_GIVEN" 1; shift 2; found=1; break
                    elif [ "${arg%%=*}" = "$name" ] && [ "$arg" != "$name" ]; then
                        printf -v "$var" '%s' "${arg#*=}"; printf -v "${var}_GIVEN" 1; shift; found=1; break
                    fi ;;
                *'!'*)
                    name="${spec%%!*}"; var="${spec#*!}"
                    if [ "$arg" = "$name" ]; then printf -v "$var" 1; shift; found=1; break; fi ;;
            esac
        done
        [ "$found" = 1 ] || die "unknown argument '$arg' (see --help)"
    done
}

# need_int OPTION VALUE MIN: VALUE is a decimal integer >= MIN, else one error line
need_int() {
    local what="an integer >= $3"
    [ "$3" = 1 ] && what="a positive integer"
    [ "$3" = 0 ] && what="a non-negative integer"
    [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || die "$1 must be $what, not '$2'"
}
