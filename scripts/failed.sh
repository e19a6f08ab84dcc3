# Sourced by the recipes: a failed step, said once.
#   failed PROG WHAT LOG [STATUS]  prints "PROG: WHAT failed; the end of its log LOG:" on stderr, then
#                                  the log's last 20 lines as they are (the recipes' logs leave
#                                  fairseq's setup messages out, so the tool's error line is last),
#                                  and exits with STATUS (default 1).
failed() {
  echo "$1: $2 failed; the end of its log $3:" >&2
  tail -n 20 "$3" >&2
  exit "${4:-1}"
}
