#!/usr/bin/env bash
# Continue a text with an infinite_former_lm checkpoint (docs/generation.md).
#
#   bash scripts/continue.sh --checkpoint CK --data OUT/bin --prompt-file book.txt \
#       [--prompt-tokens 20000] [--max-len 200] [--sampling --sampling-topp P | --beam K] [--seed S]
#
# The prompt is sentencepiece-encoded with the data-prep model (OUT/spm.model, next to
# OUT/bin), the last --prompt-tokens tokens are kept and read once (chunked prefill, memory
# of constant size); fairseq's SequenceGenerator then generates up to --max-len tokens,
# which are decoded and printed. Checkpoints of scripts/train.sh infinite_former and
# memory_off work. THREADS: torch's CPU threads (default 1 on a CPU; a line on stderr says so).
# More options: fairseq-longmem continue --help.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# the checkout's environment (scripts/install.sh) when there is one, else the tools on PATH
if [ -x "$ROOT/.venv/bin/fairseq-longmem" ]; then PATH="$ROOT/.venv/bin:$PATH"; fi
. "$ROOT/scripts/threads.sh"
DEVICE=cpu
case " $* " in *" --cpu "*) ;; *)
  if torch_cuda; then DEVICE=cuda; fi ;;
esac
set_threads continue.sh "$DEVICE" >&2   # stdout is the continuation
exec fairseq-longmem continue --prog continue.sh "$@"
