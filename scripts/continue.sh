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
# memory_off work. More options: python scripts/continue_text.py --help.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
HERE=$(cd "$(dirname "$0")" && pwd)
# the checkout's environment (scripts/install.sh) when there is one, else the python on PATH
if [ -z "${PYTHON:-}" ] && [ -x "$HERE/../.venv/bin/python" ]; then PYTHON="$HERE/../.venv/bin/python"; fi
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
exec "$PYTHON" "$HERE/continue_text.py" "$@"
